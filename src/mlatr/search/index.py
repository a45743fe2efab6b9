"""A search index: a model's audio embeddings of a sound library, with ids, paths and captions, and its queries.

An :class:`Index` is two tables of columns (:mod:`mlatr.search.columns`): its clips (embedding, id, audio
path, captions, the audio file's state when encoded) and their captions (embedding, clip row, language,
text), the meta of how it was made (the model's checkpoint, the SHA-256 of its file and of its weights:
:mod:`mlatr.inference.model_identity`; audio settings, caption languages:
:func:`mlatr.search.library_encoding.index_meta`) and the rows deleted since (tombstones: kept in the tables, never
returned by a search). Every embedding is finite and of unit norm: building, saving or
loading an index with a NaN, infinite or non-unit row is an error naming the file and the clips (a search
would rank such rows arbitrarily, FAISS drops them, and a non-unit row's score is no cosine).

Where an index lives is its :class:`~mlatr.search.storage.Storage`, chosen once when it is loaded or saved
(:func:`~mlatr.search.storage_choice.open_storage`: an index folder, a legacy ``.npz``, Milvus; in memory after
:meth:`Index.build`): the index asks it for its searchers and text ranker and never looks at the kind itself.

Searching is the index's own: :meth:`Index.search_text`, :meth:`Index.search_audio`, :meth:`Index.search_similar`,
:meth:`Index.search_vector` encode the query with the index's model and rank it with the index's parts
(:mod:`mlatr.search.search`, :mod:`mlatr.search.hybrid`), answering :class:`~mlatr.search.results.Results`.
Writing one: :mod:`mlatr.search.build` (``build_index``, ``write_rows``, ``delete_clips``); what a build encodes:
:mod:`mlatr.search.build_plan`. A hit whose file has been deleted or changed since it was encoded is reported
(:meth:`Index.stale`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from mlatr import api_args
from mlatr.audio.bounded import load_query_audio
from mlatr.data.dedup import same_samples
from mlatr.data.file_metadata import measure_clips, source_of
from mlatr.errors import MlatrError
from mlatr.evaluation.nonsense import INDEX_SEED, nonsense_queries
from mlatr.file_state import file_state
from mlatr.inference import LoadedModel, load_model
from mlatr.inference.library import LibrarySource, open_library
from mlatr.inference.model_identity import OtherModelError, check_index_model, model_sha256
from mlatr.inference.worker_pool import ordered_map
from mlatr.languages import DEFAULT_LANGUAGES
from mlatr.model_registry import default_model, resolve_model
from mlatr.models.protocols import query_languages
from mlatr.search.abstention import conformal_level, level_relevance, relevance_logit
from mlatr.search.ann import AnnBuild
from mlatr.search.columns import CaptionColumns, ClipColumns, SegmentColumns
from mlatr.search.eligibility import Allowed, KeywordDocuments, allowed_clips
from mlatr.search.evidence import Evidence
from mlatr.search.filters import FacetTable, Filter, parse_filter, without_silence
from mlatr.search.hybrid import Ranked, Ranking
from mlatr.search.library_encoding import EncodeSettings, build_settings, encode_clips, index_meta
from mlatr.search.query import TextQuery, check_k, check_min_relevance, text_query
from mlatr.search.query_syntax import ParsedQuery, parse_query, syntax_terms
from mlatr.search.query_translation import (
    QueryTranslation,
    QueryTranslator,
    caption_language,
    installed_translator,
)
from mlatr.search.relevance import ANSWER_DEPTH, Calibration
from mlatr.search.results import Hit, Results
from mlatr.search.search import (
    SAME_AUDIO_COSINE,
    nearest_captions,
    nearest_rows,
    rank_text_queries,
    sound_ranking,
)
from mlatr.search.segments import segmenting, sound_searcher
from mlatr.search.storage import MemoryStorage, Storage, Tables, check_backend
from mlatr.search.storage_choice import open_storage

#: Windows of one sound query encoded per call.
QUERY_WINDOW_BATCH = 16
#: The name of an index's query translation cache (:meth:`Index.translation_cache`).
TRANSLATION_CACHE = ".query-translations.jsonl"


class _Column:
    """An :class:`Index` attribute that is one column of one of its tables: ``index.paths`` reads (and an
    assignment replaces) ``index.clip_columns["path"]``."""

    def __init__(self, table: str, key: str):
        self.table, self.key = table, key

    def __get__(self, index, owner=None):
        return self if index is None else getattr(index, self.table).get(self.key)

    def __set__(self, index, value) -> None:
        getattr(index, self.table).set(self.key, value)


@dataclass
class Index:
    """Audio embeddings of a library and what is needed to search them (see the module docstring)."""

    clip_columns: ClipColumns
    caption_columns: CaptionColumns
    meta: dict[str, Any] = field(default_factory=dict)
    path: Path | None = None
    backend: str = "auto"
    #: rows deleted (tombstones): kept in the tables, never returned by a search
    deleted_rows: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    #: where the index lives (module docstring)
    storage: Storage = field(default_factory=MemoryStorage, repr=False)
    #: the segments of its long clips (:mod:`mlatr.search.segments`; None: none)
    segment_columns: SegmentColumns | None = field(default=None, repr=False)
    _model: Any = field(default=None, repr=False)
    _parts: dict[str, Any] = field(default_factory=dict, repr=False)

    # ---- the columns (read and written through the tables) ------------------------------------------
    embeddings = _Column("clip_columns", "embeddings")  # [N, d] unit norm (a folder's: memory-mapped)
    ids = _Column("clip_columns", "ids")
    paths = _Column("clip_columns", "path")
    captions = _Column("clip_columns", "captions")  # per clip, {language: [caption | None]}
    states = _Column("clip_columns", "state")  # per clip, its audio's size and mtime when encoded (None: not recorded)
    caption_embeddings = _Column("caption_columns", "embeddings")  # [M, d]
    caption_clip = _Column("caption_columns", "clip")  # [M] int64: the row of the clip each caption describes
    caption_lang = _Column("caption_columns", "lang")
    caption_text = _Column("caption_columns", "text")

    def __repr__(self) -> str:
        """One line: ``Index(1,481 clips, 2 shards, hnsw, model=runs/demo-real/model.pt)``, not its columns."""
        deleted = f" ({len(self.deleted_rows):,} deleted)" if len(self.deleted_rows) else ""
        model = (self.meta.get("checkpoint") or {}).get("path", "?")
        return (f"Index({len(self):,} clips{deleted}, {self.storage.describe(self.tables)}, dim {self.dim}, "
                f"model={model})")

    @property
    def tables(self) -> Tables:
        """The index's tables, meta and tombstones (:class:`~mlatr.search.storage.Tables`; not copied)."""
        return Tables(self.clip_columns, self.caption_columns, self.meta, self.deleted_rows, self.segment_columns)

    def __len__(self) -> int:
        """Clips a search can return (rows not deleted)."""
        return len(self.ids) - len(self.deleted_rows)

    @property
    def dim(self) -> int:
        return self.clip_columns.dim

    # ---- rows ---------------------------------------------------------------------------------------
    def take(self, rows: Sequence[int] | np.ndarray) -> Index:
        """The clips ``rows`` (in that order) and their captions, in memory, without tombstones."""
        taken = self.tables.take(rows)
        return Index(taken.clips, taken.captions, taken.meta, path=self.path, backend=self.backend,
                     _model=self._model, segment_columns=taken.segments)

    def live(self) -> Index:
        """This index without its deleted rows (itself when none is deleted); tables copied in memory."""
        if not len(self.deleted_rows):
            return self
        return self.take(np.setdiff1d(np.arange(len(self.ids)), self.deleted_rows))

    def stale(self, row: int) -> str | None:
        """``"deleted"`` or ``"changed"`` when clip ``row``'s audio is gone or differs from when it was
        encoded (size or mtime), else None (also when nothing was recorded)."""
        recorded = self.states[row]
        if recorded is None:
            return None
        now = file_state(self.paths[row])
        if now is None:
            return "deleted"
        return "changed" if now != recorded else None

    # ---- persistence -------------------------------------------------------------------------------
    def save(self, path: str | os.PathLike, dtype: str = "float32", ann: AnnBuild | None = None) -> Path | str:
        """Write the index's live rows where ``path`` names (:func:`~mlatr.search.storage_choice.open_storage`: one
        ``.npz`` atomically, a Milvus target, else a new index folder of one shard whose manifest replaces the
        folder's previous one; ``dtype`` float32 | float16 and ``ann`` (how its approximate structure is built,
        default by size): a folder's). Returns the path. The caller holds the writer lock of ``path`` where another
        process could write it."""
        storage = open_storage(path if isinstance(path, str) else Path(path))
        storage.replace(self.tables, dtype, ann)
        self.path = storage.path
        return storage.path if storage.path is not None else str(path)

    @classmethod
    def load(cls, path: str | os.PathLike, backend: str = "auto", model: LoadedModel | None = None,
             allow_other_model: bool = False) -> Index:
        """Read an index written by :meth:`save` / ``mlatr index build`` (a folder, an ``.npz`` or a Milvus
        target); ``backend`` = auto (a shard's approximate structure where it has one, else exact) | numpy |
        faiss (both exact).

        ``model`` (a :class:`~mlatr.inference.LoadedModel`) is used for queries instead of loading the index's
        checkpoint; it must be the model that made the index (its weights' SHA-256: another seed or epoch of
        the same config is refused, naming both) unless ``allow_other_model``
        (:func:`~mlatr.inference.model_identity.check_index_model`).
        """
        if model is not None:
            api_args.instance("model", model, LoadedModel, "mlatr.load(PATH), or None")
        path = api_args.path("path", path)
        check_backend(backend)
        storage = open_storage(path)
        tables = storage.read()
        index = cls(tables.clips, tables.captions, tables.meta, path=storage.path, backend=backend,
                    deleted_rows=tables.deleted, storage=storage, _model=model, segment_columns=tables.segments)
        if model is not None:
            check_index_model(index.meta, model, str(path), allow_other_model)
        return index

    @classmethod
    def build(cls, model: LoadedModel, source: LibrarySource, *, split: str = "all",
              caption_languages: Sequence[str] | None = None, batch_size: int = 16, max_seconds: float | None = None,
              window_seconds: float | None = None, skip_bad: bool = False, progress: bool = True,
              segments: bool = True, segment_seconds: float | None = None, segment_hop: float | None = None,
              workers: int = 1) -> Index:
        """An index of the library ``source`` (a folder of sounds, a manifest file or :class:`Manifest`, sound
        files, webdataset shards, or a list of these: :func:`mlatr.inference.library.open_library`, the forms
        ``mlatr index build`` takes) embedded by ``model``, in memory (:meth:`save` writes it). Options as
        :func:`mlatr.search.build.build_index` (``segments``: long clips indexed as segments too,
        :mod:`mlatr.search.segments`; ``workers``: processes reading and encoding the audio); unreadable clips are an
        error unless ``skip_bad``."""
        api_args.instance("model", model, LoadedModel, "mlatr.load(PATH)")
        batch_size = api_args.integer("batch_size", batch_size)
        max_seconds = api_args.positive_number("max_seconds", max_seconds)
        window_seconds = api_args.positive_number("window_seconds", window_seconds)
        skip_bad, progress = api_args.flag("skip_bad", skip_bad), api_args.flag("progress", progress)
        workers = max(1, api_args.integer("workers", workers, low=0))
        segment_seconds = api_args.positive_number("segment_seconds", segment_seconds)
        segment_hop = api_args.positive_number("segment_hop", segment_hop)
        if caption_languages is not None:
            caption_languages = api_args.language_codes("caption_languages", caption_languages)
        library = open_library(source, split=api_args.text("split", split), skip_bad=skip_bad, progress=progress)
        manifest = library.manifest
        measure_clips(manifest.clips, manifest.root, progress,  # a folder's loudness, as mlatr index build
                      map_files=partial(ordered_map, workers=workers))
        sample_rate, max_seconds, window_seconds = build_settings(model, max_seconds, window_seconds, None)
        langs = list(caption_languages) if caption_languages else manifest.languages()
        cut = segmenting(window_seconds, segment_seconds, segment_hop, enabled=api_args.flag("segments", segments))
        meta = index_meta(model, manifest, sample_rate, max_seconds, langs, window_seconds, segments=cut)
        how = EncodeSettings(sample_rate, max_seconds, window_seconds, batch_size, skip_bad, progress, library.shards,
                             cut, workers=workers)
        tables, _ = encode_clips(model, manifest, manifest.clips, langs, how, meta)
        return cls(tables.clips, tables.captions, meta, _model=model, segment_columns=tables.segments)

    # ---- the parts a query is ranked with (its storage's, built once) --------------------------------
    def searcher(self, which: str = "audio"):
        """Top-k over the clip (``audio``) or caption (``captions``) embeddings, deleted rows skipped: the
        storage's (an index folder's: one per shard, its approximate structure with backend ``auto``). With
        segments, the clips' searcher scores a clip by the higher of its pooled vector and its best segment
        (:class:`~mlatr.search.segments.MomentSearcher`); ``clips``: by its pooled vector alone."""
        if which not in self._parts:
            found = self.storage.searcher(self.tables, "audio" if which == "clips" else which, self.backend)
            self._parts[which] = sound_searcher(found, self.moments()) if which == "audio" else found
        return self._parts[which]

    def moments(self):
        """The segments of the index's long clips, scored and searched (:mod:`mlatr.search.segments`; the
        storage's, built once); None without any."""
        if "moments" not in self._parts:
            self._parts["moments"] = self.storage.moments(self.tables, self.backend)
        return self._parts["moments"]

    def text_ranker(self, window: int | None = None):
        """Caption and keyword ranking of the index's clips for text queries (:mod:`mlatr.search.hybrid`), built
        once by the storage. Windowed (each source's top ``window`` found by its searcher, approximate at scale)
        where the storage records a window (:meth:`fusion_window`), else exact. ``window``: force a windowed
        ranking with this window (a new ranker, not kept)."""
        if window is None and "text" in self._parts:
            return self._parts["text"]
        chosen = window if window is not None else self.fusion_window()
        searchers = (self.searcher("audio"), self.searcher("captions")) if chosen is not None else None
        ranker = self.storage.text_ranker(self.tables, self.backend, chosen, searchers, self.moments())
        ranking = self.calibration() or Calibration.default()  # the default ranking orders an uncalibrated model's
        ranker.model, ranker.answer = ranking.text, ranking.answer  # hits; their relevance is never shown (_hits)
        if window is None:
            self._parts["text"] = ranker
        return ranker

    # ---- relevance: the model's own calibration ------------------------------------------------------
    def calibration(self) -> Calibration | None:
        """The calibration of the index's model (:mod:`mlatr.calibration_file`: fitted for its weights), which gives
        every hit its relevance and every answer its "nothing relevant"; None when the model has none, or when it
        was fitted for weights other than those that made the index's embeddings (a model given with
        ``allow_other_model``): :meth:`calibration_info` says why. Loads the model on first use."""
        if "calibration" not in self._parts:
            self._parts["calibration"] = self._own_calibration()
        return self._parts["calibration"][0]

    def use_calibration(self, calibration: Calibration | None) -> None:
        """Use ``calibration`` (fitted for the weights that made the index's embeddings) instead of the model's own:
        for an index of vectors alone, whose meta names no model; None: uncalibrated."""
        if calibration is not None:
            api_args.instance("calibration", calibration, Calibration, "a mlatr.search.relevance.Calibration")
        self._parts["calibration"] = (calibration, None if calibration is not None else "no calibration was given")
        self._parts.pop("text", None)  # ranked again with it

    def _own_calibration(self) -> tuple[Calibration | None, str | None]:
        if self._model is None and not (self.meta.get("checkpoint") or {}).get("path"):
            return None, "the index records no model (an index of vectors alone: Index.use_calibration)"
        try:
            model = self.model()
        except MlatrError as exc:  # a text query fails the same way; a query given as a vector is ranked all the same
            return None, f"the index's model cannot be loaded ({exc})"
        if model.calibration is None:
            return None, model.calibration_note
        recorded = (self.meta.get("checkpoint") or {}).get("weights_sha256")
        fitted_for = model.calibration.get("weights_sha256")
        if recorded and fitted_for != recorded:
            return None, (f"the model's calibration was fitted for weights sha256 {fitted_for[:12]}, the index's "
                          f"embeddings were made by weights {recorded[:12]}: rebuild the index with this model")
        return Calibration.from_dict(model.calibration), None

    def calibration_info(self) -> dict[str, Any]:
        """Which calibration the index's relevance comes from: ``{"calibrated": True, "id", "weights_sha256",
        "fitted"}``, or ``{"calibrated": False, "why"}`` (what ``mlatr index info`` and ``--json`` say)."""
        cal = self.calibration()
        if cal is None:
            return {"calibrated": False, "why": self._parts["calibration"][1]}
        return {"calibrated": True, "id": cal.id, "weights_sha256": cal.weights_sha256, "fitted": cal.fitted}

    def fusion_window(self) -> int | None:
        """The window of a windowed text ranking (:meth:`text_ranker`): the one the build recorded, or
        :data:`~mlatr.search.fused_recall.DEFAULT_WINDOW`; None (exact) where no shard has an approximate
        structure or the backend is forced."""
        return self.storage.fusion_window(self.tables, self.backend)

    def has_live_captions(self) -> bool:
        """Whether any clip not deleted has a caption (computed once). Without one, the fused score orders the clips
        as their sound does (no caption or keyword evidence: :mod:`mlatr.search.relevance`), so a hybrid query is
        found by the index's searcher (approximate at scale) and described, as a sound-ranked one."""
        if "live_captions" not in self._parts:
            clip = np.asarray(self.caption_clip)
            self._parts["live_captions"] = bool(len(clip)) and (
                not len(self.deleted_rows) or not np.isin(clip, self.deleted_rows).all())
        return self._parts["live_captions"]

    def model(self) -> LoadedModel:
        """The model that made the embeddings (loaded from the index's checkpoint on first use)."""
        if self._model is None:
            self._model = load_index_model(self.meta, str(self.path or "the index"))
        return self._model

    # ---- which clips a query may return --------------------------------------------------------------
    def facets(self) -> FacetTable:
        """The clips' facets as columns (:class:`~mlatr.search.filters.FacetTable`; each read on first use)."""
        if "facets" not in self._parts:
            self._parts["facets"] = FacetTable(self.clip_columns["facets"])
        return self._parts["facets"]

    def allowed(self, where: Filter | None, parsed: ParsedQuery | None = None, lang: str | None = None,
                translated: Mapping[str, str] | None = None) -> Allowed | None:
        """The clips a query may return (:func:`~mlatr.search.eligibility.allowed_clips`): the checked filter
        ``where`` (a text query's already with ``not silent``: :func:`~mlatr.search.filters.without_silence`) and
        ``parsed``'s excluded and required words and phrases in ``lang``, each also read through its translation
        into :meth:`caption_language` where ``translated`` has one (:meth:`term_translations`); None: every live
        clip."""
        documents = []
        if parsed is not None and (parsed.excluded or parsed.required):
            if "keyword_documents" not in self._parts:
                self._parts["keyword_documents"] = KeywordDocuments(self.facets())
            documents = [self.text_ranker(), self._parts["keyword_documents"]]
        live = None
        if len(self.deleted_rows):
            live = np.ones(len(self.ids), bool)
            live[self.deleted_rows] = False
        return allowed_clips(len(self.ids), self.facets(), where, parsed, lang, documents, live,
                             translated or {}, self.caption_language())

    def query_allowed(self, query: TextQuery) -> Allowed | None:
        """:meth:`allowed` of a checked text query: its filter, silence unless asked for, its syntax (read through
        its translation too where the query is: :meth:`term_translations`)."""
        return self.allowed(without_silence(query.where, query.include_silent), parse_query(query.text), query.lang,
                            self.term_translations(query))

    # ---- text queries --------------------------------------------------------------------------------
    def search_text(self, query: str, lang: str | None = None, k: int = 10, rank: str = "hybrid",
                    min_relevance: float | None = None, where: str | Filter | None = None,
                    include_silent: bool = False, translate: str | bool = "auto") -> Results:
        """Clips for a text query in ``lang`` (ISO 639-3; ``None`` where the model does not read it), best
        first: :class:`~mlatr.search.results.Results`, a list of :class:`~mlatr.search.results.Hit`, each with its
        relevance and evidence, that says ``nothing_relevant`` when the answer's relevance is below
        ``min_relevance`` (default: the answer model's threshold); ``rank`` = hybrid (the fused score of every
        source, :mod:`mlatr.search.fusion`) | audio (the clips' audio embeddings nearest to the query's) |
        captions. ``query`` may hold ``-word``, ``"a phrase"`` and ``OR`` (:mod:`mlatr.search.query_syntax`);
        ``where`` limits the clips to those whose facets it allows (``"duration<1 and channels=1"``:
        :mod:`mlatr.search.filters`); silent clips are left out unless ``include_silent`` or ``where`` tests
        ``silent``. ``translate`` = auto (default): a query in a language other than the captions' is also read
        through its translation into theirs where a translator is installed (:mod:`mlatr.search.query_translation`;
        the answer's ``translated_query`` says which); off (or False): never. The query is checked here
        (:func:`~mlatr.search.query.text_query`)."""
        languages = query_languages(self.model().model.text_encoder)
        return self.search_query(text_query(query, lang, k, rank, languages, min_relevance=min_relevance,
                                            where=where, include_silent=include_silent, translate=translate))

    def search_query(self, query: TextQuery) -> Results:
        """:meth:`search_text` of a query already checked where it entered; ranking by captions an index whose
        live clips have none is refused (every score would be -inf)."""
        if query.rank == "captions" and not self.has_live_captions():
            raise api_args.ArgumentError("rank: captions ranks clips by their captions, and this index holds none (of "
                                         "a clip not deleted): rank by audio or hybrid")
        return self.rank_texts(self.embed_queries([query]), [query])[0]

    def embed_queries(self, queries: Sequence[TextQuery]) -> np.ndarray:
        """``[Q, d]`` unit-norm embeddings of checked queries by the index's model, one encoder call per kind of
        language argument (all given, or none). What is embedded is each query without its syntax
        (:attr:`~mlatr.search.query_syntax.ParsedQuery.embedded`: a plain query as typed)."""
        loaded = self.model()
        out = np.zeros((len(queries), self.dim), np.float32)
        for has_lang in (True, False):
            rows = [i for i, q in enumerate(queries) if (q.lang is not None) == has_lang]
            if rows:
                out[rows] = loaded.embed_checked([parse_query(queries[i].text).embedded for i in rows],
                                                 [queries[i].lang for i in rows] if has_lang else None)  # [n, d]
        return out

    def rank_texts(self, vecs: np.ndarray, queries: Sequence[TextQuery],
                   translations: Sequence[QueryTranslation | None] | None = None) -> list[Results]:
        """The answers of checked text queries already embedded together (``vecs [B, d]``: :meth:`embed_queries`),
        as a batching server has them (:func:`~mlatr.search.search.rank_text_queries`), each among the clips it may
        return (:meth:`query_allowed`), with their ``translations`` (:meth:`embed_translations`; None: made here,
        which calls the model)."""
        if translations is None:
            translations = self.embed_translations(self.translate_queries(queries))
        allowed = [self.query_allowed(q) for q in queries]
        rankings = rank_text_queries(self.text_ranker(), self.searcher("audio"), self.dim, np.asarray(vecs), queries,
                                     self.has_live_captions(), allowed, translations)
        vecs = np.asarray(vecs)
        told = [None if t is None else t.text for t in translations]
        cal = self.calibration()
        if cal is None:
            why = self._parts["calibration"][1]
            return [Results(self._hits(ranking, vec), uncalibrated=why, translated_query=t)
                    for ranking, vec, t in zip(rankings, vecs, told, strict=True)]
        threshold = self.nothing_relevant_level() if any(q.min_relevance is None for q in queries) else None
        return [Results(self._hits(ranking, vec), threshold if q.min_relevance is None else q.min_relevance,
                        ranking.relevance, translated_query=t)
                for ranking, q, vec, t in zip(rankings, queries, vecs, told, strict=True)]

    # ---- query translation (mlatr.search.query_translation) -----------------------------------------------
    def caption_language(self) -> str:
        """The language of the index's captions, queries are translated into
        (:func:`~mlatr.search.query_translation.caption_language` of its recorded caption languages)."""
        return caption_language(self.meta.get("caption_languages"))

    def translator(self) -> QueryTranslator | None:
        """The query translator (:func:`~mlatr.search.query_translation.installed_translator`: Apertium's installed
        pairs, found on first use; None without Apertium), or the one :meth:`use_translator` gave."""
        if "translator" not in self._parts:
            self._parts["translator"] = installed_translator(self.translation_cache())
        return self._parts["translator"]

    def translation_cache(self) -> Path | None:
        """The file an index keeps its queries' translations in (:class:`~mlatr.search.query_translation.QueryCache`):
        ``.query-translations.jsonl`` inside an index folder, ``NAME.query-translations.jsonl`` beside an ``.npz``;
        None (memory only) for an index in memory or in Milvus."""
        if not isinstance(self.path, Path):
            return None
        if self.path.is_dir():
            return self.path / TRANSLATION_CACHE
        return self.path.with_name(self.path.name + TRANSLATION_CACHE)

    def use_translator(self, translator: QueryTranslator | None) -> None:
        """Translate queries with ``translator`` (a :class:`~mlatr.search.query_translation.QueryTranslator` over
        any backend) instead of Apertium's; None: never."""
        if translator is not None:
            api_args.instance("translator", translator, QueryTranslator, "a mlatr.search.query_translation."
                              "QueryTranslator")
        self._parts["translator"] = translator

    def translate_queries(self, queries: Sequence[TextQuery]) -> list[str | None]:
        """Each checked query's translation into :meth:`caption_language` (its positive part:
        :attr:`~mlatr.search.query_syntax.ParsedQuery.embedded`), or None: ``translate`` off, no language given,
        the captions' own, no live caption, no pair installed, the model cannot embed the captions' language, the
        translation failed or changed nothing. No encoder call (a server translates outside its model lock); the
        translator caches them."""
        out: list[str | None] = [None] * len(queries)
        target, translator, asked = self._read_translated(queries)
        by_lang: dict[str, list[int]] = {}
        for i in asked:
            by_lang.setdefault(queries[i].lang, []).append(i)
        for lang, rows in by_lang.items():
            terms = [t for i in rows for t in syntax_terms(parse_query(queries[i].text))]
            # the syntax's words in the same call: cached for term_translations (a server's model lock waits on none)
            done = translator.translate([parse_query(queries[i].text).embedded for i in rows] + terms, lang, target)
            for i, text in zip(rows, done[:len(rows)], strict=True):
                out[i] = text
        return out

    def term_translations(self, query: TextQuery) -> dict[str, str]:
        """The translations into :meth:`caption_language` of a checked query's excluded words and required
        phrases (:func:`~mlatr.search.query_syntax.syntax_terms`), each by itself, where the query is read through a
        translation (:meth:`translate_queries`' conditions): ``perro -gallo`` leaves out the clips holding
        ``rooster`` as well as ``gallo``; ``{}`` otherwise, and for a word the translator leaves as it is."""
        terms = syntax_terms(parse_query(query.text))
        if not terms:
            return {}
        target, translator, asked = self._read_translated([query])
        if not asked:
            return {}
        done = translator.translate(terms, query.lang, target)
        return {term: text for term, text in zip(terms, done, strict=True) if text is not None}

    def _read_translated(self, queries: Sequence[TextQuery]) -> tuple[str, QueryTranslator | None, list[int]]:
        """``(caption language, translator, rows)``: the checked ``queries`` read through a translation into the
        captions' language here (:meth:`translate_queries`' docstring says when)."""
        target = self.caption_language()
        asked = [i for i, q in enumerate(queries) if q.translate and q.lang is not None and q.lang != target]
        translator = self._caption_translator() if asked else None
        if translator is None:
            return target, None, []
        return target, translator, [i for i in asked if translator.available(queries[i].lang, target)]

    def translates(self, languages: Sequence[str]) -> list[str]:
        """Those of ``languages`` whose queries :meth:`translate_queries` reads through a translation here (the pair
        installed into :meth:`caption_language`, live captions, a model that embeds that language)."""
        target = self.caption_language()
        asked = [lang for lang in languages if lang != target]
        translator = self._caption_translator() if asked else None
        return [] if translator is None else [lang for lang in asked if translator.available(lang, target)]

    def _caption_translator(self) -> QueryTranslator | None:
        """The translator a query is read through into :meth:`caption_language` here, or None: no live caption for a
        translation to match, no translator, or a model that cannot embed the captions' language."""
        if not self.has_live_captions():
            return None
        translator = self.translator()
        return translator if translator is not None and self._embeds(self.caption_language()) else None

    def _embeds(self, lang: str) -> bool:
        """Whether the index's model can embed a query in ``lang`` (an index of vectors alone, whose model cannot
        be loaded, ranks the queries it is given as vectors untranslated)."""
        try:
            known = query_languages(self.model().model.text_encoder).known
        except MlatrError:
            return False
        return known is None or lang in known

    def embed_translations(self, texts: Sequence[str | None]) -> list[QueryTranslation | None]:
        """:meth:`translate_queries`' translations embedded by the index's model in :meth:`caption_language` (one
        encoder call), as the ranking reads them (:class:`~mlatr.search.query_translation.QueryTranslation`)."""
        target = self.caption_language()
        rows = [i for i, t in enumerate(texts) if t]
        out: list[QueryTranslation | None] = [None] * len(texts)
        if rows:
            vecs = self.model().embed_checked([texts[i] for i in rows], [target] * len(rows))
            for i, vec in zip(rows, vecs, strict=True):
                out[i] = QueryTranslation(texts[i], target, np.asarray(vec, np.float32))
        return out

    # ---- "nothing relevant": the index's own level -------------------------------------------------------
    def nothing_relevant_level(self) -> float:
        """The answer's relevance below which a text query's answer is "nothing relevant" by default
        (:mod:`mlatr.search.abstention`): the index's conformal level on nonsense queries plus the calibration's
        margin; a calibration without a "nothing relevant" rule gives its answer model's fixed threshold."""
        cal = self.calibration()
        if cal is None:
            raise MlatrError("the index's model is not calibrated: nothing is called irrelevant")
        if "margin" not in cal.abstention:
            return cal.answer.threshold
        return level_relevance(self.abstention()["level"], float(cal.abstention["margin"]))

    def abstention(self) -> dict[str, Any]:
        """The index's "nothing relevant" record for its model's calibration and its live library: the one its meta
        stores (:meth:`record_abstention`) when it was fitted for them, else fitted now, in memory (a library changed
        by ``mlatr index delete``, a calibration stored with the model since): ``{"level", "queries", "seed",
        "calibration", "clips", "captions", "stored"}``."""
        if "abstention" not in self._parts:
            stored = self.meta.get("abstention")
            self._parts["abstention"] = ({**stored, "stored": True} if self._abstention_current(stored)
                                         else {**self.fit_abstention(), "stored": False})
        return self._parts["abstention"]

    def _abstention_current(self, record: Any) -> bool:
        cal = self.calibration()
        return (isinstance(record, dict) and cal is not None and record.get("calibration") == cal.id
                and record.get("clips") == len(self) and record.get("captions") == self._live_caption_count()
                and isinstance(record.get("level"), int | float))

    def _live_caption_count(self) -> int:
        clip = np.asarray(self.caption_clip)
        return int(len(clip) - np.isin(clip, self.deleted_rows).sum()) if len(self.deleted_rows) else len(clip)

    def fit_abstention(self) -> dict[str, Any]:
        """Fit the index's "nothing relevant" level (:func:`~mlatr.search.abstention.conformal_level`): the seeded
        nonsense queries of its model's calibration, in the model's languages in turn, run against the index."""
        cal = self.calibration()
        if cal is None:
            raise MlatrError("the index's model is not calibrated: no 'nothing relevant' level to fit")
        seed = int(cal.abstention.get("nonsense_seed", INDEX_SEED))
        accepted = query_languages(self.model().model.text_encoder)
        langs = [lang for lang in (self.model().data.get("languages") or DEFAULT_LANGUAGES)
                 if accepted.known is None or lang in accepted.known] or [None]
        queries = [text_query(q["text"], q["lang"], ANSWER_DEPTH, "hybrid", accepted)
                   for q in nonsense_queries(langs, seed=seed)]
        rankings = rank_text_queries(self.text_ranker(), self.searcher("audio"), self.dim, self.embed_queries(queries),
                                     queries, self.has_live_captions())
        null = [relevance_logit(r.relevance) for r in rankings]
        return {"level": conformal_level(null), "queries": len(null), "seed": seed, "calibration": cal.id,
                "clips": len(self), "captions": self._live_caption_count()}

    def record_abstention(self) -> dict[str, Any] | None:
        """Store the index's "nothing relevant" level in its meta through its storage, fitted now
        (:meth:`fit_abstention`) unless the stored one is current (a build, an add or a compact calls it); None, and
        nothing stored, when the model is not calibrated."""
        if self.calibration() is None:
            return None
        current = self.abstention()
        record = {k: v for k, v in current.items() if k != "stored"}
        if current["stored"]:
            return record
        self.storage.record_meta("abstention", record)
        self.meta["abstention"] = record
        self._parts["abstention"] = {**record, "stored": True}
        return record

    # ---- sound queries -------------------------------------------------------------------------------
    def search_audio(self, path: str | os.PathLike | np.ndarray, k: int = 10,
                     min_relevance: float | None = None, where: str | Filter | None = None) -> Results:
        """Clips for a sound query (a file's path, or :meth:`query_waveform`'s ``[T]``), best first:
        :class:`~mlatr.search.results.Results` as :meth:`search_text` answers, each hit carrying its relevance
        (the sound-query model of :mod:`mlatr.search.relevance`) and saying ``same_audio`` where the clip is the
        query's own sound (:meth:`mark_same_audio`); the indexed captions nearest to it (sound-to-caption) in the
        list's ``caption_hits``. ``k``, ``min_relevance`` (default: the sound-query model's threshold) and
        ``where`` (the clips' facets it is limited to, as :meth:`search_text`'s; a sound query keeps silent clips)
        are checked here."""
        k, min_relevance = check_k(k), check_min_relevance(min_relevance)
        allowed = self.allowed(parse_filter(where))
        wave = path if isinstance(path, np.ndarray) else self.query_waveform(api_args.path("query", path))
        return self.search_encoded_audio(wave, self.embed_sound(wave), k, min_relevance, allowed)

    def query_waveform(self, path: str | os.PathLike) -> np.ndarray:
        """``[T]`` the part of the sound file at ``path`` a query uses: its centre ``max_seconds`` at the index's
        rate, decoded alone (:func:`mlatr.audio.bounded.load_query_audio`: the file's length is bounded from its
        header before any decoding). No model is called: a server decodes outside its model lock."""
        return load_query_audio(path, float(self.meta["max_seconds"]), int(self.meta["sample_rate"]))

    def embed_sound(self, wave: np.ndarray) -> np.ndarray:
        """``[d]`` unit-norm embedding of a sound query's :meth:`query_waveform`, encoded as the index's clips were
        (windows of ``window_seconds``: :mod:`mlatr.inference.audio`)."""
        sr, max_seconds = int(self.meta["sample_rate"]), float(self.meta["max_seconds"])
        window = float(self.meta.get("window_seconds") or max_seconds)
        return self.model().embed_audio([wave], sample_rate=sr, batch_size=QUERY_WINDOW_BATCH,
                                        max_seconds=max_seconds, window_seconds=window)[0]

    def search_encoded_audio(self, wave: np.ndarray, vec: np.ndarray, k: int, min_relevance: float | None,
                             allowed: Allowed | None = None) -> Results:
        """:meth:`search_audio` once the sound ``wave [T]`` is encoded as ``vec [d]`` (``k`` and ``min_relevance``
        checked; ``allowed``: the clips its filter allows, :meth:`allowed`): a server encodes under its model lock
        and ranks (and reads the files of hits that may be the query's own sound) outside it."""
        scores, rows = nearest_rows(self.searcher("audio"), self.dim, vec[None], [k], allowed)[0]
        hits = self.mark_same_audio(wave, self._hits(self._sound_ranking(vec, scores, rows), vec))
        return self._sound_results(vec, hits, min_relevance, k, allowed)

    def search_similar(self, row: int, k: int = 10, where: str | Filter | None = None) -> Results:
        """"More like this": the ``k`` clips nearest to indexed clip ``row``'s stored audio embedding (itself
        left out), with their sound-query relevance, the captions nearest to it in ``caption_hits``, and
        ``same_audio`` on a copy of the clip's sound (:meth:`mark_same_audio`); ``where`` as :meth:`search_audio`'s
        (silent clips kept, as for any sound query)."""
        k = check_k(k)
        allowed = self.allowed(parse_filter(where))
        vec = np.asarray(self.text_ranker().clip_vector(row), np.float32)
        scores, rows = nearest_rows(self.searcher("audio"), self.dim, vec[None], [k + 1], allowed)[0]
        keep = np.asarray([self.ids[r] != self.ids[row] for r in rows.tolist()], bool)
        scores, rows = scores[keep][:k], rows[keep][:k]
        hits = self._hits(self._sound_ranking(vec, scores, rows), vec)
        if any(h.score >= SAME_AUDIO_COSINE for h in hits) and not self.stale(row):
            try:
                hits = self.mark_same_audio(self.query_waveform(self.paths[row]), hits)
            except (MlatrError, OSError):  # the clip's file cannot be read: no copy can be told apart
                pass
        return self._sound_results(vec, hits, None, k, allowed)

    def search_vector(self, query: np.ndarray, k: int = 10) -> list[Hit]:
        """Clips nearest to an embedding ``query [d]`` (already in the index's space)."""
        scores, rows = nearest_rows(self.searcher("audio"), self.dim, query[None] if query.ndim == 1 else query,
                                    [check_k(k)])[0]
        return self._hits(Ranking(Ranked(r, s, None, []) for r, s in zip(rows.tolist(), scores.tolist(), strict=True)),
                          query if query.ndim == 1 else query[0])

    def mark_same_audio(self, wave: np.ndarray, hits: list[Hit]) -> list[Hit]:
        """``hits`` with ``same_audio`` set on those whose clip is the sound ``wave [T]`` itself: a hit at cosine
        >= :data:`~mlatr.search.search.SAME_AUDIO_COSINE` whose file, read as a query is (:meth:`query_waveform`),
        is the same audio (:func:`mlatr.data.dedup.same_samples`: what ``mlatr data dedup`` and ``mlatr index
        duplicates`` call the same). The embedding alone cannot tell the query's own clip from a near-copy; the
        samples can, and only the few hits at that cosine are decoded. A clip that cannot be read is not marked."""
        for h in hits:
            if h.score < SAME_AUDIO_COSINE or h.stale:
                continue
            try:
                clip = self.query_waveform(h.path)
            except (MlatrError, OSError):
                continue
            h.same_audio = same_samples(clip, wave, int(self.meta["sample_rate"]))
        return hits

    def _sound_ranking(self, vec: np.ndarray, scores: np.ndarray, rows: np.ndarray) -> Ranking:
        """The clips a sound query found, with the sound-query relevance of the model's calibration (the default
        ranking's where it has none: not shown, :meth:`_hits`)."""
        return sound_ranking(self.text_ranker().stats, vec, scores, rows, (self.calibration() or
                                                                           Calibration.default()).sound)

    def _sound_results(self, vec: np.ndarray, hits: list[Hit], min_relevance: float | None, k: int,
                       allowed: Allowed | None = None) -> Results:
        """A sound query's :class:`Results`: its ``hits``, the sound-query model's threshold unless
        ``min_relevance``, and the ``k`` captions nearest to ``vec`` (of the ``allowed`` clips); uncalibrated
        without the model's calibration."""
        captions = nearest_captions(self.searcher("captions"), self.caption_columns, self.clip_columns, vec, k,
                                    allowed)
        cal = self.calibration()
        if cal is None:
            return Results(hits, caption_hits=captions, uncalibrated=self._parts["calibration"][1])
        threshold = cal.sound.threshold if min_relevance is None else min_relevance
        return Results(hits, threshold, caption_hits=captions)

    def _hits(self, ranking: Ranking, vec: np.ndarray) -> list[Hit]:
        """:class:`Hit` of each ranked clip: its id, path, English captions, evidence, relevance (None where the
        model is not calibrated: :meth:`calibration`), staleness and, for a clip with segments, the segment nearest
        to the query ``vec [d]`` (:mod:`mlatr.search.segments`)."""
        ranked = [one for one in ranking if one.row >= 0]
        calibrated = any(one.relevance is not None for one in ranked) and self.calibration() is not None
        moments = self.moments()
        spans: list[tuple[float, float] | None] = [None] * len(ranked)
        if moments is not None and ranked:
            best = moments.best_segment(np.asarray(vec, np.float32), np.asarray([one.row for one in ranked]))
            spans = [moments.span(int(b)) if b >= 0 else None for b in best.tolist()]
        return [Hit(rank=r + 1, score=float(one.score), id=self.ids[one.row], path=self.paths[one.row],
                    captions=[c for c in self.captions[one.row].get("eng", []) if c],
                    evidence=self._with_origins(one.row, one.evidence),
                    stale=self.stale(one.row), relevance=one.relevance if calibrated else None, segment=span)
                for r, (one, span) in enumerate(zip(ranked, spans, strict=True))]

    def _with_origins(self, row: int, evidence: list[Evidence]) -> list[Evidence]:
        """``evidence`` with each caption or keyword match's ``origin``: where clip ``row`` got that caption
        (its ``caption_sources`` column; a translation shares its English caption's source)."""
        sources = self.clip_columns["caption_sources"][row]
        if not sources:
            return evidence
        return [replace(e, origin=source_of(sources, self.captions[row], e.lang, e.text)) if e.text else e
                for e in evidence]

    # ---- what it is ------------------------------------------------------------------------------------
    def summary(self, check: bool = False) -> dict[str, Any]:
        """What ``mlatr index info`` prints: counts, format, shards with their approximate structure and
        measured recall, the model (its file's path and SHA-256, its weights' SHA-256 where recorded: what a search
        checks its model against) and audio settings; ``check``: clips whose audio is deleted or changed."""
        stored = self.storage.summary(self.tables)
        info: dict[str, Any] = {
            "format": stored["format"], "clips": len(self), "deleted": len(self.deleted_rows),
            "captions": len(self.caption_text), "dim": self.dim, "dtype": self.meta.get("dtype", "float32"),
            "bytes": stored["bytes"],
            "checkpoint": self.meta["checkpoint"]["path"], "checkpoint_sha256": self.meta["checkpoint"].get("sha256"),
            "weights_sha256": self.meta["checkpoint"].get("weights_sha256"), "sample_rate": self.meta["sample_rate"],
            "max_seconds": self.meta["max_seconds"], "caption_languages": self.meta.get("caption_languages", []),
            "shards": stored["shards"]}
        if self.meta.get("segments"):  # long clips cut into segments (mlatr.search.segments): live ones counted
            seg = self.segment_columns
            live = int(np.count_nonzero(~np.isin(seg.clip, self.deleted_rows))) if seg is not None else 0
            info["segments"] = {**self.meta["segments"], "count": live,
                                "clips": len(np.unique(seg.clip[~np.isin(seg.clip, self.deleted_rows)]))
                                if seg is not None else 0}
        if self.fusion_window() is not None and self.meta.get("fusion"):
            info["fusion"] = self.meta["fusion"]
        info["calibration"] = self.calibration_info()
        if info["calibration"]["calibrated"]:
            record = self.abstention()
            info["nothing_relevant"] = {"min_relevance": self.nothing_relevant_level(),
                                        **{k: record[k] for k in ("level", "queries", "seed", "stored")}}
        if check:
            gone = set(self.deleted_rows.tolist())
            stale: dict[str, list[str]] = {"deleted": [], "changed": []}
            for row in range(len(self.ids)):
                why = None if row in gone else self.stale(row)
                if why:
                    stale[why].append(self.ids[row])
            info["stale"] = stale
        return info


