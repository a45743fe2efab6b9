"""A search index: a model's audio embeddings of a sound library, with ids, paths and captions.

Two formats. The sharded folder (``mlatr-index-2``, any output not ending in ``.npz``) grows by
appending shards, is memory-mapped on load and keeps deletions as tombstones: :mod:`mlatr.search.shards`
describes it, :mod:`mlatr.search.ann` its approximate search. The single file (``mlatr-index-1``, an
output ending in ``.npz``) is rewritten whole on every change, atomically (``mlatr.io_utils.atomic_write_with``:
a failed build leaves the previous index, or nothing, never a partial file):

- ``embeddings [N, d]`` float32, unit norm: the clips' ``DualEncoder.encode_audio(...).pooled``
  (ATRI sec. 3.1: projected and L2-normalised, so inner product = cosine, eq. 1);
- ``caption_embeddings [M, d]`` with ``caption_clip [M]`` (row of the clip a caption describes): the
  clips' manifest captions in ``caption_languages``, for sound-to-caption search;
- ``meta``: a JSON string with ``format``, ``dim``, ``ids``, ``paths`` (absolute audio paths),
  ``captions`` (per clip, ``{lang: [text | null]}``), ``caption_lang``, ``caption_text``, the model's
  ``checkpoint`` (``path``, ``sha256``), ``model_config``, ``sample_rate``, ``max_seconds``,
  ``window_seconds`` (clips longer than this were encoded as windows: :mod:`mlatr.inference.audio`; absent in
  older indexes, which encoded the whole crop), ``manifest``.

Both hold the same columns, and both record per clip the size and mtime of its audio when it was
encoded (``states``): a hit whose file has been deleted or changed since is reported (:attr:`Hit.stale`),
and ``--add`` re-encodes changed clips and drops deleted ones, saying so.

Every embedding is finite and of unit norm: building, saving or loading an index with a NaN, infinite or
non-unit row is an error naming the file and the clips (a search would rank such rows arbitrarily, FAISS
drops them, and a non-unit row's score is no cosine). A folder's shards are checked in full when written
and on a sample of rows when loaded (loading must not read a million rows).

:func:`build_index` encodes a manifest with a :class:`~mlatr.inference.LoadedModel`; with an
existing index (``add=True``) it encodes only the clips whose id is not in it yet (or whose file changed)
and refuses an index built by another checkpoint (its embeddings would live in another space). Writers
hold :func:`mlatr.writer_lock.writer_lock` on the output: a second one waits, saying so, and adds its
clips after the first's. :meth:`Index.append` is the one
place an index grows (``build_index`` and callers that already hold the embeddings, e.g. the real-sound
demo's cached features). :class:`Index` loads the file and searches it (see :mod:`mlatr.search.search`).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from mlatr.data.manifest import Clip, Manifest
from mlatr.data.pipeline.file_source import AudioSource
from mlatr.data.webdataset_shards import ShardIndex, ShardSource
from mlatr.errors import InputError, MlatrError
from mlatr.file_kinds import unreadable
from mlatr.file_state import file_state
from mlatr.inference import LoadedModel, load_model
from mlatr.inference.audio import encode_source
from mlatr.inference.checkpoint import model_sha256
from mlatr.inference.encoding import encode_texts
from mlatr.inference.sources import library_manifest
from mlatr.io_utils import atomic_write_with, remove_orphan_temps
from mlatr.json_input import check_format, parse_json
from mlatr.search import milvus
from mlatr.search import shards as shard_files
from mlatr.search.ann import EXACT_BELOW, AnnSearcher, build_ann
from mlatr.search.backends import BACKENDS, ShardedSearcher, make_backend
from mlatr.search.hybrid import TextRanker
from mlatr.search.search import search_audio, search_text
from mlatr.writer_lock import writer_lock

FORMAT = "mlatr-index-1"
#: Largest deviation of a stored embedding's norm from 1 (float16 storage keeps norms within about 1e-3).
NORM_TOLERANCE = 1e-2
#: Rows of each shard whose norm and finiteness are checked when a folder is loaded.
LOAD_CHECK_ROWS = 1024


def file_sha256(path: str | os.PathLike) -> str:
    """Hex SHA-256 of a file's bytes (read in 1 MiB chunks)."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


