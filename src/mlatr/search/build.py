"""Writing an index: build or grow one from a manifest, write rows already encoded, delete clips.

Where the index goes is its :class:`~mlatr.search.storage.Storage` (chosen once from the output's name:
:func:`~mlatr.search.storage_choice.open_storage`), which writes: a local index under its writer lock
(:func:`mlatr.writer_lock.writer_lock`: a second writer waits, saying so, and adds its clips after the first's),
reading the index again under it. Encoding runs without the lock: :func:`plan_build` decides, from the index as
it is, what is encoded (:mod:`mlatr.search.build_plan`) and :func:`write_build` encodes it and writes it in this
process; ``mlatr index build`` under torchrun hands the same plan to
:func:`mlatr.search.rank_build.build_by_rank` instead, each process encoding its part.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from mlatr.data.manifest import Manifest
from mlatr.data.webdataset_shards import ShardIndex
from mlatr.errors import MlatrError
from mlatr.inference import LoadedModel
from mlatr.inference.model_identity import model_sha256
from mlatr.search.ann import EXACT_BELOW, AnnBuild
from mlatr.search.build_plan import BuildPlan, plan_build
from mlatr.search.index import Index
from mlatr.search.library_encoding import (
    EncodeSettings,
    build_settings,
    encode_clips,
    finished_encoding,
    index_meta,
)
from mlatr.search.segments import Segmenting, segmenting
from mlatr.search.shards import DTYPES
from mlatr.search.storage import Storage
from mlatr.search.storage_choice import open_storage


@dataclass
class BuildReport:
    """What one ``build_index`` did: the index as written, clips encoded and kept, clips skipped as
    unreadable, clips re-encoded because their file changed since the index was built, clips dropped
    because their file is gone, and the bytes written."""

    index: Index
    added: int
    kept: int
    skipped: dict[str, str]
    changed: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    bytes_written: int = 0


@dataclass
class BuildJob:
    """A build planned against the index as it is: what is encoded (``plan``), how (``encode``), into which
    ``storage`` (where the output lives), with which meta and caption languages."""

    loaded: LoadedModel
    manifest: Manifest
    storage: Storage
    add: bool
    langs: list[str]
    meta: dict
    plan: BuildPlan
    encode: EncodeSettings
    dtype: str
    ann: AnnBuild
    #: refuses an index built with another checkpoint or other audio settings (re-checked under the lock)
    check: Callable[[dict], None]


def build_index(loaded: LoadedModel, manifest: Manifest, output: str | os.PathLike, *, add: bool = False,
                caption_languages: Sequence[str] | None = None, batch_size: int = 16, max_seconds: float | None = None,
                window_seconds: float | None = None, sample_rate: int | None = None, skip_bad: bool = False,
                progress: bool = False, dtype: str = "float32", ann: str = "auto",
                ann_params: dict | None = None, ann_exact_below: int = EXACT_BELOW,
                shards: ShardIndex | None = None, segments: Segmenting | None = None, workers: int = 1) -> BuildReport:
    """Encode ``manifest``'s clips (and captions) with ``loaded`` and write the index to ``output`` (a folder,
    or one file when it ends in ``.npz``, or a Milvus target; ``dtype`` / ``ann`` / ``ann_params``: a
    folder's, see :meth:`Index.save`).

    With ``add`` and an existing ``output``, only clips whose id is not in it are encoded and appended
    (a folder gains one shard; an ``.npz`` is rewritten; ``ann_exact_below``: see
    :func:`mlatr.search.ann.build_ann`); a clip whose audio changed since it was encoded
    (size or mtime) is encoded again and its old row deleted; an indexed clip whose file is gone, listed in
    the manifest or not, is deleted (a tombstone; both listed in the report). The existing index must come from the same
    checkpoint file (same SHA-256). Encoding runs without the writer lock; the write takes it (a second
    writer waits, saying so) and re-reads the index first, so two concurrent adds keep both's clips.
    ``caption_languages`` default to every language of the manifest. ``max_seconds`` / ``sample_rate``
    default to the model's training data settings (``eval_max_seconds``, ``sample_rate``). A clip longer
    than ``window_seconds`` (default: the model's ``eval_max_seconds``) is encoded as windows,
    ``batch_size`` windows at a time (:mod:`mlatr.inference.audio`), so memory does not grow with
    ``max_seconds`` or the library. An unreadable clip is an error, or with ``skip_bad`` skipped and
    listed in the report; a manifest none of whose clips can be read is an error either way. ``shards``: the
    webdataset shards ``manifest`` was read from (:func:`~mlatr.data.webdataset_shards.index_shards`); each
    clip's audio is then its shard member, whose address (``SHARD#MEMBER``) the index records as the clip's
    path, with no file state (never stale). ``segments``: how long clips are also indexed as segments
    (:mod:`mlatr.search.segments`; default :func:`~mlatr.search.segments.segmenting` of the window; an ``--add``
    keeps the index's own). ``workers`` processes read and encode the audio (1: this process); the
    vectors are kept as they come, so the same build started again after a kill encodes only what was left
    (:func:`~mlatr.search.library_encoding.encoding_journal`).
    """
    job = plan_index_build(loaded, manifest, output, add=add, caption_languages=caption_languages,
                           batch_size=batch_size, max_seconds=max_seconds, window_seconds=window_seconds,
                           sample_rate=sample_rate, skip_bad=skip_bad, progress=progress, dtype=dtype,
                           ann=AnnBuild(ann, ann_params, ann_exact_below, progress), shards=shards,
                           segments=segments, workers=workers)
    return write_build(job)


def plan_index_build(loaded: LoadedModel, manifest: Manifest, output: str | os.PathLike, *, add: bool = False,
                     caption_languages: Sequence[str] | None = None, batch_size: int = 16,
                     max_seconds: float | None = None, window_seconds: float | None = None,
                     sample_rate: int | None = None, skip_bad: bool = False, progress: bool = False,
                     dtype: str = "float32", ann: AnnBuild | None = None,
                     shards: ShardIndex | None = None, segments: Segmenting | None = None,
                     workers: int = 1) -> BuildJob:
    """The :class:`BuildJob` of :func:`build_index`'s arguments: settings resolved, the output prepared (its
    path checked, a killed build's temporary files removed; a folder is made when the first rows are written),
    the existing index read and checked, the clips to encode and delete planned
    (:func:`~mlatr.search.build_plan.plan_build`)."""
    if loaded.path is None:
        raise MlatrError("build_index needs a model loaded from a checkpoint file (the index records it)")
    if dtype not in DTYPES:
        raise MlatrError(f"dtype must be one of {', '.join(DTYPES)}, not {dtype!r}")
    sha = model_sha256(Path(loaded.path).resolve())
    sample_rate, max_seconds, window_seconds = build_settings(loaded, max_seconds, window_seconds, sample_rate)
    if not manifest.clips:
        raise MlatrError(f"no clip to index in {manifest.path or 'the manifest'}")
    langs = list(caption_languages) if caption_languages else manifest.languages()
    storage = open_storage(output)
    storage.check_output()
    # another model is refused with its own message (_check_same_build)
    existing = Index.load(output, model=loaded, allow_other_model=True) if add and storage.exists() else None

    def check(meta: dict) -> None:
        _check_same_build(output, meta, sha, sample_rate, max_seconds, window_seconds)

    cut = segments if segments is not None else segmenting(window_seconds)
    if existing is not None:
        check(existing.meta)
        langs = list(existing.meta["caption_languages"])
        if "segments" in existing.meta:  # the index's own way of cutting, for every clip it holds
            cut = Segmenting.of_meta(existing.meta["segments"])
    meta = index_meta(loaded, manifest, sample_rate, max_seconds, langs, window_seconds, sha, cut)
    encode = EncodeSettings(sample_rate, max_seconds, window_seconds, batch_size, skip_bad, progress, shards, cut,
                            workers=workers, resume=True)
    return BuildJob(loaded, manifest, storage, add, langs, meta, plan_build(existing, manifest.clips, manifest.root),
                    encode, dtype, ann or AnnBuild(progress=progress), check)


def write_build(job: BuildJob) -> BuildReport:
    """Encode the job's new clips in this process and write them (see :func:`build_index`)."""
    part, skipped = encode_clips(job.loaded, job.manifest, job.plan.new, job.langs, job.encode, job.meta)
    written = job.storage.write(part, add=job.add, drop=job.plan.drop, dtype=job.dtype, ann=job.ann, check=job.check)
    index = Index.load(job.storage.where, model=job.loaded)
    finished_encoding(job.loaded, job.manifest, job.plan.new, job.encode)
    index.record_abstention()  # its "nothing relevant" level, for the library as it now is
    return BuildReport(index=index, added=len(part.clips), kept=len(index) - len(part.clips), skipped=skipped,
                       changed=job.plan.changed, deleted=job.plan.deleted, bytes_written=written)


def write_rows(output: str | os.PathLike, part: Index, *, add: bool = True, drop: dict[str, int] | None = None,
               dtype: str = "float32", build: AnnBuild | None = None,
               check: Callable[[dict], None] | None = None) -> int:
    """Write the rows of ``part`` (embeddings already computed) into the index at ``output`` (its storage takes
    its writer lock) and return the bytes written. With ``add`` and an existing index, it is read again under the
    lock (``check(meta)`` may refuse it), the rows of the ids in ``drop`` or in ``part`` are deleted, and ``part``
    is appended: a folder gains one shard and a new manifest, an ``.npz`` is rewritten, Milvus gets inserts and
    deletes. Otherwise ``part`` replaces whatever was at ``output``."""
    return open_storage(output).write(part.tables, add=add, drop=drop or {}, dtype=dtype, ann=build or AnnBuild(),
                                      check=check)


def _check_same_build(output, meta: dict, sha: str, sample_rate: int, max_seconds: float,
                      window_seconds: float) -> None:
    if meta["checkpoint"]["sha256"] != sha:
        raise MlatrError(f"{output} was built with checkpoint {meta['checkpoint']['path']} "
                         f"(another model); rebuild it without --add")
    if (meta["sample_rate"] != sample_rate or meta["max_seconds"] != max_seconds
            or meta.get("window_seconds", max_seconds) != window_seconds):
        raise MlatrError(f"{output} was built at {meta['sample_rate']} Hz / "
                         f"{meta['max_seconds']} s (windows of "
                         f"{meta.get('window_seconds', meta['max_seconds'])} s); "
                         "--add must use the same settings")


def delete_clips(path: str | os.PathLike, ids: Sequence[str]) -> int:
    """Delete the clips ``ids`` from the index at ``path`` (a folder: tombstones in its manifest; an ``.npz``:
    rewritten without them; Milvus: deletes), under its writer lock where it has one; an unknown id is an error.
    Returns the count."""
    return open_storage(path).delete(list(ids))