def load_index_model(meta: dict[str, Any], where: str, device: str = "cpu") -> LoadedModel:
    """The model an index's ``meta`` records (``checkpoint``: ``{"path", "sha256", "weights_sha256"}``); refuses
    a file whose bytes changed. When that file is gone, the default model (``$MLATR_MODEL``, the nearest
    ``mlatr.toml`` or the model shipped with mlatr: :mod:`mlatr.model_registry`) is used if there is one and
    the index was built with its weights (:func:`~mlatr.inference.model_identity.check_index_model`: an index
    built with the shipped model follows mlatr to another install). A file whose bytes changed but whose
    weights did not (a calibration stored with it since: :func:`~mlatr.inference.checkpoint.store_calibration`)
    is the same model."""
    checkpoint = meta["checkpoint"]
    path = checkpoint["path"]
    if not Path(path).exists():
        gone = (f"the index's model {path} is gone; the index needs its model to encode queries (a moved model: "
                "give --model PATH, set $MLATR_MODEL, or Index.load(..., model=mlatr.load(PATH)))")
        if default_model() is None:
            raise MlatrError(gone)
        default = resolve_model(None)
        loaded = load_model(default.path, device)
        try:
            check_index_model(meta, loaded, where)
        except OtherModelError as exc:
            raise OtherModelError(f"{gone}; the default model {default.path} (from {default.how}) is not it: {exc}") \
                from None
        return loaded
    if model_sha256(path) != checkpoint["sha256"]:
        if not checkpoint.get("weights_sha256"):
            raise MlatrError(f"checkpoint {path} changed since the index was built (sha256 differs): "
                             "rebuild the index with mlatr index build")
        loaded = load_model(path, device)  # a calibration stored since, say: the same weights are the same model
        try:
            check_index_model(meta, loaded, where)
        except MlatrError:
            raise MlatrError(f"checkpoint {path} changed since the index was built (its weights differ): rebuild "
                             "the index with mlatr index build") from None
        return loaded
    return load_model(path, device)
