"""Writing an index: build or grow one from a manifest, write rows already encoded, delete clips.

Every writer holds :func:`mlatr.writer_lock.writer_lock` on the output for the write (a second one waits,
saying so, and adds its clips after the first's) and reads the index again under it. Encoding runs
without the lock: :func:`plan_build` decides, from the index as it is, what is encoded
(:mod:`mlatr.search.build_plan`) and :func:`write_build` encodes it and writes it in this process;
``mlatr index build`` under torchrun hands the same plan to :func:`mlatr.search.rank_build.build_by_rank`
instead, each process encoding its part.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from mlatr.data.manifest import Manifest
from mlatr.data.webdataset_shards import ShardIndex
from mlatr.errors import MlatrError
from mlatr.inference import LoadedModel
from mlatr.inference.model_identity import model_sha256
from mlatr.io_utils import remove_orphan_temps
from mlatr.output_paths import check_output_path
from mlatr.search import milvus
from mlatr.search import shards as shard_files
from mlatr.search.ann import EXACT_BELOW, AnnBuild
from mlatr.search.build_plan import BuildPlan, live_rows, plan_build, renewed_rows
from mlatr.search.columns import CaptionColumns, ClipColumns
from mlatr.search.fused_recall import measure_fused_recall
from mlatr.search.index import Index
from mlatr.search.library_encoding import (
    EncodeSettings,
    build_settings,
    encode_clips,
    finished_encoding,
    index_meta,
)
from mlatr.writer_lock import writer_lock


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
    ``output`` (a folder, an ``.npz`` or a Milvus ``target``), with which meta and caption languages."""

    loaded: LoadedModel
    manifest: Manifest
    output: Path
    target: str | None  # a Milvus target, else None
    add: bool
    langs: list[str]
    meta: dict
    plan: BuildPlan
    encode: EncodeSettings
    dtype: str
    ann: AnnBuild
    #: refuses an index built with another checkpoint or other audio settings (re-checked under the lock)
    check: Callable[[Index], None]


