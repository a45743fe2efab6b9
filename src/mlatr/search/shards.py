"""The sharded index folder (``mlatr-index-2``): append-only shards, a manifest written last, tombstones.

An index folder (``mlatr index build -o LIB.idx``) holds::

    index.json            the manifest: format, dim, dtype, the build's meta (checkpoint, model config, audio
                          settings, ...), the list of shards (name, rows, deleted rows, ANN structure)
    shard-000000-xxxxxx/  one build or one ``--add``, written once and never changed:
        embeddings.npy            [n, d] float32 or float16, unit norm: loaded memory-mapped
        caption_embeddings.npy    [m, d] same dtype;  caption_clip.npy [m] int64 (row within the shard)
        ids.json                  the clips' ids (the only per-clip column read whole, for the id -> row map)
        clips.jsonl               per clip: path, captions, state (size, mtime of the audio when encoded)
        captions.jsonl            per caption: lang, text
        *.offsets.npy             byte offset of each line of the two ``.jsonl`` files (a row is one seek)
        ann.faiss, ann.json       optional approximate-search structure of the shard (:mod:`mlatr.search.ann`)
        caption_ann.faiss, .json  the same over the shard's caption embeddings
        moments.npz, keywords.*   what text queries need of the library: the sums of the shard's embeddings and
                                  its captions' keyword counts (:mod:`mlatr.search.shard_stats`)

A writer (under :func:`mlatr.writer_lock.writer_lock` on the folder) writes a new shard into a temporary
folder, renames it into place, then replaces ``index.json`` atomically: a reader sees the old manifest or
the new one, never a shard half written, and adding clips writes only the new shard and the small manifest.
A shard folder that no manifest names (a killed writer's) is removed by the next writer. Deleting a clip
records its row in its shard entry's ``deleted`` list (a tombstone): searches skip it; ``mlatr index
compact`` rewrites the live rows into one shard and drops the tombstones.
"""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from mlatr.errors import InputError, MlatrError
from mlatr.io_utils import atomic_write_json
from mlatr.json_input import expect_field, json_type, read_format_json
from mlatr.search.columns import CaptionColumns, ClipColumns, check_finite_rows, check_unit_rows
from mlatr.search.shard_stats import write_shard_stats
from mlatr.stored_config import check_model_config

FORMAT = "mlatr-index-2"
MANIFEST = "index.json"
DTYPES = ("float32", "float16")
#: Rows of each shard whose norm and finiteness are checked when a folder is loaded.
LOAD_CHECK_ROWS = 1024


def is_index_folder(path: str | os.PathLike) -> bool:
    """True when ``path`` is (or, not existing yet, will be) a sharded index folder: anything but ``.npz``."""
    path = Path(path)
    return path.is_dir() or (not path.exists() and path.suffix.lower() != ".npz")


def refuse_foreign_folder(path: Path) -> None:
    """Refuse to write an index into an existing folder that holds other things than an index (a writer
    would mix its shards with someone's files)."""
    if not path.is_dir() or (path / MANIFEST).is_file():
        return
    other = sorted(p.name for p in path.iterdir() if not p.name.startswith((".", "shard-")))
    if other:
        raise MlatrError(f"{path}: a folder holding other files ({', '.join(other[:3])}"
                         f"{', ...' if len(other) > 3 else ''}), not an mlatr index; give a new name for the index")


# ---- reading ------------------------------------------------------------------------------------------
def _field_error(file: Path, field: str, message: str) -> InputError:
    return InputError(message, file=str(file), field=field)


_REBUILD = "a damaged index: rebuild it with mlatr index build"


def check_meta(file: Path, meta: Any, where: str = "") -> dict:
    """Refuse an index meta whose fields have the wrong types (``FILE: FIELD: message``); ``where``: the
    meta's own place in the file (``meta`` in a folder's manifest)."""
    if not isinstance(meta, dict):
        raise _field_error(file, where or "meta", f"expected an object, found {json_type(meta)}")
    ckpt = expect_field(file, meta, "checkpoint", dict, "an object with path and sha256", where=where, hint=_REBUILD)
    for key in ("path", "sha256"):
        expect_field(file, ckpt, key, str, "a string", where=f"{where}.checkpoint".lstrip("."), hint=_REBUILD)
    expect_field(file, ckpt, "weights_sha256", str, "a string", where=f"{where}.checkpoint".lstrip("."),
                 required=False)
    expect_field(file, meta, "sample_rate", int, "an integer (Hz)", where=where, test=lambda v: v > 0, must="> 0",
                 hint=_REBUILD)
    expect_field(file, meta, "max_seconds", (int, float), "a number (seconds)", where=where, test=lambda v: v > 0,
                 must="> 0", hint=_REBUILD)
    if meta.get("window_seconds") is not None:
        expect_field(file, meta, "window_seconds", (int, float), "a number (seconds)", where=where,
                     test=lambda v: v > 0, must="> 0")
    if "model_config" in meta:  # the model's config, copied for what the index reports (its text encoder)
        check_model_config(file, meta["model_config"], f"{where}.model_config".lstrip("."))
    if "caption_languages" in meta:
        expect_field(file, meta, "caption_languages", list, "a list of language codes", where=where,
                     test=lambda v: all(isinstance(x, str) for x in v), must="a list of strings")
    return meta


