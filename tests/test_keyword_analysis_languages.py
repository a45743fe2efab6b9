"""Keyword analysis in the eight default languages with real sound words (issue 45): inflected forms share a term
(Snowball stems for the six European languages, Catalan's included; the Japanese dictionary form; Chinese
words and their characters), grammar words are never terms, sound words on the Chinese stop list are, single
kana never are, and a Japanese or Chinese query finds its clip through the keyword ranking of an index,
including one stored with the previous analysis."""

import json
from importlib.metadata import version

import bm25s.stopwords as bm25s_stopwords
import numpy as np
import pytest

from mlatr.evaluation.nonsense import nonsense_queries
from mlatr.languages import DEFAULT_LANGUAGES
from mlatr.search import Index
from mlatr.search.analysis import ANALYSIS, SOUND_WORDS, stop_words, surface_words, terms, tokens
from mlatr.search.columns import CaptionColumns, ClipColumns
from mlatr.search.hybrid import TextRanker
from mlatr.search.lexical import FILES, KeywordIndex, Postings

#: language -> (forms of one sound, their exact terms): the inflected forms in each share the sound's term.
INFLECTED = {
    "eng": (["the dog barks", "dogs barking", "a dog barked"], [["dog", "bark"]] * 3),
    "fra": (["le chien aboie", "un chien aboyant", "aboyer"], [["chien", "aboi"], ["chien", "aboi"], ["aboi"]]),
    # Snowball's German stems ``bellen`` / ``Bellen`` / ``bellend`` alike, not the third person ``bellt``
    "deu": (["die Hunde bellen", "das Bellen eines Hundes", "bellende Hunde"],
            [["hund", "bell"], ["bell", "hund"], ["bellend", "hund"]]),
    "spa": (["el perro ladra", "un perro ladrando", "ladrar"], [["perr", "ladr"], ["perr", "ladr"], ["ladr"]]),
    "nld": (["de hond blaft", "honden blaffen", "blaffen"], [["hond", "blaf"], ["hond", "blaf"], ["blaf"]]),
    "cat": (["el gos borda", "un gos bordant", "bordar"], [["gos", "bord"], ["gos", "bord"], ["bord"]]),
    "jpn": (["犬が吠える", "犬が吠えた", "犬が吠えている", "吠えていた犬"],
            [["犬", "吠える"], ["犬", "吠える"], ["犬", "吠える"], ["吠える", "犬"]]),
    "zho": (["狗叫", "狗在叫", "一只狗在叫着"], [["狗叫", "狗", "叫"], ["狗", "叫"], ["狗", "叫"]]),
}

#: language -> (a caption with grammar words, its exact terms): articles, particles, prepositions, auxiliaries out.
GRAMMAR = {
    "eng": ("the dog is barking at the door", ["dog", "bark", "door"]),
    "fra": ("le chien aboie à la porte", ["chien", "aboi", "port"]),
    "deu": ("der Hund bellen an der Tür", ["hund", "bell", "tur"]),
    "spa": ("el perro ladra a la puerta", ["perr", "ladr", "puert"]),
    "nld": ("de hond blaft naar de deur", ["hond", "blaf", "deur"]),
    "cat": ("el gos borda a la porta", ["gos", "bord", "port"]),
    "jpn": ("犬がドアの前で吠えている", ["犬", "ドア", "前", "吠える"]),
    "zho": ("一只狗在门口叫着", ["狗", "门口", "门", "口", "叫"]),
}


def test_the_table_covers_the_eight_default_languages():
    assert set(INFLECTED) == set(GRAMMAR) == set(DEFAULT_LANGUAGES)


@pytest.mark.parametrize("lang", sorted(INFLECTED))
def test_inflected_forms_of_a_sound_word_share_its_term(lang):
    texts, expected = INFLECTED[lang]
    got = [terms(t, lang) for t in texts]
    assert got == expected
    assert set.intersection(*map(set, got)), got  # the sound's term, in every form


@pytest.mark.parametrize("lang", sorted(GRAMMAR))
def test_grammar_words_are_never_terms(lang):
    text, expected = GRAMMAR[lang]
    assert terms(text, lang) == expected


@pytest.mark.parametrize("query, lang", [("the", "eng"), ("une", "fra"), ("der", "deu"), ("de", "spa"), ("de", "nld"),
                                         ("la", "cat"), ("の", "jpn"), ("それは私のです", "jpn"), ("的", "zho"),
                                         ("我们的", "zho"), ("这是一个", "zho"), ("了", None), ("です", None)])
