"""A search index: a model's audio embeddings of a sound library, with ids, paths and captions.

One ``.npz`` file, written atomically (``mlatr.io_utils.atomic_write_with``: a failed build leaves the
previous index, or nothing, never a partial file):

- ``embeddings [N, d]`` float32, unit norm: the clips' ``DualEncoder.encode_audio(...).pooled``
  (ATRI sec. 3.1: projected and L2-normalised, so inner product = cosine, eq. 1);
- ``caption_embeddings [M, d]`` with ``caption_clip [M]`` (row of the clip a caption describes): the
  clips' manifest captions in ``caption_languages``, for sound-to-caption search;
- ``meta``: a JSON string with ``format``, ``dim``, ``ids``, ``paths`` (absolute audio paths),
  ``captions`` (per clip, ``{lang: [text | null]}``), ``caption_lang``, ``caption_text``, the model's
  ``checkpoint`` (``path``, ``sha256``), ``model_config``, ``sample_rate``, ``max_seconds``,
  ``window_seconds`` (clips longer than this were encoded as windows: :mod:`mlatr.long_clips`; absent in
  older indexes, which encoded the whole crop), ``manifest``.

Every embedding is finite: building, saving or loading an index with a NaN or infinite row is an error
naming the clips (a search would rank such rows arbitrarily, and FAISS drops them).

:func:`build_index` encodes a manifest with a :class:`~mlatr.training.checkpoint.LoadedModel`; with an
existing index (``add=True``) it encodes only the clips whose id is not in it yet and refuses an index
built by another checkpoint (its embeddings would live in another space). :meth:`Index.append` is the one
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

from mlatr.data.dataset import AudioSource
from mlatr.data.manifest import Clip, Manifest
from mlatr.encoding import encode_texts
from mlatr.errors import MlatrError
from mlatr.file_kinds import unreadable
from mlatr.io_utils import atomic_write_with, remove_orphan_temps
from mlatr.long_clips import encode_audio_windows
from mlatr.search.backends import BACKENDS, make_backend
from mlatr.search.hybrid import TextRanker
from mlatr.search.search import search_audio, search_text
from mlatr.training.checkpoint import LoadedModel, load_model

FORMAT = "mlatr-index-1"


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
    backend: str = "numpy"
    _model: Any = field(default=None, repr=False)
    _searchers: dict[str, Any] = field(default_factory=dict, repr=False)

    def __len__(self) -> int:
        return len(self.ids)

    @property
    def dim(self) -> int:
        return int(self.embeddings.shape[1])

    # ---- persistence -------------------------------------------------------------------------------
    def save(self, path: str | os.PathLike) -> Path:
        """Write the index as one ``.npz`` atomically; returns the path."""
        path = Path(path)
        check_finite_rows(self.embeddings, self.ids, f"{path}: embeddings")
        check_finite_rows(self.caption_embeddings, [self.ids[int(c)] for c in self.caption_clip],
                          f"{path}: caption_embeddings")
        meta = dict(self.meta, format=FORMAT, dim=self.dim, ids=self.ids, paths=self.paths,
                    captions=self.captions, caption_lang=self.caption_lang, caption_text=self.caption_text)
        arrays = {"embeddings": np.ascontiguousarray(self.embeddings, np.float32),
                  "caption_embeddings": np.ascontiguousarray(self.caption_embeddings, np.float32),
                  "caption_clip": np.asarray(self.caption_clip, np.int64),
                  "meta": np.asarray(json.dumps(meta, ensure_ascii=False))}
        atomic_write_with(path, lambda fh: np.savez(fh, **arrays))
        self.path = path
        return path

    @classmethod
    def load(cls, path: str | os.PathLike, backend: str = "numpy", model: LoadedModel | None = None) -> Index:
        """Read an index written by :meth:`save` / ``mlatr index build``; ``backend`` = numpy | faiss.

        ``model`` (a :class:`~mlatr.training.checkpoint.LoadedModel`) is used for queries instead of
        loading the index's checkpoint.
        """
        if backend not in BACKENDS:
            raise MlatrError(f"unknown search backend {backend!r} (choose from {', '.join(BACKENDS)})")
        path = Path(path)
        if not path.is_file():
            raise MlatrError(f"index not found: {path}")
        what = "an mlatr index (written by mlatr index build)"
        try:
            z = np.load(path, allow_pickle=False)
        except Exception as exc:  # numpy raises ValueError / OSError / EOFError / BadZipFile
            raise unreadable(path, what, exc, ("npz",)) from exc
        if not isinstance(z, np.lib.npyio.NpzFile):
            raise unreadable(path, what)
        try:
            with z:
                meta = json.loads(str(z["meta"]))
                emb, cap_emb, cap_clip = z["embeddings"], z["caption_embeddings"], z["caption_clip"]
        except KeyError as exc:
            raise unreadable(path, what, f"no array {exc}", ("npz",)) from exc
        except Exception as exc:  # a damaged member: BadZipFile, zlib.error, ValueError, EOFError
            raise unreadable(path, what, exc, ("npz",)) from exc
        if not isinstance(meta, dict) or meta.get("format") != FORMAT:
            raise MlatrError(f"{path}: not an mlatr index (format {meta.get('format')!r}, expected {FORMAT!r})")
        missing = [k for k in (*_PER_ENTRY, "checkpoint", "sample_rate", "max_seconds") if k not in meta]
        if missing:
            raise MlatrError(f"{path}: damaged index: its meta lacks {', '.join(missing)}")
        if emb.ndim != 2 or cap_emb.ndim != 2 or cap_clip.ndim != 1:
            raise MlatrError(f"{path}: damaged index: embeddings of shape {emb.shape}, caption embeddings "
                             f"{cap_emb.shape}, caption_clip {cap_clip.shape}")
        n = len(meta["ids"])
        if emb.shape[0] != n or len(meta["paths"]) != n or cap_emb.shape[0] != len(cap_clip):
            raise MlatrError(f"{path}: inconsistent index ({emb.shape[0]} embeddings for {n} ids)")
        if len(cap_clip) and (cap_clip.min() < 0 or cap_clip.max() >= n):
            raise MlatrError(f"{path}: inconsistent index (a caption points to a clip row outside 0..{n - 1})")
        check_finite_rows(emb, meta["ids"], f"{path}: embeddings")
        check_finite_rows(cap_emb, [meta["ids"][int(c)] for c in cap_clip], f"{path}: caption_embeddings")
        return cls(embeddings=emb, ids=list(meta["ids"]), paths=list(meta["paths"]),
                   captions=list(meta["captions"]), caption_embeddings=cap_emb, caption_clip=cap_clip,
                   caption_lang=list(meta["caption_lang"]), caption_text=list(meta["caption_text"]),
                   meta={k: v for k, v in meta.items() if k not in _PER_ENTRY}, path=path, backend=backend,
                   _model=model)

    # ---- queries (implemented in mlatr.search.search) ----------------------------------------------
    def searcher(self, which: str = "audio"):
        """The backend over the clip (``audio``) or caption (``captions``) embeddings, built once."""
        if which not in self._searchers:
            emb = self.embeddings if which == "audio" else self.caption_embeddings
            self._searchers[which] = make_backend(self.backend, emb)
        return self._searchers[which]

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
               caption_embeddings: np.ndarray) -> None:
        """Add ``clips`` (audio relative to ``root``) with their embeddings ``audio [n, d]`` and their captions:
        ``caption_arrays`` as :meth:`~mlatr.data.manifest.Manifest.caption_arrays` gives them (``texts``,
        ``text_lang``, ``text_audio`` = row within ``clips``) and ``caption_embeddings [m, d]``."""
        if audio.shape != (len(clips), self.dim):
            raise MlatrError(f"index append: {audio.shape} audio embeddings for {len(clips)} clips of dim {self.dim}")
        check_finite_rows(audio, [c.id for c in clips], "index: audio embeddings")
        check_finite_rows(caption_embeddings, [clips[int(i)].id for i in caption_arrays["text_audio"]],
                          "index: caption embeddings")
        base = len(self.ids)
        self.embeddings = np.concatenate([self.embeddings, audio.astype(np.float32)])
        self.ids += [c.id for c in clips]
        self.paths += [str(c.audio_path(root).resolve()) for c in clips]
        self.captions += [c.captions for c in clips]
        if len(caption_arrays["texts"]):
            self.caption_embeddings = np.concatenate([self.caption_embeddings, caption_embeddings.astype(np.float32)])
            self.caption_clip = np.concatenate([self.caption_clip, base + np.asarray(caption_arrays["text_audio"])])
            self.caption_lang += [str(x) for x in caption_arrays["text_lang"]]
            self.caption_text += list(caption_arrays["texts"])
        self._searchers.clear()

    def search_text(self, query: str, lang: str | None = "eng", k: int = 10, rank: str = "hybrid"):
        """Clips for a text query in ``lang`` (ISO 639-3; ``None`` where the model does not read it), best
        first: a list of :class:`~mlatr.search.search.Hit`; ``rank`` = audio | captions | hybrid
        (:mod:`mlatr.search.hybrid`)."""
        return search_text(self, query, lang, k, rank)

    def search_audio(self, path: str | os.PathLike, k: int = 10):
        """Sound-to-sound and sound-to-caption search: ``(clip hits, caption hits)``."""
        return search_audio(self, path, k)


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


def load_index_model(checkpoint: dict[str, str], device: str = "cpu") -> LoadedModel:
    """The model of ``checkpoint`` (``{"path", "sha256"}``); refuses a file whose bytes changed."""
    path = checkpoint["path"]
    if not Path(path).is_file():
        raise MlatrError(f"the index's checkpoint {path} is gone; the index needs its model to encode queries")
    if file_sha256(path) != checkpoint["sha256"]:
        raise MlatrError(f"checkpoint {path} changed since the index was built (sha256 differs): "
                         "rebuild the index with mlatr index build")
    return load_model(path, device)


def index_meta(loaded: LoadedModel, manifest: Manifest, sample_rate: int, max_seconds: float,
               caption_languages: Sequence[str], window_seconds: float | None = None,
               sha: str | None = None) -> dict[str, Any]:
    """What an index records of how it was made: the checkpoint (absolute path, SHA-256: ``sha`` when
    already computed), the model's config, the audio settings, the caption languages and the manifest."""
    checkpoint = Path(loaded.path).resolve()
    meta: dict[str, Any] = {"checkpoint": {"path": str(checkpoint), "sha256": sha or file_sha256(checkpoint)},
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


@dataclass
class BuildReport:
    index: Index
    added: int
    kept: int
    skipped: dict[str, str]


def build_index(loaded: LoadedModel, manifest: Manifest, output: str | os.PathLike, *, add: bool = False,
                caption_languages: Sequence[str] | None = None, batch_size: int = 16, max_seconds: float | None = None,
                window_seconds: float | None = None, sample_rate: int | None = None, skip_bad: bool = False,
                progress: bool = False) -> BuildReport:
    """Encode ``manifest``'s clips (and captions) with ``loaded`` and write the index to ``output``.

    With ``add`` and an existing ``output``, only clips whose id is not in it are encoded and appended;
    the existing index must come from the same checkpoint file (same SHA-256). ``caption_languages``
    default to every language of the manifest. ``max_seconds`` / ``sample_rate`` default to the
    model's training data settings (``eval_max_seconds``, ``sample_rate``). A clip longer than
    ``window_seconds`` (default: the model's ``eval_max_seconds``) is encoded as windows, ``batch_size``
    windows at a time (:mod:`mlatr.long_clips`), so memory does not grow with ``max_seconds`` or the
    library. An unreadable clip is an error, or with ``skip_bad`` skipped and listed in the report;
    a manifest none of whose clips can be read is an error either way.
    """
    if loaded.path is None:
        raise MlatrError("build_index needs a model loaded from a checkpoint file (the index records it)")
    checkpoint_path = Path(loaded.path).resolve()
    sha = file_sha256(checkpoint_path)
    sample_rate = int(sample_rate or loaded.data["sample_rate"])
    max_seconds = float(max_seconds or loaded.data["eval_max_seconds"])
    window_seconds = min(float(window_seconds or loaded.data["eval_max_seconds"]), max_seconds)
    if not manifest.clips:
        raise MlatrError(f"no clip to index in {manifest.path or 'the manifest'}")
    langs = list(caption_languages) if caption_languages else manifest.languages()
    output = Path(output)
    remove_orphan_temps(output.parent, [output.name])  # what a killed build left beside the index
    model = loaded.model
    if add and output.exists():
        index = Index.load(output, model=loaded)
        if index.meta["checkpoint"]["sha256"] != sha:
            raise MlatrError(f"{output} was built with checkpoint {index.meta['checkpoint']['path']} "
                             f"(another model); rebuild it without --add")
        if (index.meta["sample_rate"] != sample_rate or index.meta["max_seconds"] != max_seconds
                or index.meta.get("window_seconds", max_seconds) != window_seconds):
            raise MlatrError(f"{output} was built at {index.meta['sample_rate']} Hz / "
                             f"{index.meta['max_seconds']} s (windows of "
                             f"{index.meta.get('window_seconds', index.meta['max_seconds'])} s); "
                             "--add must use the same settings")
        langs = list(index.meta["caption_languages"])
    else:
        index = empty_index(model.embed_dim, {}, loaded)
    index.meta.update(index_meta(loaded, manifest, sample_rate, max_seconds, langs, window_seconds, sha))
    have = set(index.ids)
    new_clips = [c for c in manifest.clips if c.id not in have]
    sub = Manifest(clips=new_clips, root=manifest.root, path=manifest.path)
    skipped: dict[str, str] = {}
    if new_clips:
        source = AudioSource(sub, sample_rate, cache=False, skip_bad=skip_bad)
        rows, audio = encode_audio_windows(model, source, batch_size, max_seconds, window_seconds, loaded.device,
                                           progress, desc="index")
        skipped = dict(source.bad)
        if not rows:
            first = next(iter(skipped.values()), "")
            raise MlatrError(f"none of the {len(new_clips)} new clip(s) of {manifest.path or 'the manifest'} "
                             f"could be read; nothing was written (first: {first})")
        kept = [sub[i] for i in rows]
        arrays = Manifest(clips=kept, root=manifest.root, path=manifest.path).caption_arrays(langs)
        text = encode_texts(model, arrays["texts"], list(arrays["text_lang"]), batch_size)
        index.append(kept, manifest.root, audio, arrays, text)
    added = len(index.ids) - len(have)
    index.save(output)
    return BuildReport(index=index, added=added, kept=len(have), skipped=skipped)