@dataclass
class Index:
    """Audio embeddings of a library and what is needed to search them (see the module docstring)."""

    embeddings: np.ndarray  # [N, d] float32 unit norm
    ids: list[str]
    paths: list[str]
    captions: list[dict[str, list[str | None]]]
    caption_embeddings: np.ndarray  # [M, d]
    caption_clip: np.ndarray  # [M] int64
    caption_lang: list[str]
    caption_text: list[str]
    meta: dict[str, Any] = field(default_factory=dict)
    path: Path | None = None
    backend: str = "auto"
    #: per clip, the size and mtime of its audio when it was encoded (None: not recorded)
    states: list[dict | None] = field(default_factory=list)
    #: rows deleted (tombstones): kept in the arrays, never returned by a search
    deleted_rows: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    #: the folder's shards and their manifest entries, for an index loaded from a folder
    shards: list = field(default_factory=list, repr=False)
    shard_entries: list[dict] = field(default_factory=list, repr=False)
    _model: Any = field(default=None, repr=False)
    _searchers: dict[str, Any] = field(default_factory=dict, repr=False)

    def __len__(self) -> int:
        """Clips a search can return (rows not deleted)."""
        return len(self.ids) - len(self.deleted_rows)

    @property
    def dim(self) -> int:
        return int(self.embeddings.shape[1])

    # ---- persistence -------------------------------------------------------------------------------
    def save(self, path: str | os.PathLike, dtype: str = "float32", ann: AnnBuild | None = None) -> Path:
        """Write the index's live rows: one ``.npz`` atomically when ``path`` ends in ``.npz``, else a new
        index folder of one shard (``dtype`` float32 | float16; ``ann``: how its approximate structure is
        built, default by size) whose manifest replaces the folder's previous one. Returns the path.
        The caller holds the writer lock of ``path`` where another process could write it."""
        path = Path(path)
        live = self.live()
        check_finite_rows(live.embeddings, live.ids, f"{path}: embeddings")
        check_unit_rows(live.embeddings, live.ids, f"{path}: embeddings")
        check_finite_rows(live.caption_embeddings, [live.ids[int(c)] for c in live.caption_clip],
                          f"{path}: caption_embeddings")
        if shard_files.is_index_folder(path):
            write_folder(path, live, dtype, ann)
            self.path = path
            return path
        paths = [portable_path(p, path.parent) for p in live.paths]
        meta = dict(live.meta, format=FORMAT, dim=live.dim, ids=live.ids, paths=paths,
                    captions=list(live.captions), caption_lang=list(live.caption_lang),
                    caption_text=list(live.caption_text), states=list(live.states))
        arrays = {"embeddings": np.ascontiguousarray(live.embeddings, np.float32),
                  "caption_embeddings": np.ascontiguousarray(live.caption_embeddings, np.float32),
                  "caption_clip": np.asarray(live.caption_clip, np.int64),
                  "meta": np.asarray(json.dumps(meta, ensure_ascii=False))}
        atomic_write_with(path, lambda fh: np.savez(fh, **arrays))
        self.path = path
        return path

    def live(self) -> Index:
        """This index without its deleted rows (itself when none is deleted); arrays copied in memory."""
        if not len(self.deleted_rows):
            return self
        keep = np.setdiff1d(np.arange(len(self.ids)), self.deleted_rows)
        new_row = np.full(len(self.ids), -1, np.int64)
        new_row[keep] = np.arange(len(keep))
        cap_keep = np.flatnonzero(new_row[np.asarray(self.caption_clip, np.int64)] >= 0)
        return Index(embeddings=np.asarray(self.embeddings[keep]), ids=[self.ids[i] for i in keep],
                     paths=[self.paths[i] for i in keep], captions=[self.captions[i] for i in keep],
                     caption_embeddings=np.asarray(self.caption_embeddings[cap_keep]),
                     caption_clip=new_row[np.asarray(self.caption_clip)[cap_keep]],
                     caption_lang=[self.caption_lang[i] for i in cap_keep],
                     caption_text=[self.caption_text[i] for i in cap_keep], meta=dict(self.meta),
                     path=self.path, backend=self.backend, states=[self.state(i) for i in keep], _model=self._model)

    def state(self, row: int) -> dict | None:
        """The recorded size / mtime of clip ``row``'s audio when it was encoded (None: not recorded)."""
        return self.states[row] if row < len(self.states) else None

    def stale(self, row: int) -> str | None:
        """``"deleted"`` or ``"changed"`` when clip ``row``'s audio is gone or differs from when it was
        encoded (size or mtime), else None (also when nothing was recorded)."""
        recorded = self.state(row)
        if recorded is None:
            return None
        now = file_state(self.paths[row])
        if now is None:
            return "deleted"
        return "changed" if now != recorded else None

    @classmethod
    def load(cls, path: str | os.PathLike, backend: str = "auto", model: LoadedModel | None = None) -> Index:
        """Read an index written by :meth:`save` / ``mlatr index build`` (a folder or an ``.npz``);
        ``backend`` = auto (a shard's approximate structure where it has one, else exact) | numpy | faiss
        (both exact).

        ``model`` (a :class:`~mlatr.inference.LoadedModel`) is used for queries instead of
        loading the index's checkpoint.
        """
        if milvus.is_milvus(path):
            return load_milvus(str(path), model)
        if backend not in BACKENDS:
            raise MlatrError(f"unknown search backend {backend!r} (choose from {', '.join(BACKENDS)})")
        path = Path(path)
        if path.is_dir():
            return load_folder(path, backend, model)
        if not path.is_file():
            raise MlatrError(f"index not found: {path}")
        what = "an mlatr index (written by mlatr index build)"
        try:
            z = np.load(path, allow_pickle=False)
        except Exception as exc:  # numpy raises ValueError / OSError / EOFError / BadZipFile
            raise unreadable(path, what, exc, ("npz",)) from exc
        if not isinstance(z, np.lib.npyio.NpzFile):
            raise unreadable(path, what)
        arrays = {}
        try:
            with z:
                if "meta" not in z.files:  # another kind of zip / npz (a checkpoint, someone's arrays)
                    raise unreadable(path, what, "no array 'meta'", ("npz",))
                for name in ("meta", "embeddings", "caption_embeddings", "caption_clip"):
                    if name not in z.files:
                        raise InputError("missing array (a damaged or foreign index: rebuild it with mlatr index "
                                         "build)", file=str(path), field=name)
                    arrays[name] = z[name]
        except MlatrError:
            raise
        except Exception as exc:  # a damaged member: BadZipFile, zlib.error, ValueError, EOFError
            raise unreadable(path, what, exc, ("npz",)) from exc
        emb, cap_emb, cap_clip = arrays["embeddings"], arrays["caption_embeddings"], arrays["caption_clip"]
        if arrays["meta"].ndim != 0 or arrays["meta"].dtype.kind != "U":
            raise InputError(f"expected one JSON string, found {arrays['meta'].dtype} of shape "
                             f"{list(arrays['meta'].shape)}", file=str(path), field="meta")
        meta = check_format(path, parse_json(str(arrays["meta"]), str(path), field="meta"), FORMAT, what)
        shard_files.check_meta(path, meta)
        for key in _PER_ENTRY:
            if key not in meta:
                raise InputError("missing (a damaged index: rebuild it with mlatr index build)", file=str(path),
                                 field=key)
            if not isinstance(meta[key], list):
                raise InputError(f"expected a list, found {type(meta[key]).__name__}", file=str(path), field=key)
        for key in ("ids", "paths", "caption_lang", "caption_text"):
            if not all(isinstance(x, str) for x in meta[key]):
                raise InputError("expected a list of strings", file=str(path), field=key)
        if not all(isinstance(x, dict) for x in meta["captions"]):
            raise InputError("expected a list of {language: [captions]} objects", file=str(path), field="captions")
        for name, arr, ndim in (("embeddings", emb, 2), ("caption_embeddings", cap_emb, 2),
                                ("caption_clip", cap_clip, 1)):
            if arr.ndim != ndim or (ndim == 2 and arr.shape[1] != emb.shape[-1]) or not (
                    np.issubdtype(arr.dtype, np.floating) if ndim == 2 else np.issubdtype(arr.dtype, np.integer)):
                raise InputError(f"shape {list(arr.shape)} of {arr.dtype}: expected "
                                 + ("[n, d] floats" if ndim == 2 else "[m] integers"), file=str(path), field=name)
        if isinstance(meta.get("dim"), int) and emb.shape[1] != meta["dim"]:
            raise InputError(f"vectors of dim {emb.shape[1]}, the meta says dim {meta['dim']}", file=str(path),
                             field="embeddings")
        n = len(meta["ids"])
        if emb.shape[0] != n or len(meta["paths"]) != n or len(meta["captions"]) != n:
            raise InputError(f"{emb.shape[0]} embeddings for {n} ids ({len(meta['paths'])} paths)", file=str(path),
                             field="embeddings")
        if cap_emb.shape[0] != len(cap_clip) or len(meta["caption_text"]) != len(cap_clip) \
                or len(meta["caption_lang"]) != len(cap_clip):
            raise InputError(f"{cap_emb.shape[0]} caption embeddings for {len(cap_clip)} caption rows and "
                             f"{len(meta['caption_text'])} texts", file=str(path), field="caption_embeddings")
        if len(cap_clip) and (cap_clip.min() < 0 or cap_clip.max() >= n):
            raise InputError(f"a caption points to a clip row outside 0..{n - 1}", file=str(path), field="caption_clip")
        states = meta.get("states") or [None] * n
        if not isinstance(states, list) or len(states) != n:
            raise InputError(f"expected a list of {n} file states", file=str(path), field="states")
        emb = emb.astype(np.float32, copy=False)
        cap_emb = cap_emb.astype(np.float32, copy=False)
        check_finite_rows(emb, meta["ids"], f"{path}: embeddings")
        check_unit_rows(emb, meta["ids"], f"{path}: embeddings")
        check_finite_rows(cap_emb, [meta["ids"][int(c)] for c in cap_clip], f"{path}: caption_embeddings")
        check_unit_rows(cap_emb, [meta["ids"][int(c)] for c in cap_clip], f"{path}: caption_embeddings")
        paths = [p if os.path.isabs(p) else os.path.normpath(path.parent.resolve() / p)  # relative: to the index
                 for p in meta["paths"]]
        return cls(embeddings=emb, ids=list(meta["ids"]), paths=paths,
                   captions=list(meta["captions"]), caption_embeddings=cap_emb,
                   caption_clip=cap_clip.astype(np.int64), caption_lang=list(meta["caption_lang"]),
                   caption_text=list(meta["caption_text"]),
                   meta={k: v for k, v in meta.items() if k not in (*_PER_ENTRY, "states")}, path=path,
                   backend=backend, states=states, _model=model)

    @classmethod
    def build(cls, model: LoadedModel, source: str | os.PathLike | Manifest | Sequence[str | os.PathLike], *,
              split: str = "all", caption_languages: Sequence[str] | None = None, batch_size: int = 16,
              max_seconds: float | None = None, window_seconds: float | None = None, skip_bad: bool = False,
              progress: bool = True) -> Index:
        """An index of ``source`` (a folder of sounds, a manifest file or :class:`Manifest`, or a list of audio
        paths: :func:`mlatr.inference.sources.library_manifest`) embedded by ``model``, in memory
        (:meth:`save` writes it). Options as :func:`build_index`; unreadable clips are an error unless
        ``skip_bad``."""
        manifest = library_manifest(source, split=split, skip_bad=skip_bad)
        sample_rate, max_seconds, window_seconds = build_settings(model, max_seconds, window_seconds, None)
        langs = list(caption_languages) if caption_languages else manifest.languages()
        meta = index_meta(model, manifest, sample_rate, max_seconds, langs, window_seconds)
        how = EncodeSettings(sample_rate, max_seconds, window_seconds, batch_size, skip_bad, progress)
        index, _ = encode_clips(model, manifest, manifest.clips, langs, meta, how)
        return index

    # ---- queries (implemented in mlatr.search.search) ----------------------------------------------
    def searcher(self, which: str = "audio"):
        """The backend over the clip (``audio``) or caption (``captions``) embeddings, built once: one per
        shard for a folder (a shard's approximate structure with backend ``auto``), deleted rows skipped."""
        if which not in self._searchers:
            self._searchers[which] = self._make_searcher(which)
        return self._searchers[which]

    def _make_searcher(self, which: str):
        if which == "audio":
            deleted = self.deleted_rows
        else:  # the captions of deleted clips
            deleted = np.flatnonzero(np.isin(np.asarray(self.caption_clip, np.int64), self.deleted_rows))
        if not self.shards:
            emb = self.embeddings if which == "audio" else self.caption_embeddings
            return ShardedSearcher([(0, emb.shape[0], make_backend(self.backend, emb))], deleted)
        parts, first = [], 0
        for shard, entry in zip(self.shards, self.shard_entries, strict=True):
            emb = shard.embeddings if which == "audio" else shard.caption_embeddings
            if which == "audio" and self.backend == "auto" and entry.get("ann"):
                searcher = AnnSearcher.open(shard.folder, emb, entry["ann"])
            else:
                searcher = make_backend(self.backend, emb)
            parts.append((first, emb.shape[0], searcher))
            first += emb.shape[0]
        return ShardedSearcher(parts, deleted)

    def text_ranker(self) -> TextRanker:
        """Caption and keyword ranking of the index's clips for text queries (:mod:`mlatr.search.hybrid`),
        built once."""
        if "text" not in self._searchers:
            self._searchers["text"] = TextRanker.of(self)
        return self._searchers["text"]

    def model(self) -> LoadedModel:
        """The model that made the embeddings (loaded from the index's checkpoint on first use)."""
        if self._model is None:
            self._model = load_index_model(self.meta["checkpoint"])
        return self._model

    def append(self, clips: Sequence[Clip], root: str | os.PathLike, audio: np.ndarray, caption_arrays: dict,
               caption_embeddings: np.ndarray, states: Sequence[dict | None] | None = None) -> None:
        """Add ``clips`` (audio relative to ``root``) with their embeddings ``audio [n, d]`` and their captions:
        ``caption_arrays`` as :meth:`~mlatr.data.manifest.Manifest.caption_arrays` gives them (``texts``,
        ``text_lang``, ``text_audio`` = row within ``clips``) and ``caption_embeddings [m, d]``; ``states``:
        the audio files' :func:`file_state` when they were read (default: now)."""
        if self.shards:
            raise MlatrError("an index loaded from a folder grows by shards: use build_index(..., add=True)")
        if audio.shape != (len(clips), self.dim):
            raise MlatrError(f"index append: {audio.shape} audio embeddings for {len(clips)} clips of dim {self.dim}")
        check_finite_rows(audio, [c.id for c in clips], "index: audio embeddings")
        check_unit_rows(audio, [c.id for c in clips], "index: audio embeddings")
        check_finite_rows(caption_embeddings, [clips[int(i)].id for i in caption_arrays["text_audio"]],
                          "index: caption embeddings")
        base = len(self.ids)
        paths = [str(c.audio_path(root).resolve()) for c in clips]
        self.states = [self.state(i) for i in range(base)]
        self.states += list(states) if states is not None else [file_state(p) for p in paths]
        self.embeddings = np.concatenate([self.embeddings, audio.astype(np.float32)])
        self.ids += [c.id for c in clips]
        self.paths += paths
        self.captions += [c.captions for c in clips]
        if len(caption_arrays["texts"]):
            self.caption_embeddings = np.concatenate([self.caption_embeddings, caption_embeddings.astype(np.float32)])
            self.caption_clip = np.concatenate([self.caption_clip, base + np.asarray(caption_arrays["text_audio"])])
            self.caption_lang += [str(x) for x in caption_arrays["text_lang"]]
            self.caption_text += list(caption_arrays["texts"])
        self._searchers.clear()

    def search_text(self, query: str, lang: str | None = "eng", k: int = 10, rank: str = "hybrid",
                    min_relevance: float | None = None):
        """Clips for a text query in ``lang`` (ISO 639-3; ``None`` where the model does not read it), best
        first: :class:`~mlatr.search.search.Results`, a list of :class:`~mlatr.search.search.Hit` that says
        ``nothing_relevant`` when no hit reaches ``min_relevance`` (default: the relevance model's threshold);
        ``rank`` = hybrid | audio | captions (:mod:`mlatr.search.hybrid`)."""
        return search_text(self, query, lang, k, rank, min_relevance)

    def search_audio(self, path: str | os.PathLike, k: int = 10, min_relevance: float | None = None):
        """Sound-to-sound and sound-to-caption search: ``(clip hits as Results, caption hits)``."""
        return search_audio(self, path, k, min_relevance)