def build_index(loaded: LoadedModel, manifest: Manifest, output: str | os.PathLike, *, add: bool = False,
                caption_languages: Sequence[str] | None = None, batch_size: int = 16, max_seconds: float | None = None,
                window_seconds: float | None = None, sample_rate: int | None = None, skip_bad: bool = False,
                progress: bool = False, dtype: str = "float32", ann: str = "auto",
                ann_params: dict | None = None, ann_exact_below: int = EXACT_BELOW,
                shards: ShardIndex | None = None, workers: int = 1) -> BuildReport:
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
    path, with no file state (never stale). ``workers`` processes read and encode the audio (1: this process); the
    vectors are kept as they come, so the same build started again after a kill encodes only what was left
    (:func:`~mlatr.search.library_encoding.encoding_journal`).
    """
    job = plan_index_build(loaded, manifest, output, add=add, caption_languages=caption_languages,
                           batch_size=batch_size, max_seconds=max_seconds, window_seconds=window_seconds,
                           sample_rate=sample_rate, skip_bad=skip_bad, progress=progress, dtype=dtype,
                           ann=AnnBuild(ann, ann_params, ann_exact_below, progress), shards=shards, workers=workers)
    return write_build(job)


def plan_index_build(loaded: LoadedModel, manifest: Manifest, output: str | os.PathLike, *, add: bool = False,
                     caption_languages: Sequence[str] | None = None, batch_size: int = 16,
                     max_seconds: float | None = None, window_seconds: float | None = None,
                     sample_rate: int | None = None, skip_bad: bool = False, progress: bool = False,
                     dtype: str = "float32", ann: AnnBuild | None = None,
                     shards: ShardIndex | None = None, workers: int = 1) -> BuildJob:
    """The :class:`BuildJob` of :func:`build_index`'s arguments: settings resolved, the output prepared (its
    path checked, a killed build's temporary files removed; a folder is made when the first rows are written),
    the existing index read and checked, the clips to encode and delete planned
    (:func:`~mlatr.search.build_plan.plan_build`)."""
    if loaded.path is None:
        raise MlatrError("build_index needs a model loaded from a checkpoint file (the index records it)")
    if dtype not in shard_files.DTYPES:
        raise MlatrError(f"dtype must be one of {', '.join(shard_files.DTYPES)}, not {dtype!r}")
    sha = model_sha256(Path(loaded.path).resolve())
    sample_rate, max_seconds, window_seconds = build_settings(loaded, max_seconds, window_seconds, sample_rate)
    if not manifest.clips:
        raise MlatrError(f"no clip to index in {manifest.path or 'the manifest'}")
    langs = list(caption_languages) if caption_languages else manifest.languages()
    target = str(output) if milvus.is_milvus(output) else None
    output = Path(output) if target is not None else check_output_path(output, "output", folder=None)
    if target is None and shard_files.is_index_folder(output):
        shard_files.refuse_foreign_folder(output)  # the folder is made when the first rows are written
    elif target is None:
        remove_orphan_temps(output.parent, [output.name])  # what a killed build left beside the index
    if target is not None:
        there = add and milvus.read_meta(target)  # another model is refused with its own message (_check_same_build)
        existing = Index.load(target, model=loaded, allow_other_model=True) if there else None
    else:
        existing = _existing(output, loaded) if add else None

    def check(index: Index) -> None:
        _check_same_build(output, index, sha, sample_rate, max_seconds, window_seconds)

    if existing is not None:
        check(existing)
        langs = list(existing.meta["caption_languages"])
    meta = index_meta(loaded, manifest, sample_rate, max_seconds, langs, window_seconds, sha)
    encode = EncodeSettings(sample_rate, max_seconds, window_seconds, batch_size, skip_bad, progress, shards,
                            workers=workers, resume=True)
    return BuildJob(loaded, manifest, output, target, add, langs, meta, plan_build(existing, manifest.clips,
                                                                                   manifest.root),
                    encode, dtype, ann or AnnBuild(progress=progress), check)


def write_build(job: BuildJob) -> BuildReport:
    """Encode the job's new clips in this process and write them (see :func:`build_index`)."""
    clips, captions, skipped = encode_clips(job.loaded, job.manifest, job.plan.new, job.langs, job.encode)
    part = Index(clips, captions, job.meta, _model=job.loaded)
    if job.target is not None:  # rows in a database: inserts and deletes, nothing to lock or rewrite
        written = milvus.write_milvus(job.target, clips, captions, job.meta, list(job.plan.drop),
                                      replace=not job.add)
        index = Index.load(job.target, model=job.loaded)
    else:
        written = write_rows(job.output, part, add=job.add, drop=job.plan.drop, dtype=job.dtype, build=job.ann,
                             model=job.loaded, check=job.check)
        index = Index.load(job.output, model=job.loaded)
    finished_encoding(job.loaded, job.manifest, job.plan.new, job.encode)
    return BuildReport(index=index, added=len(clips), kept=len(index) - len(clips), skipped=skipped,
                       changed=job.plan.changed, deleted=job.plan.deleted, bytes_written=written)


