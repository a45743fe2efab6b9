"""Keyword analysis per language: the terms of a query or caption that can be keyword evidence (issues 33, 45).

A text (NFKC-normalised, lower-cased) becomes *words*, each with its terms:

1. words: runs of letters and digits; a run of Japanese or Chinese characters (written without spaces) is
   segmented into words by a morphological analyser (below); a run of another script written without
   spaces between its syllables' words (Hangul) becomes its characters and their bigrams (the fallback
   for scripts without an analyser here: ``개가`` matches ``개``);
2. grammar words out: a word on the language's stop-word list is dropped, and so is a Japanese word whose
   part of speech is grammar (particles, auxiliary verbs, conjunctions, pronouns, punctuation), a Chinese
   word tagged as a particle, numeral or measure word, a Han word all of whose characters are on the list
   (``这是``) and a single kana, so an article, a particle or a preposition alone is never keyword evidence
   (``une``, ``der``, ``the``, ``de``, ``的``, ``の``), and ``ドア`` (door) shares nothing with ``アラーム``;
3. terms: a word of a language Snowball has a stemmer for is reduced to its stem (``barking`` -> ``bark``,
   ``aboie`` / ``aboyer`` -> ``aboi``, ``borda`` / ``bordant`` -> ``bord``); a Japanese word to its
   normalised dictionary form (``吠えた`` / ``吠えている`` -> ``吠える``, ``パチパチ`` -> ``ぱちぱち``); a word
   of several Han characters also gives each of its characters (``狗叫`` -> ``狗叫 狗 叫``), so ``狗叫``
   matches ``狗在叫`` and ``雨`` matches ``雨声`` / ``雨音``: a Han character is a morpheme, and words plus
   characters is the combination that retrieves Chinese best (Nie, Gao, Zhang & Zhou 2000, "On the use of
   words and n-grams for Chinese information retrieval").

The analysers, each installed from PyPI with its dictionary inside the wheel (nothing is downloaded when
it runs), chosen by their words for sounds (onomatopoeia kept whole, inflected verbs reduced), size,
licence and load time (docs/hybrid-search.md, "Keywords that know each language", has the measured
comparison):

- Japanese: SudachiPy with its small dictionary (``sudachidict_small``, Apache-2.0, maintained by Works
  Applications), split mode C. It keeps ``ワンワン``, ``パチパチ``, ``カチカチ`` whole where janome (IPADIC)
  splits them in halves, gives each word its dictionary and normalised form and part of speech, and is the
  smallest installed of the three candidates (janome and fugashi + unidic-lite are larger; unidic-lite is
  a source archive last released in 2021). The core dictionary differs from the small one on compounds
  (``掃除機`` one word, ``掃除`` + ``機`` in the small one: they share the characters) at nearly twice the size.
- Chinese: jieba's dictionary and algorithm through ``rjieba`` (jieba-rs, MIT, maintained): the same words
  and tags as ``jieba`` (last released 2020, a source archive) in a much smaller wheel, loaded in a fraction
  of jieba's first-call time and writing no cache file. pkuseg's models are downloaded at run time.

Both are imported when the first Japanese or Chinese text is analysed, not with this module: the CLI's
``--help`` and every non-CJK search never load them.

Which analyser reads a run: a run with kana is Japanese; a run of Han characters is Japanese in a Japanese
text (``lang="jpn"``) and Chinese otherwise (a Chinese text, another language's, or an unknown language);
a run with Hangul takes the character fallback. So a query whose language is not given still matches a
caption's Japanese or Chinese words.

Stop words come from maintained packages: the Snowball project's lists as ``bm25s`` ships them (through
NLTK: English, French, German, Spanish, Dutch; and its Chinese list) where bm25s has the language, else
``stopwordsiso`` (Catalan, Japanese and the other languages it has). The long English lists of
``stopwordsiso`` and ``stop-words`` hold nouns and verbs a sound library needs (``fire``, ``ring``,
``man``, ``click``, ``close``), which is why Snowball's is used where it exists. The Chinese list holds
words that name sounds (``叫`` bark, ``咳`` cough, ``吱`` squeak, ``嗡嗡`` buzz): :data:`SOUND_WORDS`, the one
hand-typed list here, takes them out of every list. Stemmers are Snowball's through ``PyStemmer``
(English, French, German, Spanish, Dutch, Catalan and the other languages it has).

A caption is analysed in its own language, a query in the query's. A query whose language is not given
(``lang=None``, for a text encoder that does not read it) drops the grammar words of every default
language and keeps each word's stems in all of their stemmers.
"""

