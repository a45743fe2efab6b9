"""A folder kept in sync with its index: new files added, deleted ones removed, renamed and moved ones followed.

``mlatr index sync DIR INDEX`` (and ``mlatr serve INDEX --watch-folder DIR``) compares the folder as it is
(:func:`mlatr.inference.library.open_library`: its files, captions from names, sidecars and tags, facets) with the
index's rows, through the plan of an index build with ``--add`` (:mod:`mlatr.search.build_plan`: clips not indexed
yet, clips whose file changed, rows whose file is gone), and then does less than that build would:

- a file not indexed yet whose bytes (SHA-256) are those of a row whose file is gone is that file **moved or
  renamed**: its row is written again under the new id and path, its audio embedding and segments reused, its
  captions (which its name and folder make) and facets taken from the folder now;
- a new file whose bytes are those of a live row is a **copy**: reused the same way;
- a file whose size or mtime changed but whose bytes did not (a ``touch``) keeps its embedding; a file whose
  sidecar or tags now give other captions has them encoded again, its audio embedding kept;
- every other new or changed file is encoded; every row whose file is gone (and was not followed) is deleted.

Only the text side runs for a reused row: no audio is decoded or encoded for it. Rows need the bytes' SHA-256
the index records (``sha256``, :data:`mlatr.search.columns.CLIP_COLUMNS`; a row written before it has none: its
move is a deletion and an addition). The write is one :meth:`~mlatr.search.storage.Storage.write` with ``add``:
the storage's writer lock is taken for it (a concurrent build waits, or this sync does), the index read again
under it, and two concurrent writers keep both's rows.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from tqdm import tqdm

from mlatr.data.file_metadata import measure_clips
from mlatr.data.manifest import Clip, Manifest
from mlatr.errors import MlatrError
from mlatr.file_state import file_sha256, file_state
from mlatr.inference import LoadedModel
from mlatr.inference.library import Skip, open_library
from mlatr.search.build import plan_index_build, write_build
from mlatr.search.columns import CaptionColumns, ClipColumns, SegmentColumns
from mlatr.search.index import Index
from mlatr.search.library_encoding import encode_captions, encode_clips
from mlatr.search.segments import Segmenting
from mlatr.search.storage import Tables

#: Facets measured by decoding a file (loudness, peaks, silence): a reused row keeps them (its bytes are the same).
DECODED_FACETS = ("loudness_lufs", "true_peak_dbtp", "peak_dbfs", "silent")


@dataclass
class SyncReport:
    """What one sync did: ``added`` (encoded, new), ``changed`` (encoded again: other bytes under the same name),
    ``moved`` (old id -> new id: renamed or moved, embedding reused), ``copied`` (new id -> the id whose embedding
    it reuses), ``touched`` (same bytes, new size/mtime record), ``recaptioned`` (captions encoded again), ``deleted``
    (file gone), ``unchanged`` (count), ``skipped`` (unreadable: id -> why), ``skips`` (every input left out with
its file: the files the folder's listing refused, then the unreadable ones; what a skip report lists) and the
``index`` as written."""

    index: Index | None = None
    added: list[str] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)
    moved: dict[str, str] = field(default_factory=dict)
    copied: dict[str, str] = field(default_factory=dict)
    touched: list[str] = field(default_factory=list)
    recaptioned: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    unchanged: int = 0
    skipped: dict[str, str] = field(default_factory=dict)
    skips: list[Skip] = field(default_factory=list)

    @property
    def encoded(self) -> int:
        """Clips whose audio was encoded."""
        return len(self.added) + len(self.changed)

    def wrote(self) -> bool:
        return bool(self.encoded or self.moved or self.copied or self.touched or self.recaptioned or self.deleted)


def sync_folder(loaded: LoadedModel, folder: str | os.PathLike, output: str | os.PathLike, *, batch_size: int = 16,
                skip_bad: bool = False, progress: bool = False, loudness: bool = True,
                segments: Segmenting | None = None) -> SyncReport:
    """Bring the index at ``output`` in line with ``folder`` (module docstring); a new index is built. ``loudness``:
    measure the loudness of the clips encoded (one decode each, as ``index build``); ``segments``: how a new index
    cuts long clips (an existing one keeps its own)."""
    root = Path(folder).resolve()
    if not root.is_dir():
        raise MlatrError(f"{folder}: not a folder")
    library = open_library(str(root), skip_bad=skip_bad, progress=progress)
    manifest = library.manifest
    job = plan_index_build(loaded, manifest, output, add=True, batch_size=batch_size, skip_bad=skip_bad,
                           progress=progress, segments=segments)
    if not job.storage.exists():  # nothing to follow: a build
        if loudness:
            measure_clips(job.plan.new, manifest.root, progress=progress)
        built = write_build(job)
        return SyncReport(built.index, added=[c.id for c in job.plan.new if c.id not in built.skipped],
                          skipped=built.skipped, skips=library.skips(built.skipped))
    existing = Index.load(output, model=loaded, allow_other_model=True)
    report, reuse, encode = _plan(existing, manifest, job.plan, root, progress)
    drop = dict(job.plan.drop)  # a moved row's old id among them: its file is gone
    report.deleted = [cid for cid in job.plan.deleted if cid not in report.moved]
    if not (encode or reuse or drop):
        report.index, report.skips = existing, library.skips({})
        return report
    if loudness:
        measure_clips(encode, manifest.root, progress=progress)
    part, skipped = encode_clips(loaded, manifest, encode, job.langs, job.encode, job.meta, require_one=False)
    report.skipped, report.skips = skipped, library.skips(skipped)
    report.added = [c.id for c in encode if c.id not in skipped and c.id not in job.plan.changed]
    report.changed = [c.id for c in encode if c.id not in skipped and c.id in job.plan.changed]
    if not (len(part.clips) or reuse or drop):  # only unreadable files are new: nothing to write
        report.index = existing
        return report
    if reuse:
        part = _joined(part, _reused(loaded, existing, reuse, manifest.root, job.langs, batch_size))
    job.storage.write(part, add=True, drop=drop, dtype=job.dtype, ann=job.ann, check=job.check)
    report.index = Index.load(job.storage.where, model=loaded)
    return report


def _plan(existing: Index, manifest: Manifest, plan, root: Path, progress: bool
          ) -> tuple[SyncReport, list[tuple[int, Clip]], list[Clip]]:
    """The report so far, the rows to reuse ``(existing row, the folder's clip)`` and the clips to encode."""
    report = SyncReport()
    rows = existing.tables.live_rows()
    hashes = existing.clip_columns["sha256"]
    gone: dict[str, list[str]] = {}  # sha256 -> ids of rows whose file is gone
    for cid in plan.deleted:
        if hashes[rows[cid]]:
            gone.setdefault(hashes[rows[cid]], []).append(cid)
    live: dict[str, int] = {}  # sha256 -> a row whose file is there
    gone_ids = set(plan.deleted)
    for cid, row in rows.items():
        if hashes[row] and cid not in gone_ids and cid not in plan.drop:
            live.setdefault(hashes[row], row)
    reuse: list[tuple[int, Clip]] = []
    encode: list[Clip] = []
    new_ids = {c.id for c in plan.new}
    for clip in tqdm(plan.new, desc="sync: hashes", unit="file", disable=not progress, leave=False):
        path = clip.audio_path(manifest.root)
        digest = file_sha256(path) if path.is_file() else None
        if clip.id in plan.changed:
            row = rows[clip.id]
            if digest is not None and digest == hashes[row]:  # a touch: the same bytes
                reuse.append((row, clip))
                report.touched.append(clip.id)
            else:
                encode.append(clip)
        elif digest in gone and gone[digest]:
            old = gone[digest].pop(0)
            reuse.append((rows[old], clip))
            report.moved[old] = clip.id
        elif digest in live:
            reuse.append((live[digest], clip))
            report.copied[clip.id] = existing.ids[live[digest]]
        else:
            encode.append(clip)
    for clip in manifest.clips:  # indexed, unchanged: captions or facets the folder now gives otherwise
        row = rows.get(clip.id)
        if clip.id in new_ids or row is None:
            continue
        if _described_otherwise(existing, row, clip, manifest.root):
            reuse.append((row, clip))
            report.recaptioned.append(clip.id)
        else:
            report.unchanged += 1
    return report, reuse, encode


def _described_otherwise(index: Index, row: int, clip: Clip, root: Path) -> bool:
    """Whether the folder now gives clip ``row`` other captions or caption sources than the index holds."""
    now = ClipColumns.of_clips([clip], root, np.zeros((1, index.dim), np.float32),
                               {"state": [None], "sha256": [None], "facets": [None]})
    return (now["captions"][0] != index.captions[row]
            or now["caption_sources"][0] != index.clip_columns["caption_sources"][row])


def _reused(loaded: LoadedModel, index: Index, reuse: list[tuple[int, Clip]], root: Path, langs, batch_size: int
            ) -> Tables:
    """The rows of ``reuse`` written again for their clips: the old rows' audio embeddings and segments, the clips'
    ids, paths, captions (encoded now), caption sources, facets (the decoded ones kept) and file states."""
    rows = [row for row, _ in reuse]
    clips = [clip for _, clip in reuse]
    taken = index.tables.take(rows)
    states = [file_state(c.audio_path(root)) for c in clips]
    facets = []
    for old, clip in zip(taken.clips["facets"], clips, strict=True):
        new = dict(clip.extra.get("facets") or {}) if isinstance(clip.extra.get("facets"), dict) else None
        if new is not None and isinstance(old, dict):
            new.update({k: old[k] for k in DECODED_FACETS if k in old and k not in new})
        facets.append(new if new is not None else old)
    table = ClipColumns.of_clips(clips, root, np.asarray(index.text_ranker().clip_vectors(np.asarray(rows)),
                                                         np.float32),
                                 {"state": states, "sha256": list(taken.clips["sha256"]), "facets": facets})
    return Tables(table, encode_captions(loaded, clips, langs, batch_size), dict(index.meta),
                  segments=_segments_of(index, rows))


def _segments_of(index: Index, rows: list[int]) -> SegmentColumns:
    """The segments of the clips ``rows`` (renumbered 0..n-1 in that order), their vectors read where they live."""
    moments = index.moments()
    if moments is None:
        return SegmentColumns.empty(index.dim)
    seg_rows, counts = moments.rows_of(np.asarray(rows, np.int64))
    if not len(seg_rows):
        return SegmentColumns.empty(index.dim)
    return SegmentColumns(moments.vectors.take(seg_rows), np.repeat(np.arange(len(rows)), counts),
                          moments.times[seg_rows])


def _joined(a: Tables, b: Tables) -> Tables:
    """``b``'s rows after ``a``'s (the meta ``a``'s)."""
    dim = a.clips.dim
    return Tables(ClipColumns.concat([a.clips, b.clips], dim),
                  CaptionColumns.concat([a.captions, b.captions], [len(a.clips)], dim), a.meta,
                  segments=SegmentColumns.concat([a.segments, b.segments], [len(a.clips)], dim))


def sync_summary(report: SyncReport) -> str:
    """One line of what a sync did."""
    parts = [f"{len(report.added)} added", f"{len(report.changed)} changed (encoded again)",
             f"{len(report.moved)} moved or renamed", f"{len(report.copied)} copies",
             f"{len(report.touched)} touched", f"{len(report.recaptioned)} recaptioned",
             f"{len(report.deleted)} deleted", f"{report.unchanged} unchanged"]
    return ", ".join(parts) + f"; {report.encoded} encoded"