def write_rows(output: str | os.PathLike, part: Index, *, add: bool = True, drop: dict[str, int] | None = None,
               dtype: str = "float32", build: AnnBuild | None = None, model: LoadedModel | None = None,
               check: Callable[[Index], None] | None = None) -> int:
    """Write the rows of ``part`` (embeddings already computed) into the index at ``output`` under its
    writer lock, and return the bytes written. With ``add`` and an existing index, it is read again
    under the lock (``check(current)`` may refuse it), the rows of the ids in ``drop`` or in ``part``
    are deleted, and ``part`` is appended: a folder gains one shard and a new manifest, an ``.npz`` is
    rewritten. Otherwise ``part`` replaces whatever was at ``output``."""
    output = Path(output)
    folder = shard_files.is_index_folder(output)
    if folder:
        shard_files.refuse_foreign_folder(output)
        output.mkdir(parents=True, exist_ok=True)
    with writer_lock(output, "index", wait=True):
        before = shard_files.bytes_of(output) if folder else 0
        current = _existing(output, model) if add else None
        if current is not None and check is not None:
            check(current)
        build = build or AnnBuild()
        if folder and current is None:
            shard_files.remove_unlisted(output, None)
            shard_files.write_folder(output, part.clip_columns, part.caption_columns,
                                     {k: v for k, v in part.meta.items() if k != "fusion"}, dtype, build)
            measure_fused_recall(Index.load(output, backend="auto"))
        elif folder:
            shard_files.add_shard(output, shard_files.read_manifest(output), part.clip_columns, part.caption_columns,
                                  renewed_rows(current, drop or {}, part.ids), part.meta.get("manifest"), build)
        else:
            _merged(current, part, drop or {}).save(output)
            return output.stat().st_size
        return max(0, shard_files.bytes_of(output) - before)


def _existing(output: Path, loaded: LoadedModel | None) -> Index | None:
    there = (output / shard_files.MANIFEST).is_file() if output.is_dir() else output.is_file()
    # another model is refused with its own message (_check_same_build)
    return Index.load(output, backend="numpy", model=loaded, allow_other_model=True) if there else None


def _check_same_build(output: Path, index: Index, sha: str, sample_rate: int, max_seconds: float,
                      window_seconds: float) -> None:
    if index.meta["checkpoint"]["sha256"] != sha:
        raise MlatrError(f"{output} was built with checkpoint {index.meta['checkpoint']['path']} "
                         f"(another model); rebuild it without --add")
    if (index.meta["sample_rate"] != sample_rate or index.meta["max_seconds"] != max_seconds
            or index.meta.get("window_seconds", max_seconds) != window_seconds):
        raise MlatrError(f"{output} was built at {index.meta['sample_rate']} Hz / "
                         f"{index.meta['max_seconds']} s (windows of "
                         f"{index.meta.get('window_seconds', index.meta['max_seconds'])} s); "
                         "--add must use the same settings")


def _merged(current: Index | None, part: Index, drop: dict[str, int]) -> Index:
    """``current`` without its deleted rows and the rows of ``drop``'s ids (and of ids ``part`` encodes
    again), then ``part``."""
    if current is None:
        return part
    current = current.live()
    renewed = set(drop) | set(part.ids)
    current = current.take([i for i, cid in enumerate(current.ids) if cid not in renewed])
    dim = part.dim
    clips = ClipColumns.concat([current.clip_columns, part.clip_columns], dim)
    captions = CaptionColumns.concat([current.caption_columns, part.caption_columns], [len(current.ids)], dim)
    return Index(clips, captions, part.meta, _model=part._model)


def delete_clips(path: str | os.PathLike, ids: Sequence[str]) -> int:
    """Delete the clips ``ids`` from the index at ``path`` (a folder: tombstones in its manifest; an
    ``.npz``: rewritten without them), under its writer lock; an unknown id is an error. Returns the count."""
    if milvus.is_milvus(path):
        return milvus.delete_milvus(str(path), list(ids))
    path = Path(path)
    with writer_lock(path, "index", wait=True):
        index = Index.load(path, backend="numpy")
        rows = live_rows(index)
        unknown = [cid for cid in ids if cid not in rows]
        if unknown:
            raise MlatrError(f"{path}: no clip {', '.join(map(repr, unknown[:5]))}"
                             + (f" and {len(unknown) - 5} more" if len(unknown) > 5 else "") + "; nothing deleted")
        gone = sorted({rows[cid] for cid in ids})
        if not index.shards:
            index.deleted_rows = np.asarray(gone, np.int64)
            index.live().save(path)
            return len(gone)
        manifest = shard_files.read_manifest(path)
        shard_files.mark_deleted(manifest, gone)
        shard_files.write_manifest(path, manifest)
    return len(gone)