_PER_ENTRY = ("ids", "paths", "captions", "caption_lang", "caption_text")


def check_finite_rows(embeddings: np.ndarray, ids: Sequence[str], what: str) -> None:
    """Refuse rows holding NaN or infinity (a search would rank them arbitrarily, FAISS would drop them),
    naming the clip ids they belong to."""
    if embeddings.size == 0 or np.isfinite(embeddings).all():
        return
    bad = np.flatnonzero(~np.isfinite(embeddings).all(axis=1))
    names = sorted({str(ids[i]) for i in bad})
    shown = ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
    raise MlatrError(f"{what}: non-finite values (NaN or inf) in {len(bad)} row(s), clip(s) {shown}; "
                     "the model gave no usable embedding for them (check the audio, or the checkpoint)")


def check_unit_rows(embeddings: np.ndarray, ids: Sequence[str], what: str) -> None:
    """Refuse rows whose norm is not 1 (within :data:`NORM_TOLERANCE`): their inner products are no
    cosines (ATRI eq. 1), and a search would rank them by length. Names the clips."""
    if embeddings.shape[0] == 0:
        return
    bad = []
    for start in range(0, embeddings.shape[0], 65_536):
        norms = np.linalg.norm(np.asarray(embeddings[start:start + 65_536], np.float32), axis=1)
        bad.extend((start + np.flatnonzero(np.abs(norms - 1) > NORM_TOLERANCE)).tolist())
        if bad and len(bad) > 5:
            break
    if not bad:
        return
    norm = float(np.linalg.norm(np.asarray(embeddings[bad[0]], np.float32)))
    names = sorted({str(ids[i]) for i in bad})
    raise MlatrError(f"{what}: {len(bad)}{'+' if len(bad) > 5 else ''} row(s) not of unit norm (clip {names[0]}: "
                     f"norm {norm:.4g}), e.g. clip(s) {', '.join(names[:5])}: scores would not be cosines; "
                     "the file was not written by mlatr index build, or was edited (rebuild the index)")


