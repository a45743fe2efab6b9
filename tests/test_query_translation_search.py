"""A query in another language than the captions' is also read through its translation (issue 45, item 6):
each candidate's caption-side features are the better of the query's and the translation's, as the experiment's
``with_translation`` reads them, on every ranking path (exact, windowed, Milvus); the translation's caption and
keyword windows join the candidates; ``translate`` auto / off in Python, CLI and HTTP; the answer says which
translation it read; excluded words and required phrases are
read as typed and through their own translation. A fake translation backend stands in for Apertium (CI has
none); one test runs the real Apertium pair where it is installed."""

import json
import shutil
import subprocess
import urllib.parse

import numpy as np
import pytest

from fusion_reference import brute_features, ranked
from mlatr.api_args import ArgumentError
from mlatr.cli import main
from mlatr.errors import MlatrError
from mlatr.lab.experiments.relevance_fit import with_translation
from mlatr.search import Index
from mlatr.search import query_translation as qt_module
from mlatr.search.columns import CaptionColumns, ClipColumns
from mlatr.search.hybrid import TextRanker
from mlatr.search.query import text_query
from mlatr.search.query_translation import QueryTranslation, QueryTranslator, caption_language
from mlatr.search.relevance import Calibration
from mlatr.translation.backend import TranslationBackend

WORDS = "rain dog bark door creak wind storm engine car horn bird song water drip glass break bell".split()


class FakeBackend(TranslationBackend):
    """A dictionary for ``source -> eng``; any other pair is not installed. Records what it was asked."""

    name = "fake"

    def __init__(self, table: dict[str, str], sources=("spa", "fra")):
        super().__init__("dictionary", 8)
        self.table, self.sources, self.asked = table, set(sources), []

    def check_pair(self, source: str, target: str) -> None:
        if source not in self.sources or target != "eng":
            raise MlatrError(f"fake backend: no {source} -> {target}")

    def translate_batch(self, texts, source, target):
        self.asked += list(texts)
        return [self.table.get(t) for t in texts]


def unit(x):
    x = np.asarray(x, np.float32)
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


def library(n: int = 60, d: int = 16, seed: int = 0):
    """``n`` clips with English captions (one or two, some without), clip 7 captioned "a dog barking"; a Spanish
    query whose vector is unrelated to clip 7 and whose words hold no English caption's, and its translation's
    vector near clip 7's caption."""
    rng = np.random.default_rng(seed)
    audio = unit(rng.standard_normal((n, d)))
    clip, texts, vecs = [], [], []
    for i in range(n):
        count = 1 if i == 7 else int(rng.integers(0, 3))
        for _ in range(count):
            clip.append(i)
            texts.append("a dog barking" if i == 7 else " ".join(rng.choice(WORDS[2:], size=int(rng.integers(1, 4)))))
            vecs.append(audio[i] + 0.5 * rng.standard_normal(d))
    cap = unit(np.asarray(vecs))
    ids = [f"c{i}" for i in range(n)]
    clips = ClipColumns(audio, ids, {"path": [f"/x/{c}.wav" for c in ids], "captions": [{} for _ in ids],
                                     "state": [None] * n})
    captions = CaptionColumns(cap, np.asarray(clip, np.int64), {"lang": ["eng"] * len(clip), "text": texts})
    query = unit(rng.standard_normal(d))
    translation = unit(cap[clip.index(7)] + 0.2 * rng.standard_normal(d))
    return clips, captions, query, translation


def expected(clips, captions, q, text, lang, t_vec, t_text, model):
    """The experiment's reading computed apart: brute-force features of the query and of its translation
    (tests/fusion_reference.py), combined by relevance_fit.with_translation, scored by ``model``."""
    args = (np.asarray(clips.embeddings), np.asarray(captions.embeddings), captions.clip, captions.get("text"),
            captions.get("lang"), [])
    rows, x = brute_features(*args, q, text, lang)
    _, xt = brute_features(*args, t_vec, t_text, "eng")
    both = with_translation(x[None], xt[None], np.array([True]))[0]
    return ranked(rows, model.score(both)), dict(zip(rows, both, strict=True))


def rank_one(ranker, q, text, k, rank, translation):
    return ranker.rank_many(q[None], [text], ["spa"], [k], [rank], None, [translation])[0]


