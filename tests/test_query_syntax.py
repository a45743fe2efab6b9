"""Query syntax in every language (issue 46, item 3): ``-word`` / ``NOT word`` remove the clips whose captions or
keywords hold the word (inflections and Japanese and Chinese words through the keyword analysis), ``"a phrase"``
requires its words adjacent, ``OR`` scores a caption by its better alternative; a plain query ranks as before. Each
checked on the results: the excluded clip gone (ranked first without the exclusion), the phrase-matching clip first
(a non-matching one nearer in meaning left out)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from mlatr.search import Index
from mlatr.search.columns import CaptionColumns, ClipColumns
from mlatr.search.lexical import KeywordIndex
from mlatr.search.query import TextQuery
from mlatr.search.query_syntax import (
    QuerySyntaxError,
    clause_mass,
    clause_scores,
    keyword_query,
    parse_query,
)

D = 32

#: The examples docs/hybrid-search.md shows, one or more per language: query -> (embedded, excluded, required).
EXAMPLES = {
    "bird -rooster": ("bird", ("rooster",), ()),
    '"door slam" -metal': ("door slam", ("metal",), (("door slam",),)),
    "glass OR ceramic break": ("glass ceramic break", (), ()),
    "oiseau -coq": ("oiseau", ("coq",), ()),
    "« porte qui claque » NOT métal": ("porte qui claque", ("métal",), (("porte qui claque",),)),
    "Vogel -Hahn": ("Vogel", ("Hahn",), ()),
    "„Tür knallt“ Holz OR Metall": ("Tür knallt Holz Metall", (), (("Tür knallt",),)),
    "pájaro -gallo": ("pájaro", ("gallo",), ()),
    '"puerta que se cierra" -metal': ("puerta que se cierra", ("metal",), (("puerta que se cierra",),)),
    "vogel -haan": ("vogel", ("haan",), ()),
    '"deur slaat dicht" glas OR hout': ("deur slaat dicht glas hout", (), (("deur slaat dicht",),)),
    "ocell -gall": ("ocell", ("gall",), ()),
    '"porta que es tanca" -metall': ("porta que es tanca", ("metall",), (("porta que es tanca",),)),
    "鳥 -鶏": ("鳥", ("鶏",), ()),
    "「犬が吠える」 -猫": ("犬が吠える", ("猫",), (("犬が吠える",),)),
    "鸟 -公鸡": ("鸟", ("公鸡",), ()),
    "“狗叫” 玻璃 OR 陶瓷": ("狗叫 玻璃 陶瓷", (), (("狗叫",),)),
    '"door slam" OR "door bang"': ("door slam door bang", (), (("door slam", "door bang"),)),
}


@pytest.mark.parametrize("text", list(EXAMPLES))
def test_the_documented_examples_parse_as_documented(text):
    parsed = parse_query(text)
    assert (parsed.embedded, parsed.excluded, parsed.required) == EXAMPLES[text]
    assert not parsed.plain


@pytest.mark.parametrize("text", ["dog barking", "a dog or a cat", "not loud", "walkie-talkie", "x - y", "12\" vinyl",
                                  "un chien qui aboie", "犬が吠える"])
def test_a_query_without_marks_is_plain_and_embedded_as_typed(text):
    parsed = parse_query(text)
    assert parsed.plain and parsed.embedded == text


@pytest.mark.parametrize("text, position, words", [
    ("NOT", 1, "NOT needs a word"), ("dog NOT", 5, "NOT needs a word"), ("-rooster", 1, "only excludes"),
    ("NOT rooster -hen", 1, "only excludes"), ("OR dog", 1, "OR needs a word"), ("dog OR", 5, "OR needs a word"),
    ("dog OR OR cat", 5, "OR needs a word"), ("dog -cat OR bird", 10, "OR needs a word"), ('dog ""', 5, "empty phrase"),
    ("dog NOT OR cat", 5, "NOT needs a word"),
])
def test_a_malformed_query_is_an_error_naming_the_position(text, position, words):
    with pytest.raises(QuerySyntaxError) as exc:
        parse_query(text)
    assert str(exc.value).startswith(f"query: position {position}: ") and words in str(exc.value)


def test_or_scores_a_caption_by_its_better_alternative():
    """BM25 of "bird glass OR ceramic": bird's score plus the better of glass's and ceramic's (each by the Lucene
    formula, computed here), and the idf mass likewise; without OR the scores add up."""
    texts = ["glass breaking", "ceramic plate breaking", "glass and ceramic", "bird song", "bird hits glass", "rain"]
    index = KeywordIndex(texts, ["eng"] * len(texts))
    docs = [index._analyse(t, "eng") for t in texts]
    n, avgdl = len(docs), np.mean([max(len(d), 1) for d in docs])

    def bm25(doc, term):
        df = sum(term in d for d in docs)
        tf = doc.count(term)
        return math.log(1 + (n - df + 0.5) / (df + 0.5)) * tf / (tf + 1.5 * (1 - 0.75 + 0.75 * len(doc) / avgdl)) \
            if df else 0.0

    def idf(term):
        df = sum(term in d for d in docs)
        return math.log(1 + (n - df + 0.5) / (df + 0.5))

    kq = keyword_query(parse_query("bird glass OR ceramic"), "eng", index.terms)
    assert kq.terms == ["bird", "glass", "ceram"] and kq.clauses == ((("bird",),), (("glass",), ("ceram",)))
    rows, scores = clause_scores(kq, lambda t: index.sparse_scores([t]))
    dense = np.zeros(n)
    dense[rows] = scores
    expected = [bm25(d, "bird") + max(bm25(d, "glass"), bm25(d, "ceram")) for d in docs]
    assert np.allclose(dense, expected, rtol=1e-5)
    assert dense[1] == pytest.approx(bm25(docs[1], "ceram"))  # ceramic alone scores as its alternative in full
    assert clause_mass(kq, index.idf_mass) == pytest.approx(idf("bird") + max(idf("glass"), idf("ceram")))
    plain = keyword_query(parse_query("bird glass ceramic"), "eng", index.terms)
    assert plain.clauses is None and plain.terms == kq.terms  # plain: the sum over the terms, as before


# ---- the results, in four languages -------------------------------------------------------------------------
def _unit(x):
    return (x / np.linalg.norm(x, axis=-1, keepdims=True)).astype(np.float32)


def library(rows: list[tuple[str, str, list[str] | None]], vectors_meta, seed: int = 0) -> Index:
    """An index in memory of one clip per ``(caption, lang, keywords)``, its caption near its sound, and ten clips
    of unrelated captions."""
    rows = rows + [(t, "eng", None) for t in ("rain on a roof", "engine idling", "crowd cheering", "wind in trees",
                                              "typing on a keyboard", "a car horn", "water dripping", "thunder",
                                              "footsteps on gravel", "a phone ringing")]
    rng = np.random.default_rng(seed)
    audio = _unit(rng.standard_normal((len(rows), D)))
    captions = _unit(audio + 0.3 * rng.standard_normal((len(rows), D)) / np.sqrt(D))
    ids = [f"c{i}" for i in range(len(rows))]
    clips = ClipColumns(audio, ids, {"path": [f"/lib/{c}.wav" for c in ids],
                                     "captions": [{lang: [text]} for text, lang, _ in rows],
                                     "facets": [{"keywords": kw} if kw else None for _t, _l, kw in rows]})
    caps = CaptionColumns(captions, np.arange(len(rows)), {"lang": [lang for _, lang, _ in rows],
                                                           "text": [text for text, _, _ in rows]})
    return Index(clips, caps, vectors_meta)


def ranked(index: Index, text: str, lang: str, near: int, k: int = 30) -> list[str]:
    """The ids a query ranks, its embedding that of clip ``near``'s sound (what the model would make of it)."""
    vec = np.asarray(index.embeddings)[near][None]
    return [h.id for h in index.rank_texts(vec, [TextQuery(text, lang, k)])[0]]