def load_index_model(checkpoint: dict[str, str], device: str = "cpu") -> LoadedModel:
    """The model of ``checkpoint`` (``{"path", "sha256"}``); refuses a file whose bytes changed."""
    path = checkpoint["path"]
    if not Path(path).exists():
        raise MlatrError(f"the index's model {path} is gone; the index needs its model to encode queries "
                         "(a moved model: give --model PATH, or Index.load(..., model=mlatr.load(PATH)))")
    if model_sha256(path) != checkpoint["sha256"]:
        raise MlatrError(f"checkpoint {path} changed since the index was built (sha256 differs): "
                         "rebuild the index with mlatr index build")
    return load_model(path, device)


def index_meta(loaded: LoadedModel, manifest: Manifest, sample_rate: int, max_seconds: float,
               caption_languages: Sequence[str], window_seconds: float | None = None,
               sha: str | None = None) -> dict[str, Any]:
    """What an index records of how it was made: the checkpoint (absolute path, SHA-256: ``sha`` when
    already computed), the model's config, the audio settings, the caption languages and the manifest."""
    checkpoint = Path(loaded.path).resolve()
    meta: dict[str, Any] = {"checkpoint": {"path": str(checkpoint), "sha256": sha or model_sha256(checkpoint)},
                            "model_config": loaded.model.config(), "sample_rate": sample_rate,
                            "max_seconds": max_seconds}
    if window_seconds is not None:
        meta["window_seconds"] = window_seconds
    meta["caption_languages"] = list(caption_languages)
    meta["manifest"] = str(Path(manifest.path).resolve()) if manifest.path else None
    return meta