from __future__ import annotations

import re
import threading
import unicodedata
from collections.abc import Iterator
from functools import cache, lru_cache
from importlib.metadata import version

import bm25s.stopwords as bm25s_stopwords
import Stemmer
import stopwordsiso

from mlatr.languages import DEFAULT_LANGUAGES

#: What the terms of a text depend on besides this module: a keyword index stored with a shard records it, and
#: one made with another analysis (other stop-word lists, stemmers or segmenters) is analysed again when loaded.
ANALYSIS = (f"mlatr-analysis-2 bm25s-{version('bm25s')} PyStemmer-{version('PyStemmer')} "
            f"stopwordsiso-{version('stopwordsiso')} SudachiPy-{version('SudachiPy')} "
            f"sudachidict-small-{version('sudachidict-small')} rjieba-{version('rjieba')}")

_WORD = re.compile(r"[^\W_]+")
_CJK = re.compile(r"[\u3005-\u3007\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff]+")
_HAN = re.compile(r"[\u3005-\u3007\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]+")  # with the marks 々 〆 〇
_HAN_CHARACTER = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")
_KANA = re.compile(r"[\u3040-\u30ff]")
_HANGUL = re.compile(r"[\uac00-\ud7af]")

#: ISO 639-3 -> the name of bm25s's Snowball-derived stop-word list (``bm25s.stopwords.STOPWORDS_<NAME>``).
BM25S_LISTS = {"eng": "EN_PLUS", "fra": "FRENCH", "deu": "GERMAN", "spa": "SPANISH", "nld": "DUTCH", "zho": "CHINESE",
               "por": "PORTUGUESE", "ita": "ITALIAN", "rus": "RUSSIAN", "swe": "SWEDISH", "tur": "TURKISH",
               "kor": "KOREAN"}

#: ISO 639-3 -> ISO 639-1, the codes stopwordsiso takes.
ISO_639_1 = {"eng": "en", "fra": "fr", "deu": "de", "spa": "es", "nld": "nl", "cat": "ca", "jpn": "ja", "zho": "zh",
             "ita": "it", "por": "pt", "rus": "ru", "kor": "ko", "ara": "ar", "hin": "hi", "pol": "pl", "tur": "tr",
             "swe": "sv", "fin": "fi", "ces": "cs", "ell": "el"}

#: ISO 639-3 -> Snowball algorithm name (PyStemmer), for the languages mlatr knows that Snowball has.
SNOWBALL = {"eng": "english", "fra": "french", "deu": "german", "spa": "spanish", "nld": "dutch", "cat": "catalan",
            "ita": "italian", "por": "portuguese", "rus": "russian", "swe": "swedish", "fin": "finnish",
            "tur": "turkish", "ell": "greek", "ara": "arabic", "hin": "hindi"}

#: Words on a maintained stop-word list that name a sound or a sound-making action, kept as terms (the one
#: hand-typed list of this module; ``tests/test_keyword_analysis_languages.py`` checks each is on a list).
#: All are on bm25s's Chinese list; its Japanese and the other default languages' lists hold none (their
#: one-character entries are kana, never terms, and 何 彼 私).
SOUND_WORDS = frozenset({
    "叫",  # cry, bark, call (狗叫 a dog barks, 鸟叫 birdsong)
    "咳",  # cough
    "吱",  # squeak, creak (门吱吱作响)
    "咚",  # thud, drumbeat, knock
    "哗",  # splash, rush of water, crash (哗哗的雨声)
    "打",  # strike, beat: 打雷 thunder, 打鼓 drumming, 打鼾 snoring, 打字 typing
    "呜",  # hoot, toot, whimper (汽笛呜呜)
    "哇",  # wail (a baby's 哇哇)
    "哈",  # laugh, breathe out (哈哈, 哈欠 yawn)
    "嘘",  # hiss, shush
    "嘎",  # quack, screech (嘎嘎)
    "哼",  # hum, grunt, snort
    "呕",  # retch
    "唉",  # sigh
    "嘻",  # giggle
    "呸",  # spit
    "呵",  # chuckle, breathe out (呵呵, 呵欠 yawn)
    "冲",  # flush, gush (冲水 a flushing toilet)
    "叮咚",  # ding-dong (a doorbell)
    "嗡嗡",  # buzz, hum
    "哈哈",  # laughter
    "呼哧",  # panting
    "吧哒",  # smack, click
    "嘎登",  # clunk
})