def test_features_equal_the_experiments_reading_on_the_exact_windowed_and_milvus_paths(tmp_path, vectors_meta):
    clips, captions, q, t_vec = library()
    text, t_text = "perro ladrando", "dog barking"
    ranker = TextRanker(clips.embeddings, captions.embeddings, captions.clip, captions.get("text"),
                        captions.get("lang"))
    model = ranker.model
    want, feats = expected(clips, captions, q, text, "spa", t_vec, t_text, model)
    n = len(clips.ids)
    translation = QueryTranslation(t_text, "eng", t_vec)
    # untranslated, the Spanish words hold no caption and clip 7 is nowhere near the top
    plain = ranker.rank(q, text, "spa", n)
    assert all(e.source != "keyword" for h in plain for e in h.evidence)
    assert [h.row for h in plain].index(7) > 3
    rankers = {"exact": ranker, "windowed": Index(clips, captions, vectors_meta).text_ranker(window=n)}
    pytest.importorskip("pymilvus")
    pytest.importorskip("milvus_lite")
    from mlatr.search import milvus as mv

    target = f"milvus:{tmp_path / 'tr.db'}"
    mv.write_milvus(target, clips, captions, {"checkpoint": {"path": "none", "sha256": ""}}, [], replace=True)
    rankers["milvus"] = mv.read_milvus(target).ranker
    rankers["milvus"].window = n
    for name, r in rankers.items():
        ids = list(r.ids) if name == "milvus" else list(clips.ids)  # Milvus's rows: its tables' order
        row_of = {c: i for i, c in enumerate(ids)}
        hits = rank_one(r, q, text, n, "hybrid", translation)
        assert [(ids[h.row], round(h.score, 4)) for h in hits] == [(f"c{row}", round(s, 4)) for row, s in want], name
        first = hits[0]
        assert ids[first.row] == "c7", name  # found through its translation
        kw = [e for e in first.evidence if e.source == "keyword"]
        assert kw and kw[0].translation and set(kw[0].terms) == {"dog", "barking"}, name
        cap = [e for e in first.evidence if e.source == "caption"]
        assert cap and cap[0].translation and cap[0].text == "a dog barking", name
        assert first.relevance == pytest.approx(float(model.relevance(model.score(feats[7][None]))[0]), abs=1e-5)
        # the captions ranking orders by the better caption cosine of the two texts
        caps = rank_one(r, q, text, 5, "captions", translation)
        best = {}
        for j, c in enumerate(captions.clip.tolist()):
            best[c] = max(best.get(c, -9), float(captions.embeddings[j] @ q), float(captions.embeddings[j] @ t_vec))
        assert [ids[h.row] for h in caps] == [f"c{c}" for c in sorted(best, key=lambda c: (-best[c], c))[:5]], name
        # a sound ranking's hits described read the translation too
        local = [7, 3, 11]
        rows = np.asarray([row_of[f"c{i}"] for i in local])
        described = r.describe(q, text, "spa", rows, np.asarray(clips.embeddings)[local] @ q, translation=translation)
        assert [ids[h.row] for h in described] == [f"c{i}" for i in local]
        assert [h.relevance for h in described] == pytest.approx(
            [float(model.relevance(model.score(feats[i][None]))[0]) for i in local], abs=1e-5)


def test_the_translations_windows_join_the_candidates(vectors_meta, tmp_path):
    """Windows of 5 that miss clip 7 by the query alone: the translation's caption and keyword windows bring it
    among the candidates (a k as large as the library returns every candidate)."""
    clips, captions, q, t_vec = library(n=400, seed=1)
    r = Index(clips, captions, vectors_meta).text_ranker(window=5)
    assert 7 not in [h.row for h in r.rank(q, "perro ladrando", "spa", 400)]
    hits = r.rank(q, "perro ladrando", "spa", 400, translation=QueryTranslation("dog barking", "eng", t_vec))
    assert len(hits) <= 20  # the union of the windows, not the library
    dog = [h for h in hits if h.row == 7]
    assert dog and any(e.source == "keyword" and e.translation for e in dog[0].evidence)
    # Milvus's windows (of 5: k 5) likewise
    pytest.importorskip("pymilvus")
    pytest.importorskip("milvus_lite")
    from mlatr.search import milvus as mv

    target = f"milvus:{tmp_path / 'windows.db'}"
    mv.write_milvus(target, clips, captions, {"checkpoint": {"path": "none", "sha256": ""}}, [], replace=True)
    remote = mv.read_milvus(target).ranker
    remote.window = 5
    seven = list(remote.ids).index("c7")
    alone, = remote.candidates(q[None], ["perro ladrando"], ["spa"], [5])
    both, = remote.candidates(q[None], ["perro ladrando"], ["spa"], [5],
                              translations=[QueryTranslation("dog barking", "eng", t_vec)])
    assert seven not in alone.cands.rows.tolist() and seven in both.cands.rows.tolist()
    assert np.array_equal(both.translation.cands.rows, both.cands.rows)