def empty_index(dim: int, meta: dict[str, Any], model: LoadedModel | None = None) -> Index:
    """An index of no clip yet (``model``: the model that will make its embeddings and encode its queries)."""
    return Index(embeddings=np.zeros((0, dim), np.float32), ids=[], paths=[], captions=[],
                 caption_embeddings=np.zeros((0, dim), np.float32), caption_clip=np.zeros(0, np.int64),
                 caption_lang=[], caption_text=[], meta=meta, _model=model)


def build_settings(loaded: LoadedModel, max_seconds: float | None, window_seconds: float | None,
                   sample_rate: int | None) -> tuple[int, float, float]:
    """``(sample_rate, max_seconds, window_seconds)`` of an index build: the given ones, else the model's
    (``sample_rate``, ``eval_max_seconds``); windows never longer than the crop."""
    sample_rate = int(sample_rate or loaded.data["sample_rate"])
    max_seconds = float(max_seconds or loaded.data["eval_max_seconds"])
    return sample_rate, max_seconds, min(float(window_seconds or loaded.data["eval_max_seconds"]), max_seconds)


def portable_path(audio: str, folder: Path) -> str:
    """``audio`` relative to the index's ``folder`` when it lies inside it (the two move together), else as is.

    Only a path in the form ``index build`` records (absolute, normal) is rewritten, lexically: an edited
    one (``lib/../x``) is kept as it is, so a reader still sees that it was edited (:mod:`mlatr.serve.clip_files`).
    """
    if not (os.path.isabs(audio) and os.path.normpath(audio) == audio):
        return audio
    try:
        return Path(audio).relative_to(folder.resolve()).as_posix()
    except ValueError:
        return audio


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