def test_a_text_of_grammar_words_has_no_term(query, lang):
    assert terms(query, lang) == []


def test_japanese_particles_and_auxiliaries_go_by_part_of_speech():
    """Particles and auxiliary verbs that no stop-word list holds (だけ, けど, ばかり, しか, ました) are
    never terms: the analyser's part of speech drops them."""
    assert not {"だけ", "けど", "ばかり", "しか", "ました", "まし"} & stop_words("jpn")
    assert terms("犬だけが吠えたけど", "jpn") == ["犬", "吠える"]
    assert terms("猫ばかり鳴いていました", "jpn") == ["猫", "鳴く"]
    assert terms("雨しか聞こえない", "jpn") == ["雨", "聞こえる"]


def test_sound_words_on_the_chinese_stop_list_are_terms():
    """Every kept sound word is on a maintained list (so the keep-list only takes out), is a term in Chinese
    and for a query of unknown language, and the grammar words around it still go."""
    listed = set(bm25s_stopwords.STOPWORDS_CHINESE)
    assert SOUND_WORDS <= listed and not SOUND_WORDS & stop_words("zho") and not SOUND_WORDS & stop_words(None)
    for word in sorted(SOUND_WORDS):
        assert word in terms(word, "zho") and word in terms(word, None), word
    for lang in ("zho", "jpn", None):
        assert terms("咳", lang) == ["咳"]  # the query 咳 (cough) has a term
    assert terms("门吱的一声开了", "zho") == ["门", "吱", "开"]
    assert terms("咚咚的敲门声", "zho") == ["咚咚", "咚", "敲门声", "敲", "门", "声"]
    assert terms("他在打鼾", "zho") == ["打鼾", "打", "鼾"]
    assert {"的", "了", "在", "是"} <= stop_words("zho")


def test_no_single_kana_is_a_term_and_door_shares_nothing_with_alarm():
    kana = {chr(c) for c in range(0x3041, 0x30ff)}
    captions = ["ドアが閉まる音", "アラームが鳴っている", "お湯が沸騰する", "ワンワンと吠える", "ピーピーという電子音",
                "パチパチと燃える火", "ゴロゴロと雷が鳴る", "キーボードを打つ音", "ア", "ド ア ラ ム", "を"]
    captions += [q["text"] for q in nonsense_queries(["jpn"], {"kana": 40})]
    for text in captions:
        for lang in ("jpn", None):
            assert not kana & set(terms(text, lang)), (text, terms(text, lang))
    assert terms("ドア", "jpn") == ["ドア"] and terms("アラーム", "jpn") == ["アラーム"]
    assert not set(terms("ドアの音", "jpn")) & set(terms("アラームの音", "jpn")) - {"音"}
    assert terms("ワンワンと吠える", "jpn") == ["わんわん", "吠える"]  # onomatopoeia whole, in its normalised form


def test_han_compounds_match_their_characters():
    """A word of several Han characters also gives its characters: rain matches rain-sound in Chinese and
    Japanese, a cough matches coughing."""
    assert {"雨"} <= set(terms("哗哗的雨声", "zho")) & set(terms("下雨", "zho"))
    assert {"雨"} <= set(terms("雨音", "jpn")) & set(terms("雨が降っている", "jpn"))
    assert "咳" in terms("男人在咳嗽", "zho")
    assert terms("時々", "jpn") == ["時々", "時"]  # not the iteration mark alone


def test_korean_and_other_scripts_keep_the_character_fallback():
    # Hangul syllables and their bigrams, the particle 가 (on bm25s's Korean list) out
    assert terms("개가 짖는다", "kor") == [t for t in tokens("개가 짖는다") if t != "가"] == \
        ["개", "개가", "짖", "는", "다", "짖는", "는다"]
    assert "개" in terms("개", "kor")
    assert terms("собака лает", "rus") == ["собак", "лает"]
    assert terms("ＤＯＧＳ barking", "eng") == ["dog", "bark"]  # full-width letters read as the plain ones


def test_surface_words_are_the_words_a_user_reads():
    assert surface_words("un chien aboie", "fra", ["aboi"]) == ["aboie"]
    assert surface_words("犬が吠えている", "jpn", terms("吠えた", "jpn")) == ["吠え"]
    assert surface_words("一只狗在叫", "zho", terms("狗叫", "zho")) == ["狗", "叫"]
    assert surface_words("男人在咳嗽", "zho", ["咳"]) == ["咳嗽"]
    assert surface_words("ドアの音", "jpn", terms("アラーム", "jpn")) == []