@dataclass
class Shard:
    """One shard as read: its manifest entry, its clips and captions (vectors memory-mapped, column values
    read per row on demand: :mod:`mlatr.search.columns`)."""

    folder: Path
    entry: dict
    clips: ClipColumns
    captions: CaptionColumns


def read_shard(folder: Path, dim: int, entry: dict) -> Shard:
    """The shard in ``folder`` as the manifest ``entry`` describes it, checked against the manifest."""
    clips = ClipColumns.load(folder, dim)
    if entry.get("rows") != len(clips):
        raise InputError(f"{len(clips)} clips, the manifest says {entry.get('rows')}", file=str(folder / "ids.json"))
    return Shard(folder, entry, clips, CaptionColumns.load(folder, dim, len(clips)))


def read_folder(path: Path) -> tuple[dict, list[Shard]]:
    """The manifest and the shards of the index folder ``path``; each shard's vectors are checked (finite,
    unit norm) on a sample of :data:`LOAD_CHECK_ROWS` rows (loading must not read a million rows)."""
    manifest = read_manifest(path)
    shards = [read_shard(path / e["name"], manifest["dim"], e) for e in manifest["shards"]]
    for shard in shards:
        n = len(shard.clips)
        if n:
            rows = np.unique(np.linspace(0, n - 1, min(n, LOAD_CHECK_ROWS)).astype(np.int64))
            sample = shard.clips.take(rows)
            where = f"{shard.folder / ClipColumns.VECTORS}"
            check_finite_rows(sample.embeddings, sample.ids, where)
            check_unit_rows(sample.embeddings, sample.ids, where)
    return manifest, shards


def read_manifest(folder: str | os.PathLike) -> dict:
    """The folder's ``index.json``, its types checked (``FILE: FIELD: message`` on a wrong one)."""
    file = Path(folder) / MANIFEST
    if not file.is_file():
        raise MlatrError(f"{folder}: not an mlatr index folder (no {MANIFEST}; build one with mlatr index build)")
    manifest = read_format_json(file, FORMAT, "an mlatr index folder's manifest")
    expect_field(file, manifest, "dim", int, "an integer", test=lambda v: v > 0, must="> 0", hint=_REBUILD)
    expect_field(file, manifest, "dtype", str, "a string", test=lambda v: v in DTYPES, must=" or ".join(DTYPES),
                 hint=_REBUILD)
    check_meta(file, expect_field(file, manifest, "meta", dict, "an object", hint=_REBUILD), "meta")
    shards = expect_field(file, manifest, "shards", list, "a list of shard entries", hint=_REBUILD)
    names: set[str] = set()
    for i, entry in enumerate(shards):
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str) or "/" in entry["name"] \
                or entry["name"].startswith(".") or not isinstance(entry.get("rows"), int):
            raise _field_error(file, f"shards[{i}]", "expected an object with a name and a row count")
        if entry["name"] in names:  # its clips would be found, and answered, twice
            raise _field_error(file, f"shards[{i}]", f"shard {entry['name']!r} is listed twice")
        names.add(entry["name"])
        deleted = entry.get("deleted", [])
        if not isinstance(deleted, list) or not all(isinstance(r, int) and 0 <= r < entry["rows"] for r in deleted):
            raise _field_error(file, f"shards[{i}].deleted", f"expected a list of rows in 0..{entry['rows'] - 1}")
        for key in ("ann", "caption_ann"):
            if key in entry and not (isinstance(entry[key], dict) and isinstance(entry[key].get("params"), dict)
                                     and entry[key].get("kind") in ("hnsw", "ivfpq")):
                raise _field_error(file, f"shards[{i}].{key}", "expected an object with kind (hnsw | ivfpq) and params")
    return manifest