def build_index(loaded: LoadedModel, manifest: Manifest, output: str | os.PathLike, *, add: bool = False,
                caption_languages: Sequence[str] | None = None, batch_size: int = 16, max_seconds: float | None = None,
                window_seconds: float | None = None, sample_rate: int | None = None, skip_bad: bool = False,
                progress: bool = False, dtype: str = "float32", ann: str = "auto",
                ann_params: dict | None = None, ann_exact_below: int = EXACT_BELOW, ctx=None,
                shards: ShardIndex | None = None) -> BuildReport:
    """Encode ``manifest``'s clips (and captions) with ``loaded`` and write the index to ``output`` (a folder,
    or one file when it ends in ``.npz``; ``dtype`` / ``ann`` / ``ann_params``: a folder's, see
    :meth:`Index.save`).

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
    listed in the report; a manifest none of whose clips can be read is an error either way. ``ctx``
    (a :class:`~mlatr.training.distributed.DistContext` under torchrun) splits the new clips over the
    processes: :mod:`mlatr.search.rank_build`. ``shards``: the webdataset shards ``manifest`` was read from
    (:func:`~mlatr.data.webdataset_shards.index_shards`); each clip's audio is then its shard member, whose
    address (``SHARD#MEMBER``) the index records as the clip's path, with no file state (never stale).
    """
    if loaded.path is None:
        raise MlatrError("build_index needs a model loaded from a checkpoint file (the index records it)")
    if dtype not in shard_files.DTYPES:
        raise MlatrError(f"dtype must be one of {', '.join(shard_files.DTYPES)}, not {dtype!r}")
    checkpoint_path = Path(loaded.path).resolve()
    sha = model_sha256(checkpoint_path)
    sample_rate, max_seconds, window_seconds = build_settings(loaded, max_seconds, window_seconds, sample_rate)
    if not manifest.clips:
        raise MlatrError(f"no clip to index in {manifest.path or 'the manifest'}")
    langs = list(caption_languages) if caption_languages else manifest.languages()
    target = str(output) if milvus.is_milvus(output) else None
    output = Path(output)
    if target is None and shard_files.is_index_folder(output):
        shard_files.refuse_foreign_folder(output)
        output.mkdir(parents=True, exist_ok=True)
    elif target is None:
        remove_orphan_temps(output.parent, [output.name])  # what a killed build left beside the index
    if target is not None:
        existing = load_milvus(target, loaded) if add and milvus.read_meta(target) else None
    else:
        existing = _existing(output, loaded) if add else None
    if existing is not None:
        _check_same_build(output, existing, sha, sample_rate, max_seconds, window_seconds)
        langs = list(existing.meta["caption_languages"])
    meta = index_meta(loaded, manifest, sample_rate, max_seconds, langs, window_seconds, sha)
    new_clips, drop, changed, deleted = _plan(existing, manifest.clips, manifest.root)
    encode = EncodeSettings(sample_rate, max_seconds, window_seconds, batch_size, skip_bad, progress, shards)
    if ctx is not None and ctx.enabled:
        if target is not None or not shard_files.is_index_folder(output):
            raise MlatrError("a build split over processes (torchrun) writes an index folder: give -o a name "
                             "not ending in .npz (each process writes its own shard)")
        from mlatr.search.rank_build import build_by_rank  # torch.distributed: only under torchrun

        rep = build_by_rank(ctx, loaded, manifest, new_clips, output, meta, langs, encode, drop, dtype,
                            AnnBuild(ann, ann_params, ann_exact_below, progress))
        index = Index.load(output, model=loaded)
        return BuildReport(index=index, added=rep["added"], kept=len(index) - rep["added"], skipped=rep["skipped"],
                           changed=changed, deleted=deleted, bytes_written=rep["bytes"])
    part, skipped = encode_clips(loaded, manifest, new_clips, langs, meta, encode)
    if target is not None:  # rows in a database: inserts and deletes, nothing to lock or rewrite
        written = milvus.write_milvus(target, part, list(drop), replace=not add)
        index = load_milvus(target, loaded)
    else:
        written = write_rows(output, part, add=add, drop=drop, dtype=dtype,
                             build=AnnBuild(ann, ann_params, ann_exact_below, progress), model=loaded,
                             check=lambda current: _check_same_build(output, current, sha, sample_rate,
                                                                     max_seconds, window_seconds))
        index = Index.load(output, model=loaded)
    kept_n = len(index) - len(part.ids)
    return BuildReport(index=index, added=len(part.ids), kept=kept_n, skipped=skipped, changed=changed,
                       deleted=deleted, bytes_written=written)


@dataclass(frozen=True)
class EncodeSettings:
    """How clips are read and encoded for an index (see :func:`build_index`)."""

    sample_rate: int
    max_seconds: float
    window_seconds: float
    batch_size: int = 16
    skip_bad: bool = False
    progress: bool = False
    #: the webdataset shards the clips' audio is read from (:mod:`mlatr.data.webdataset_shards`), else their files
    shards: ShardIndex | None = None


def encode_clips(loaded: LoadedModel, manifest: Manifest, clips: Sequence[Clip], langs: Sequence[str],
                 meta: dict[str, Any], how: EncodeSettings) -> tuple[Index, dict[str, str]]:
    """An in-memory index of ``clips`` (of ``manifest``) encoded by ``loaded``, and the unreadable clips
    skipped (``how.skip_bad``; else the first one is an error). Each file's state is taken before it is read."""
    model = loaded.model
    part = empty_index(model.embed_dim, meta, loaded)
    if not clips:
        return part, {}
    sub = Manifest(clips=list(clips), root=manifest.root, path=manifest.path)
    if how.shards is None:
        states = [file_state(c.audio_path(manifest.root)) for c in clips]  # before reading: a later change shows
        source = AudioSource(sub, how.sample_rate, cache=False, skip_bad=how.skip_bad)
    else:  # a shard member has no file of its own to watch: no state recorded, never stale
        states = [None] * len(clips)
        source = ShardSource(sub, how.shards, how.sample_rate, skip_bad=how.skip_bad)
    rows, audio = encode_source(model.encode_audio, source, how.batch_size, how.max_seconds, loaded.device,
                                window_seconds=how.window_seconds, progress=how.progress, desc="index")
    skipped = dict(source.bad)
    if not rows:
        first = next(iter(skipped.values()), "")
        raise MlatrError(f"none of the {len(clips)} new clip(s) of {manifest.path or 'the manifest'} "
                         f"could be read; nothing was written (first: {first})")
    kept = [sub[i] for i in rows]
    arrays = Manifest(clips=kept, root=manifest.root, path=manifest.path).caption_arrays(list(langs))
    text = encode_texts(model, arrays["texts"], list(arrays["text_lang"]), how.batch_size)
    part.append(kept, manifest.root, audio, arrays, text, [states[i] for i in rows])
    return part, skipped


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


def write_rows(output: str | os.PathLike, part: Index, *, add: bool = True, drop: dict[str, int] | None = None,
               dtype: str = "float32", build: AnnBuild | None = None, model: LoadedModel | None = None,
               check=None) -> int:
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
        if folder:
            _write_folder_part(output, current, part, drop or {}, dtype, build or AnnBuild())
            return max(0, shard_files.bytes_of(output) - before)
        _merged(current, part, drop or {}).save(output)
        return output.stat().st_size


def _existing(output: Path, loaded: LoadedModel | None) -> Index | None:
    there = (output / shard_files.MANIFEST).is_file() if output.is_dir() else output.is_file()
    return Index.load(output, backend="numpy", model=loaded) if there else None


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