def test_caption_language_and_the_translate_setting():
    assert caption_language(None) == caption_language([]) == caption_language(["fra", "eng"]) == "eng"
    assert caption_language(["fra", "deu"]) == "fra"
    from mlatr.models.protocols import ANY_LANGUAGE

    assert text_query("x", "spa", 3, "hybrid", ANY_LANGUAGE).translate is True
    assert text_query("x", "spa", 3, "hybrid", ANY_LANGUAGE, translate="off").translate is False
    assert text_query("x", "spa", 3, "hybrid", ANY_LANGUAGE, translate=False).translate is False
    with pytest.raises(ArgumentError, match="translate: expected one of auto, off"):
        text_query("x", "spa", 3, "hybrid", ANY_LANGUAGE, translate="always")


@pytest.fixture
def english_index(served_toy, tmp_path_factory):
    """The toy model's library indexed with its English captions only ("a single high tone")."""
    from mlatr.data.manifest import Manifest
    from mlatr.inference import load_model

    manifest, ckpt, _ = served_toy
    out = tmp_path_factory.mktemp("english") / "eng.idx"
    Index.build(load_model(ckpt), Manifest.load(manifest), caption_languages=["eng"], progress=False).save(out)
    return out


TABLE = {"un son aigu simple": "a single high tone", "un son aigu": "a high tone"}


def fake_installed(cache_path=None):
    """What ``installed_translator`` gives with the fake backend in Apertium's place (no disk cache)."""
    return QueryTranslator(FakeBackend(TABLE))