#: Sudachi's parts of speech (the first level) that are grammar, never terms: particles, auxiliary verbs,
#: conjunctions, pronouns, punctuation and blanks.
JAPANESE_GRAMMAR = frozenset({"助詞", "助動詞", "接続詞", "代名詞", "補助記号", "空白"})


def _is_chinese_grammar(tag: str) -> bool:
    """Whether jieba's part-of-speech ``tag`` is grammar: a particle (``u``: 的 了 着 过 地 得), a numeral
    or a measure word (``m``, ``q``: 一只 一声)."""
    return tag.startswith("u") or tag in ("m", "q")


def _split(text: str) -> Iterator[tuple[str, bool]]:
    """``(piece, is_cjk)`` of ``text``: its runs of letters and digits, each cut where CJK characters start
    and end."""
    for word in _WORD.findall(text):
        pos = 0
        for run in _CJK.finditer(word):
            if run.start() > pos:
                yield word[pos:run.start()], False
            yield run.group(), True
            pos = run.end()
        if pos < len(word):
            yield word[pos:], False


def _characters_and_bigrams(run: str) -> list[str]:
    return list(run) + [run[i:i + 2] for i in range(len(run) - 1)]


def tokens(text: str) -> list[str]:
    """Lower-case word tokens of ``text``, CJK runs as characters plus character bigrams: the analysis of
    issue 33 (:mod:`mlatr.lab.experiments.relevance_fit` reproduces the previous default ranking with it)."""
    out: list[str] = []
    for piece, cjk in _split(text.lower()):
        out += _characters_and_bigrams(piece) if cjk else [piece]
    return out


@cache
def stop_words(lang: str | None) -> frozenset[str]:
    """The grammar words of ``lang`` (module docstring), :data:`SOUND_WORDS` left out; ``None``: those of
    every default language."""
    if lang is None:
        return frozenset().union(*(stop_words(code) for code in DEFAULT_LANGUAGES))
    if lang in BM25S_LISTS:
        words = getattr(bm25s_stopwords, f"STOPWORDS_{BM25S_LISTS[lang]}")
    else:
        iso = ISO_639_1.get(lang)
        words = stopwordsiso.stopwords(iso) if iso and stopwordsiso.has_lang(iso) else ()
    return frozenset(w.lower() for w in words) - SOUND_WORDS


@cache
def _stemmer(lang: str):
    return Stemmer.Stemmer(SNOWBALL[lang]) if lang in SNOWBALL else None


@cache
def _sudachi_dictionary():
    import sudachipy  # here, not at the top: loaded with the first Japanese text, never by --help or other languages

    return sudachipy.Dictionary(dict="small")


_THREAD = threading.local()


def _sudachi():
    """This thread's Sudachi tokenizer (a tokenizer is not shared between threads; the dictionary is)."""
    tokenizer = getattr(_THREAD, "sudachi", None)
    if tokenizer is None:
        tokenizer = _THREAD.sudachi = _sudachi_dictionary().tokenizer(mode="C")
    return tokenizer


def japanese_words(run: str) -> list[tuple[str, str, tuple[str, ...]]]:
    """``(surface, term, forms)`` of each word of a Japanese ``run`` that is not grammar by its part of
    speech (:data:`JAPANESE_GRAMMAR`): ``term`` its normalised dictionary form, ``forms`` the forms checked
    against the stop-word list (surface, dictionary and normalised form)."""
    out = []
    for m in _sudachi().tokenize(run):
        if m.part_of_speech()[0] in JAPANESE_GRAMMAR:
            continue
        out.append((m.surface(), m.normalized_form(), (m.surface(), m.dictionary_form(), m.normalized_form())))
    return out