def live_rows(index: Index) -> dict[str, int]:
    """id -> row of every clip not deleted (the latest row of an id encoded again)."""
    ids = index.ids
    rows = dict(zip(ids, range(len(ids)), strict=True))  # the last row of each id
    stale = {ids[g] for g in index.deleted_rows.tolist() if rows[ids[g]] == g}  # ids whose last row is deleted
    if stale:  # their latest live row, if any (one more pass, only then)
        gone = set(index.deleted_rows.tolist())
        for cid in stale:
            del rows[cid]
        for i, cid in enumerate(ids):
            if cid in stale and i not in gone:
                rows[cid] = i
    return rows


def _plan(existing: Index | None, clips: Sequence[Clip], root) -> tuple[list[Clip], dict[str, int], list[str],
                                                                       list[str]]:
    """Which of ``clips`` to encode, and which rows of ``existing`` to delete (id -> row): clips not in it,
    clips whose file changed since (encoded again), clips whose file is gone (deleted): those of ``clips``
    and every other indexed clip whose recorded file is gone (a file deleted from a library is no longer
    listed by the folder it is added from, but would still be ranked)."""
    if existing is None:
        return list(clips), {}, [], []
    rows = live_rows(existing)
    new, drop, changed, deleted = [], {}, [], []
    for clip in clips:
        row = rows.get(clip.id)
        if row is None:
            new.append(clip)
            continue
        why = existing.stale(row)
        if why == "deleted" and not clip.audio_path(root).exists():
            drop[clip.id] = row
            deleted.append(clip.id)
        elif why is not None:
            drop[clip.id] = row
            changed.append(clip.id)
            new.append(clip)
    listed = {clip.id for clip in clips}
    for cid, row in rows.items():
        if cid not in listed and existing.stale(row) == "deleted":
            drop[cid] = row
            deleted.append(cid)
    return new, drop, changed, deleted


def _merged(current: Index | None, part: Index, drop: dict[str, int]) -> Index:
    """``current`` without the rows of ``drop``'s ids (and of ids ``part`` encodes again), then ``part``."""
    if current is None:
        return part
    current = current.live()
    renewed = set(drop) | set(part.ids)
    current.deleted_rows = np.asarray([i for i, cid in enumerate(current.ids) if cid in renewed], np.int64)
    current = current.live()
    base = len(current.ids)
    return Index(embeddings=np.concatenate([current.embeddings, part.embeddings]), ids=current.ids + part.ids,
                 paths=list(current.paths) + list(part.paths), captions=list(current.captions) + list(part.captions),
                 caption_embeddings=np.concatenate([current.caption_embeddings, part.caption_embeddings]),
                 caption_clip=np.concatenate([current.caption_clip, base + part.caption_clip]),
                 caption_lang=list(current.caption_lang) + list(part.caption_lang),
                 caption_text=list(current.caption_text) + list(part.caption_text), meta=part.meta,
                 states=[current.state(i) for i in range(base)] + list(part.states), _model=part._model)


def _write_folder_part(output: Path, current: Index | None, part: Index, drop: dict[str, int], dtype: str,
                       build: AnnBuild) -> None:
    """Under the writer lock: a fresh folder of ``part``, or ``part`` as one more shard of ``current`` with
    the rows of ids encoded again or gone marked deleted (in the shards that hold them)."""
    manifest = shard_files.read_manifest(output) if current is not None else None
    shard_files.remove_unlisted(output, manifest)
    if current is None:
        write_folder(output, part, dtype, build)
        return
    renewed = set(drop) | set(part.ids)
    mark_deleted(manifest, [row for cid, row in live_rows(current).items() if cid in renewed])
    if len(part.ids):
        manifest["shards"].append(write_part_shard(output, next_seq(manifest), manifest["dtype"], part,
                                                   build))
    manifest["meta"] = dict(manifest["meta"], manifest=part.meta.get("manifest"))
    shard_files.write_manifest(output, manifest)


@dataclass(frozen=True)
class AnnBuild:
    """How a new shard's approximate structure is built (:func:`mlatr.search.ann.build_ann`'s arguments)."""

    kind: str = "auto"
    params: dict | None = None
    exact_below: int = EXACT_BELOW
    progress: bool = False

    def __call__(self, folder: Path, embeddings: np.ndarray) -> dict | None:
        return build_ann(folder, embeddings, self.kind, self.params, self.exact_below, self.progress)


def write_part_shard(output: Path, seq: int, dtype: str, index: Index, build: AnnBuild,
                     name: str | None = None) -> dict:
    """Write ``index``'s rows as one shard of the folder ``output`` (``name``: see
    :func:`mlatr.search.shards.write_shard`); its manifest entry."""
    clip_rows = [{"path": index.paths[i], "captions": index.captions[i], "state": index.state(i)}
                 for i in range(len(index.ids))]
    caption_rows = [{"lang": index.caption_lang[i], "text": index.caption_text[i]}
                    for i in range(len(index.caption_text))]
    return shard_files.write_shard(
        output, seq, dtype, index.embeddings, index.ids, clip_rows, index.caption_embeddings, index.caption_clip,
        caption_rows, ann=build, name=name)