def _unit(x):
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


CAPTIONS = ["犬が吠えている", "ドアが閉まる音", "アラームが鳴っている", "雨が降っている",
            "狗叫", "男人在咳嗽", "门吱吱作响", "汽车喇叭"]
LANGS = ["jpn"] * 4 + ["zho"] * 4


@pytest.mark.parametrize("query, lang, row, shown", [
    ("吠えた犬", "jpn", 0, ("吠え", "犬")),
    ("ドア", "jpn", 1, ("ドア",)),
    ("鳴っているアラーム", "jpn", 2, ("鳴っ", "アラーム")),
    ("狗在叫", "zho", 4, ("狗", "叫")),
    ("咳", "zho", 5, ("咳",)),
    ("咳", None, 5, ("咳",)),
    ("吱", "zho", 6, ("吱",)),
])
def test_a_cjk_query_finds_its_clip_by_keyword_and_no_other(query, lang, row, shown):
    """Through the keyword index and the hybrid ranking's evidence: the query's clip scores, the others
    (``ドア`` against the alarm, ``狗在叫`` against a creaking door) do not."""
    keywords = KeywordIndex(CAPTIONS, LANGS)
    scores = keywords.scores(query, lang)
    assert scores[row] > 0 and np.count_nonzero(scores) == 1, scores
    rng = np.random.default_rng(0)
    n, d = len(CAPTIONS), 16
    ranker = TextRanker(_unit(rng.standard_normal((n, d))), _unit(rng.standard_normal((n, d))), np.arange(n),
                        CAPTIONS, LANGS)
    hits = ranker.rank(_unit(rng.standard_normal(d)), query, lang, n, "hybrid")
    by_keyword = [(r.row, e.terms) for r in hits for e in r.evidence if e.source == "keyword"]
    assert by_keyword == [(row, shown)]


def test_an_index_stored_with_the_previous_analysis_is_analysed_again(tmp_path, vectors_meta):
    """A shard whose keyword postings were made by the character-bigram analysis (issue 33) loads, its
    captions analysed again: the scores equal a fresh index's, and ``ドア`` no longer matches the alarm."""
    rng = np.random.default_rng(1)
    n, d = len(CAPTIONS), 8
    ids = [f"c{i}" for i in range(n)]
    clips = ClipColumns(_unit(rng.standard_normal((n, d))).astype(np.float32), ids,
                        {"path": [f"/x/{c}.wav" for c in ids], "captions": [{} for _ in ids]})
    caps = CaptionColumns(_unit(rng.standard_normal((n, d))).astype(np.float32), np.arange(n),
                          {"lang": LANGS, "text": CAPTIONS})
    out = tmp_path / "lib.idx"
    Index(clips, caps, {**vectors_meta, "caption_languages": ["jpn", "zho"]}).save(out)
    old = "mlatr-analysis-1 bm25s-0.3.16 PyStemmer-3.1.0 stopwordsiso-0.7.1"
    # the analysis names each analyser and dictionary version: a new dictionary's index is analysed again
    assert old != ANALYSIS and all(f"{name}-{version(name)}" in ANALYSIS for name in
                                   ("bm25s", "PyStemmer", "stopwordsiso", "SudachiPy", "sudachidict-small", "rjieba"))
    for shard in Index.load(out).storage.shards:
        texts = list(shard.captions.get("text"))
        Postings.of_terms([tokens(t) for t in texts], analysis=old).save(shard.folder)
        assert json.loads((shard.folder / FILES[0]).read_text(encoding="utf-8"))["analysis"] == old
    stale = Postings.of_terms([tokens(t) for t in CAPTIONS], analysis=old)
    assert np.count_nonzero(KeywordIndex.of_parts([stale], [None]).scores_of(["ア"])) >= 2  # what it was

    ranker = Index.load(out).text_ranker()
    fresh = KeywordIndex(CAPTIONS, LANGS)
    for query, lang in (("ドア", "jpn"), ("吠えた犬", "jpn"), ("狗在叫", "zho"), ("咳", None)):
        t = fresh.terms(query, lang)
        np.testing.assert_allclose(ranker.keywords.scores_of(t), fresh.scores_of(t), rtol=1e-6)
    assert np.flatnonzero(ranker.keywords.scores("ドア", "jpn")).tolist() == [1]