#: language -> (clips, the query with an exclusion, the clip it excludes that ranks first without it, the clips it
#: must remove, a phrase query, the clip nearest in meaning that does not hold it, the clips that hold it)
CASES = {
    "eng": ([("a rooster crowing at dawn", "eng", None), ("roosters and hens in a farmyard", "eng", None),
             ("a bird singing", "eng", None), ("farm ambience", "eng", ["Rooster", "hen"]),
             ("slam the door shut", "eng", None), ("door slam in a hallway", "eng", None),
             ("a door that slams", "eng", None), ("bird wings flapping", "eng", None)],
            "bird -rooster", 0, {0, 1, 3}, '"door slam"', 4, {5, 6}),
    "fra": ([("un coq qui chante", "fra", None), ("les coqs du village", "fra", None),
             ("un oiseau qui chante", "fra", None), ("la ferme le matin", "fra", ["coq"]),
             ("claque de porte", "fra", None), ("la porte claque", "fra", None),
             ("porte qui claque au vent", "fra", None), ("oiseaux en vol", "fra", None)],
            "oiseau -coq", 0, {0, 1, 3}, "« porte qui claque »", 4, {5, 6}),
    "jpn": ([("鶏が鳴いている", "jpn", None), ("朝の鶏", "jpn", None), ("鳥のさえずり", "jpn", None),
             ("農場の音", "jpn", ["鶏"]), ("吠える犬", "jpn", None), ("犬が吠えている", "jpn", None),
             ("遠くで犬が吠えた", "jpn", None), ("鳥が飛ぶ", "jpn", None)],
            "鳥 -鶏", 0, {0, 1, 3}, "「犬が吠える」", 4, {5, 6}),
    "zho": ([("公鸡打鸣", "zho", None), ("清晨的公鸡", "zho", None), ("小鸟在唱歌", "zho", None),
             ("农场的声音", "zho", ["公鸡"]), ("叫的狗", "zho", None), ("狗叫声很大", "zho", None),
             ("远处狗叫", "zho", None), ("一只母鸡", "zho", None)],
            "鸟 -公鸡", 0, {0, 1, 3}, "“狗叫”", 4, {5, 6}),
}