def write_folder(output: Path, index: Index, dtype: str = "float32", build: AnnBuild | None = None) -> None:
    """Write ``index`` (no deleted rows) as a folder of one shard; its manifest replaces the folder's
    previous one and the previous shards are removed (the caller holds the writer lock)."""
    if dtype not in shard_files.DTYPES:
        raise MlatrError(f"dtype must be one of {', '.join(shard_files.DTYPES)}, not {dtype!r}")
    shard_files.refuse_foreign_folder(output)
    output.mkdir(parents=True, exist_ok=True)
    try:
        old = shard_files.read_manifest(output) if (output / shard_files.MANIFEST).exists() else None
    except MlatrError:
        old = None  # replaced whole: a damaged previous manifest does not matter
    entry = write_part_shard(output, next_seq(old), dtype, index, build or AnnBuild())
    meta = {k: v for k, v in index.meta.items() if k not in ("format", "dim")}
    manifest = {"format": shard_files.FORMAT, "dim": index.dim, "dtype": dtype, "meta": meta, "shards": [entry]}
    shard_files.write_manifest(output, manifest)
    shard_files.remove_unlisted(output, manifest)


def load_milvus(target: str, model: LoadedModel | None = None) -> Index:
    """The :class:`Index` of a Milvus target (:func:`mlatr.search.milvus.read_milvus`): metadata read here,
    searches through Milvus."""
    lib = milvus.read_milvus(target)
    clips, caps, dim = lib.clips, lib.captions, lib.meta["dim"]
    index = Index(embeddings=np.zeros((0, dim), np.float32), ids=[r["id"] for r in clips],
                  paths=[r["path"] for r in clips], captions=[r["info"].get("captions", {}) for r in clips],
                  caption_embeddings=np.zeros((0, dim), np.float32),
                  caption_clip=np.asarray([lib.row_of.get(c["clip"], -1) for c in caps], np.int64),
                  caption_lang=[c["lang"] for c in caps], caption_text=[c["text"] for c in caps],
                  meta={k: v for k, v in lib.meta.items() if k != "format"}, path=None, backend="milvus",
                  states=[r["info"].get("state") for r in clips], _model=model)
    index._searchers["audio"] = lib.audio
    index._searchers["captions"] = lib.caption_search
    return index


def load_folder(path: Path, backend: str = "auto", model: LoadedModel | None = None) -> Index:
    """An index folder as an :class:`Index`: vectors memory-mapped (one shard: its array itself; several:
    a :class:`~mlatr.search.shards.RowStack`), paths / captions / states read per row on demand."""
    manifest = shard_files.read_manifest(path)
    dim, entries = manifest["dim"], manifest["shards"]
    shards = [shard_files.read_shard(path / e["name"], dim, e) for e in entries]
    for shard in shards:
        n = len(shard.ids)
        if n:
            rows = np.unique(np.linspace(0, n - 1, min(n, LOAD_CHECK_ROWS)).astype(np.int64))
            sample = np.asarray(shard.embeddings[rows], np.float32)
            where = f"{shard.folder / 'embeddings.npy'}"
            check_finite_rows(sample, [shard.ids[i] for i in rows], where)
            check_unit_rows(sample, [shard.ids[i] for i in rows], where)
    starts = np.cumsum([0] + [len(s.ids) for s in shards])

    def stack(arrays):
        return arrays[0] if len(arrays) == 1 else shard_files.RowStack(arrays, dim)

    deleted = [starts[i] + np.asarray(e.get("deleted", []), np.int64) for i, e in enumerate(entries)]
    return Index(embeddings=stack([s.embeddings for s in shards]), ids=[i for s in shards for i in s.ids],
                 paths=shard_files.ShardColumn([s.clips for s in shards], "path"),
                 captions=shard_files.ShardColumn([s.clips for s in shards], "captions"),
                 caption_embeddings=stack([s.caption_embeddings for s in shards]),
                 caption_clip=np.concatenate([np.zeros(0, np.int64)]
                                             + [starts[i] + s.caption_clip for i, s in enumerate(shards)]),
                 caption_lang=shard_files.ShardColumn([s.captions for s in shards], "lang"),
                 caption_text=shard_files.ShardColumn([s.captions for s in shards], "text"),
                 meta=dict(manifest["meta"], dim=dim, dtype=manifest["dtype"]), path=path, backend=backend,
                 states=shard_files.ShardColumn([s.clips for s in shards], "state"),
                 deleted_rows=np.concatenate([np.zeros(0, np.int64), *deleted]), shards=shards,
                 shard_entries=entries, _model=model)


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
        mark_deleted(manifest, gone)
        shard_files.write_manifest(path, manifest)
    return len(gone)


def index_summary(index: Index, check: bool = False) -> dict[str, Any]:
    """What ``mlatr index info`` prints: counts, format, shards with their approximate structure and
    measured recall, the model and audio settings; ``check``: clips whose audio is deleted or changed."""
    path = index.path
    folder = bool(index.shards)
    info: dict[str, Any] = {
        "format": shard_files.FORMAT if folder else milvus.FORMAT if index.backend == "milvus" else FORMAT,
        "clips": len(index), "deleted": len(index.deleted_rows),
        "captions": len(index.caption_text), "dim": index.dim, "dtype": index.meta.get("dtype", "float32"),
        "bytes": (shard_files.bytes_of(path) if folder else path.stat().st_size) if path else 0,  # milvus: 0
        "checkpoint": index.meta["checkpoint"]["path"], "sample_rate": index.meta["sample_rate"],
        "max_seconds": index.meta["max_seconds"], "caption_languages": index.meta.get("caption_languages", []),
        "shards": [{"name": e["name"], "rows": e["rows"], "deleted": len(e.get("deleted", [])),
                    **({"ann": e["ann"]} if e.get("ann") else {})} for e in index.shard_entries]
        or [{"name": path.name if path else "memory", "rows": len(index.ids), "deleted": 0}]}
    if check:
        gone = set(index.deleted_rows.tolist())
        stale: dict[str, list[str]] = {"deleted": [], "changed": []}
        for row in range(len(index.ids)):
            why = None if row in gone else index.stale(row)
            if why:
                stale[why].append(index.ids[row])
        info["stale"] = stale
    return info