def chinese_words(run: str) -> list[tuple[str, str, tuple[str, ...]]]:
    """``(surface, term, forms)`` of each word of a Chinese ``run`` (jieba's segmentation) that is not grammar
    by its tag (particles, numerals, measure words)."""
    import rjieba  # here, not at the top: its dictionary loads on import, only for Chinese text

    return [(w, w, (w,)) for w, tag in rjieba.tag(run) if not _is_chinese_grammar(tag)]


def _segmenter(run: str, lang: str | None):
    """The analyser of a CJK ``run`` (module docstring) and its stop-word language; None: the fallback."""
    if _HANGUL.search(run):
        return None, None
    if _KANA.search(run) or lang == "jpn":
        return japanese_words, "jpn"
    return chinese_words, "zho"


def _is_single_kana(word: str) -> bool:
    return len(word) == 1 and bool(_KANA.fullmatch(word))


class Analyzer:
    """A language's keyword analysis (module docstring): :meth:`terms` of a text, :meth:`words` with them."""

    def __init__(self, lang: str | None):
        self.lang = lang
        self.stop = stop_words(lang)
        codes = [lang] if lang is not None else list(DEFAULT_LANGUAGES)
        self.stemmers = [s for s in (_stemmer(code) for code in codes) if s is not None]
        #: the grammar words of a Japanese or Chinese word: its analyser's language's and the text's
        self.cjk_stop = {code: stop_words(code) | self.stop for code in ("jpn", "zho")}

    def _fallback_is_grammar(self, token: str) -> bool:
        return token in self.stop or (len(token) > 1 and all(ch in self.stop for ch in token))

    def _word_terms(self, term: str, forms: tuple[str, ...], stop: frozenset[str]) -> list[str]:
        """A segmented CJK word's distinct terms: none for a grammar word, else the word and, for several Han
        characters, each of them that is not a grammar word (not the iteration mark of ``時々``)."""
        han = bool(_HAN.fullmatch(term))
        if (_is_single_kana(term) or any(f in stop for f in forms)
                or (han and all(ch in stop for ch in term))):
            return []
        if not han or len(term) == 1:
            return [term]
        return list(dict.fromkeys([term] + [ch for ch in term if ch not in stop and _HAN_CHARACTER.match(ch)]))

    def _cjk_words(self, run: str) -> list[tuple[str, list[str]]]:
        segment, code = _segmenter(run, self.lang)
        if segment is None:
            return [(tok, [] if self._fallback_is_grammar(tok) else [tok]) for tok in _characters_and_bigrams(run)]
        stop = self.cjk_stop[code]
        return [(surface, self._word_terms(term, forms, stop)) for surface, term, forms in segment(run)]

    def words(self, text: str) -> list[tuple[str, list[str]]]:
        """``(word, terms)`` of each word of ``text`` in order (a grammar word's terms empty)."""
        out: list[tuple[str, list[str]]] = []
        for piece, cjk in _split(unicodedata.normalize("NFKC", text).lower()):
            if cjk:
                out += self._cjk_words(piece)
            elif piece in self.stop:
                out.append((piece, []))
            elif not self.stemmers:
                out.append((piece, [piece]))
            else:
                out.append((piece, list(dict.fromkeys(s.stemWord(piece) for s in self.stemmers))))
        return out

    def terms(self, text: str) -> list[str]:
        """The terms of ``text``: words segmented, grammar words dropped, words stemmed (in order, repeats kept)."""
        return [t for _word, terms in self.words(text) for t in terms]


@lru_cache(maxsize=64)
def analyzer(lang: str | None) -> Analyzer:
    """The (shared) :class:`Analyzer` of ``lang``."""
    return Analyzer(lang)


def terms(text: str, lang: str | None) -> list[str]:
    """:meth:`Analyzer.terms` of ``text`` in ``lang``."""
    return analyzer(lang).terms(text)


def surface_words(text: str, lang: str | None, matched: list[str]) -> list[str]:
    """The words of ``text`` whose terms are among ``matched`` (what a user reads as the words that matched:
    ``aboie`` rather than its stem ``aboi``, ``吠え`` rather than ``吠える``), in order, each once."""
    wanted, out = set(matched), []
    for word, word_terms in analyzer(lang).words(text):
        if wanted.intersection(word_terms) and word not in out:
            out.append(word)
    return out