@pytest.mark.parametrize("lang", list(CASES))
def test_not_removes_the_clips_holding_the_word_and_a_phrase_puts_its_clips_first(lang, vectors_meta):
    rows, negative, first, gone, phrase, nearest, holding = CASES[lang]
    index = library(rows, vectors_meta)
    without = ranked(index, parse_query(negative).embedded, lang, near=first)
    assert without[0] == f"c{first}"  # without the exclusion, the excluded word's clip ranks first
    found = ranked(index, negative, lang, near=first)
    assert not {f"c{i}" for i in gone} & set(found)
    assert len(found) == len(index) - len(gone)  # nothing else removed (一只母鸡: 鸡 alone is not 公鸡)
    plain = ranked(index, parse_query(phrase).embedded, lang, near=nearest)
    assert plain[0] == f"c{nearest}"
    found = ranked(index, phrase, lang, near=nearest)
    assert set(found) == {f"c{i}" for i in holding}  # a required match: only the clips holding it


def test_bird_minus_rooster_with_a_rooster_clip_first_by_sound(vectors_meta):
    """The user's finding: "bird -rooster" put the rooster first, the excluded word counted as a keyword. Now the
    rooster clips are gone, the keyword evidence is "bird", and the answer is the same through NOT."""
    index = library(CASES["eng"][0], vectors_meta)
    vec = np.asarray(index.embeddings)[0][None]
    assert index.rank_texts(vec, [TextQuery("bird", "eng", 30)])[0][0].id == "c0"
    hits = index.rank_texts(vec, [TextQuery("bird -rooster", "eng", 30)])[0]
    assert {"c2", "c7"} <= {h.id for h in hits}
    assert all(h.id not in ("c0", "c1", "c3") for h in hits)
    words = [e.terms for h in hits for e in h.evidence if e.source == "keyword"]
    assert words and all(w == ("bird",) for w in words)
    same = index.rank_texts(vec, [TextQuery("bird NOT rooster", "eng", 30)])[0]
    assert [h.id for h in same] == [h.id for h in hits]


def test_a_plain_query_ranks_exactly_as_the_ranker_given_its_text(vectors_meta):
    index = library(CASES["fra"][0], vectors_meta)
    ranker = index.text_ranker()
    vec = np.asarray(index.embeddings)[2]
    for text in ("un oiseau qui chante", "oiseau or coq", "porte"):
        a = ranker.rank(vec, text, "fra", 10)
        b = ranker.rank(vec, parse_query(text), "fra", 10)
        assert [(h.row, h.score, h.relevance) for h in a] == [(h.row, h.score, h.relevance) for h in b]
        assert a.relevance == b.relevance