# ---- writing (the caller holds the writer lock) -------------------------------------------------------
def write_shard(folder: Path, seq: int, dtype: str, clips: ClipColumns, captions: CaptionColumns, ann=None,
                name: str | None = None) -> dict:
    """Write one shard of ``clips`` and ``captions`` (``captions.clip``: rows of ``clips``) into ``folder``
    (a temporary name, renamed when complete); its manifest entry.

    ``ann`` (a callable ``(shard_folder, embeddings, name) -> dict``: :class:`~mlatr.search.ann.AnnBuild`) builds
    the shard's approximate-search structures (``ann`` over the clips, ``caption_ann`` over the captions)
    inside the temporary folder and returns what the manifest records of each. The shard's stored statistics
    are written with it (:func:`~mlatr.search.shard_stats.write_shard_stats`). ``name``: the shard's folder
    name (default ``shard-SEQ-RANDOM``).
    """
    name = name or f"shard-{seq:06d}-{uuid.uuid4().hex[:6]}"
    tmp = folder / f".{name}.tmp"
    tmp.mkdir(parents=True)
    try:
        clips.save(tmp, dtype)
        captions.save(tmp, dtype)
        entry: dict[str, Any] = {"name": name, "rows": len(clips), "captions": len(captions)}
        audio = np.load(tmp / ClipColumns.VECTORS, mmap_mode="r")
        caption_vectors = np.load(tmp / CaptionColumns.VECTORS, mmap_mode="r")
        write_shard_stats(tmp, audio, caption_vectors, captions.get("text"), captions.get("lang"))
        for key, vectors in (("ann", audio), ("caption_ann", caption_vectors)):
            found = ann(tmp, vectors, key) if ann is not None and len(vectors) else None
            if found:
                entry[key] = found
        for f in tmp.iterdir():
            with open(f, "rb") as fh:
                os.fsync(fh.fileno())
        os.replace(tmp, folder / name)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return entry


def write_folder(output: Path, clips: ClipColumns, captions: CaptionColumns, meta: dict, dtype: str = "float32",
                 ann=None) -> None:
    """Write an index folder of one shard (no deleted rows); its manifest replaces the folder's previous one
    and the previous shards are removed."""
    if dtype not in DTYPES:
        raise MlatrError(f"dtype must be one of {', '.join(DTYPES)}, not {dtype!r}")
    refuse_foreign_folder(output)
    output.mkdir(parents=True, exist_ok=True)
    try:
        old = read_manifest(output) if (output / MANIFEST).exists() else None
    except MlatrError:
        old = None  # replaced whole: a damaged previous manifest does not matter
    entry = write_shard(output, next_seq(old), dtype, clips, captions, ann)
    manifest = {"format": FORMAT, "dim": clips.dim, "dtype": dtype,
                "meta": {k: v for k, v in meta.items() if k not in ("format", "dim")}, "shards": [entry]}
    write_manifest(output, manifest)
    remove_unlisted(output, manifest)


def add_shard(output: Path, manifest: dict, clips: ClipColumns, captions: CaptionColumns, deleted: Sequence[int],
              source: str | None, ann=None) -> None:
    """One more shard of ``clips`` in the folder ``output`` whose ``manifest`` was read under the writer lock
    (nothing written when ``clips`` is empty), the global rows ``deleted`` marked deleted (clips encoded
    again or gone) and ``source`` (the manifest file the rows came from) recorded; the manifest written last."""
    remove_unlisted(output, manifest)
    mark_deleted(manifest, deleted)
    if len(clips):
        manifest["shards"].append(write_shard(output, next_seq(manifest), manifest["dtype"], clips, captions, ann))
    manifest["meta"] = dict(manifest["meta"], manifest=source)
    write_manifest(output, manifest)


def next_seq(manifest: dict | None) -> int:
    """The sequence number of the next shard (one more than the manifest's highest)."""
    found = [int(e["name"].split("-")[1]) for e in (manifest or {}).get("shards", [])
             if e["name"].split("-")[1:2] and e["name"].split("-")[1].isdigit()]
    return 1 + max(found, default=-1)


def mark_deleted(manifest: dict, rows: Sequence[int]) -> None:
    """Record the global ``rows`` as deleted in the manifest entries of the shards that hold them."""
    first = 0
    for entry in manifest["shards"]:
        mine = [r - first for r in rows if first <= r < first + entry["rows"]]
        if mine:
            entry["deleted"] = sorted(set(entry.get("deleted", [])) | set(mine))
        first += entry["rows"]


def write_manifest(folder: Path, manifest: dict) -> None:
    """Replace ``index.json`` atomically (the last step of every write)."""
    atomic_write_json(folder / MANIFEST, manifest, indent=1)


def remove_unlisted(folder: Path, manifest: dict | None) -> list[str]:
    """Remove shard folders no manifest names (left by a killed or superseded writer); their names."""
    keep = {e["name"] for e in (manifest or {}).get("shards", [])}
    gone = []
    for p in folder.iterdir():
        is_shard = p.name.startswith("shard-") or (p.name.startswith(".shard-") and p.name.endswith(".tmp"))
        if p.is_dir() and is_shard and p.name not in keep:
            shutil.rmtree(p, ignore_errors=True)
            gone.append(p.name)
    return gone


def bytes_of(folder: Path) -> int:
    """Total size of the files under ``folder``."""
    return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())