def test_a_french_query_is_read_through_its_translation_auto_and_off(english_index, monkeypatch, capsys):
    backend = FakeBackend(TABLE)
    index = Index.load(english_index)
    index.use_translator(QueryTranslator(backend))
    auto = index.search_text("un son aigu simple", "fra", 5)
    assert auto.translated_query == "a single high tone"
    kw = [e for h in auto for e in h.evidence if e.source == "keyword"]
    assert kw and all(e.translation and set(e.terms) <= {"single", "high", "tone"} for e in kw)
    assert all(h.captions and "single high" in h.captions[0] for h in auto[:2])
    off = index.search_text("un son aigu simple", "fra", 5, translate="off")
    assert off.translated_query is None
    assert not [e for h in off for e in h.evidence if e.source == "keyword"]  # no French word is in a caption
    assert backend.asked == ["un son aigu simple"]  # cached: asked once
    index.search_text("un son aigu simple", "fra", 5)
    assert backend.asked == ["un son aigu simple"]
    # a language without a pair, and the captions' own language: not translated, said as null
    assert index.search_text("ein hoher Ton", "deu", 3).translated_query is None
    assert index.search_text("a single high tone", "eng", 3).translated_query is None
    assert backend.asked == ["un son aigu simple"]
    assert auto.to_dict()["translated_query"] == "a single high tone" and off.to_dict()["translated_query"] is None
    # the CLI (the installed translator replaced by the fake one)
    monkeypatch.setattr("mlatr.search.index.installed_translator", fake_installed)
    assert main(["search", str(english_index), "un son aigu simple", "--lang", "fra", "-k", "3", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["translated_query"] == "a single high tone"
    assert [r["id"] for r in out["results"]] == [h.id for h in auto[:3]]
    assert any(e.get("translation") for r in out["results"] for e in r["evidence"])
    assert main(["search", str(english_index), "un son aigu simple", "--lang", "fra", "-k", "3"]) == 0
    table = capsys.readouterr().out
    assert table.splitlines()[0] == "translated query (fra -> eng): a single high tone"
    assert "by the translation" in table
    assert main(["search", str(english_index), "un son aigu simple", "--lang", "fra", "-k", "3", "--translate",
                 "off", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["translated_query"] is None and [r["id"] for r in out["results"]] == [h.id for h in off[:3]]


def test_excluded_words_and_required_phrases_are_read_through_their_translation_too(english_index):
    backend = FakeBackend({**TABLE, "simple": "single", "aigu": "high"})
    index = Index.load(english_index)
    index.use_translator(QueryTranslator(backend))
    n = len(index)
    every = index.search_text("un son aigu", "fra", n)
    single = {h.id for h in every if "single" in " ".join(h.captions)}
    assert len(every) == n and 0 < len(single) < n
    backend.asked.clear()
    found = index.search_text("un son aigu -simple", "fra", n)
    assert backend.asked == ["simple"]  # the positive part was cached; the excluded word asked in the same call
    assert found.translated_query == "a high tone"
    # "simple" is held by no English caption as typed; its translation "single" is: those clips are left out
    assert {h.id for h in found} == {h.id for h in every} - single
    # a word typed in the captions' language is left out as before; translate off reads the word as typed only
    assert {h.id for h in index.search_text("un son aigu -single", "fra", n)} == {h.id for h in every} - single
    assert len(index.search_text("un son aigu -simple", "fra", n, translate="off")) == n
    # a required phrase is held as typed or through its translation ("aigu" -> "high")
    high = {h.id for h in every if "high" in " ".join(h.captions).split()}
    assert 0 < len(high) < n
    assert {h.id for h in index.search_text('un son "aigu"', "fra", n)} == high
    assert not index.search_text('un son "aigu"', "fra", n, translate="off")  # no English caption holds "aigu"
    # the syntax's words are translated where the query is, never where it is not (its own language)
    backend.asked.clear()
    index.search_text("a high tone -simple", "eng", 3)
    assert backend.asked == []


def test_the_server_reads_the_translation_and_says_it(english_index, monkeypatch):
    pytest.importorskip("fastapi")
    from mlatr.serve.app import create_app
    from mlatr.serve.live_index import LiveIndex
    from servetools import request, running_server

    monkeypatch.setattr("mlatr.search.index.installed_translator", fake_installed)
    expected_ids = [h.id for h in Index.load(english_index).search_text("un son aigu simple", "fra", 4)]
    live = LiveIndex(english_index)
    live.reload()
    with running_server(create_app(live)) as base:
        q = {"q": "un son aigu simple", "lang": "fra", "k": 4}
        body = request(base + "/search?" + urllib.parse.urlencode(q)).json()
        assert body["translated_query"] == "a single high tone"
        assert [r["id"] for r in body["results"]] == expected_ids
        assert any(e["translation"] for r in body["results"] for e in r["evidence"])
        off = request(base + "/search?" + urllib.parse.urlencode({**q, "translate": "off"})).json()
        assert off["translated_query"] is None and not any(e["translation"] for r in off["results"]
                                                           for e in r["evidence"])
        bad = request(base + "/search?" + urllib.parse.urlencode({**q, "translate": "yes"}))
        assert bad.status == 422 and "translate" in bad.json()["error"]
        health = request(base + "/health").json()  # the fake has fra and spa -> eng; English is the captions'
        offered = {lang["code"] for lang in health["languages"]}
        assert health["caption_language"] == "eng"
        assert health["translates"] == [c for c in [lang["code"] for lang in health["languages"]]
                                        if c in {"fra", "spa"}] and "fra" in offered


def test_an_index_keeps_its_queries_translations_on_disk(english_index, monkeypatch, tmp_path):
    """A query asked again in a new process (a fresh Index) is not translated again: the index folder's cache
    holds it; a cache file that cannot be written leaves the translations in memory."""
    backends = []

    def installed(cache_path=None):
        backends.append(FakeBackend(TABLE))
        return QueryTranslator(backends[-1], cache_path)

    monkeypatch.setattr("mlatr.search.index.installed_translator", installed)
    first = Index.load(english_index).search_text("un son aigu", "fra", 3)
    assert backends[0].asked == ["un son aigu"] and first.translated_query == "a high tone"
    cache = english_index / ".query-translations.jsonl"
    assert Index.load(english_index).translation_cache() == cache and cache.is_file()
    again = Index.load(english_index).search_text("un son aigu", "fra", 3)
    assert backends[1].asked == [] and again.translated_query == "a high tone"
    assert [h.id for h in again] == [h.id for h in first]
    (tmp_path / "a-file").write_text("x")
    blocked = QueryTranslator(FakeBackend(TABLE), tmp_path / "a-file" / "cache.jsonl")  # its folder is a file
    assert blocked.translate(["un son aigu"], "fra", "eng") == ["a high tone"]
    assert blocked.translator.cache.path is None


def test_without_apertium_queries_rank_as_before(monkeypatch):
    monkeypatch.setattr(shutil, "which", lambda _name: None)
    assert qt_module.installed_translator() is None


def _apertium_pair(source: str, target: str) -> bool:
    if shutil.which("apertium") is None:
        return False
    listed = subprocess.run(["apertium", "-l"], capture_output=True, text=True, check=False).stdout.split()
    return f"{source}-{target}" in listed


@pytest.mark.skipif(not _apertium_pair("spa", "eng"), reason="Apertium with the spa-eng pair is not installed "
                                                               "(Debian: apt-get install apertium-eng-spa)")
def test_real_apertium_translates_a_spanish_query_that_then_finds_the_clip():
    translator = qt_module.installed_translator()
    assert translator is not None and translator.available("spa", "eng")
    english, = translator.translate(["un perro ladrando"], "spa", "eng")
    assert english and "dog" in english.lower().split()
    clips, captions, q, t_vec = library()
    ranker = TextRanker(clips.embeddings, captions.embeddings, captions.clip, captions.get("text"),
                        captions.get("lang"), model=Calibration.default().text)
    hits = ranker.rank(q, "un perro ladrando", "spa", 5, translation=QueryTranslation(english, "eng", t_vec))
    assert hits[0].row == 7
    assert any(e.source == "keyword" and e.translation and "dog" in e.terms for e in hits[0].evidence)


def test_the_page_says_a_query_was_read_through_its_translation(english_index, monkeypatch, tmp_path):
    """In the real browser: the language note says which languages are read through a translation (where the
    picked language does change the results), a French query shows its translation above the results and the
    evidence it matched says "by the translation"."""
    pytest.importorskip("fastapi")
    pytest.importorskip("selenium")
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support.ui import Select, WebDriverWait

    from browsertools import CHROMEDRIVER, CHROMIUM, MISSING, start_chromium
    from mlatr.serve.app import create_app
    from mlatr.serve.live_index import LiveIndex
    from servetools import running_server

    if not (CHROMIUM and CHROMEDRIVER):
        pytest.skip(MISSING)
    monkeypatch.setattr("mlatr.search.index.installed_translator", fake_installed)
    live = LiveIndex(english_index)
    live.reload()
    driver = start_chromium(tmp_path / "profile")
    try:
        with running_server(create_app(live)) as base:
            driver.get(base + "/")
            WebDriverWait(driver, 30).until(lambda d: d.find_element(By.TAG_NAME, "body").get_attribute("data-ready")
                                            == "1")
            note = driver.find_element(By.ID, "lang-note").text
            assert "but for French, Spanish, read also through a translation into English" in note
            Select(driver.find_element(By.ID, "lang")).select_by_value("fra")
            box = driver.find_element(By.ID, "q")
            box.send_keys("un son aigu simple", Keys.ENTER)
            WebDriverWait(driver, 30).until(lambda d: d.find_elements(By.CSS_SELECTOR, "#results .result"))
            assert driver.find_element(By.ID, "translated-query").text == \
                "Also read as its translation: “a single high tone”"
            chips = [c.text for c in driver.find_elements(By.CSS_SELECTOR, "#results .chip")]
            assert any("by the translation" in c for c in chips), chips
            Select(driver.find_element(By.ID, "lang")).select_by_value("eng")
            box.clear()
            box.send_keys("a single high tone", Keys.ENTER)
            WebDriverWait(driver, 30).until(lambda d: not d.find_elements(By.ID, "translated-query"))
            assert not any("by the translation" in c.text for c in driver.find_elements(By.CSS_SELECTOR, ".chip"))
    finally:
        driver.quit()
