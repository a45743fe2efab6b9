"""Nonsense queries: strings no sound library can answer, for measuring "nothing relevant" (issue 33).

A search that always returns its ten least bad clips cannot tell a user that nothing matches. To measure
whether the relevance of :mod:`mlatr.search.relevance` abstains when it should, a query set is drawn
that no library holds an answer to: random letter strings that look like words (``zzqxj blorf``), random
characters of the Latin script (letters, accents, digits, punctuation), random Han characters and kana
(the scripts of Chinese and Japanese queries), and random letters of other scripts (Cyrillic, Greek,
Arabic, Hebrew, Hangul, Devanagari, Thai). Each query is given one of the query languages in turn, as a
user would send it with the language picker left as it was.

The draw is seeded (:func:`nonsense_queries`), so every run asks the same strings.
"""

from __future__ import annotations

import numpy as np

#: Code-point ranges (inclusive) of the scripts drawn from, by name.
SCRIPTS: dict[str, tuple[tuple[int, int], ...]] = {
    "latin-letters": ((0x61, 0x7A),),
    "latin-characters": ((0x21, 0x7E), (0xC0, 0xFF)),
    "han": ((0x4E00, 0x9FFF),),
    "kana": ((0x3041, 0x3096), (0x30A1, 0x30FA)),
    "cyrillic": ((0x0430, 0x044F),),
    "greek": ((0x03B1, 0x03C9),),
    "arabic": ((0x0621, 0x064A),),
    "hebrew": ((0x05D0, 0x05EA),),
    "hangul": ((0xAC00, 0xD7A3),),
    "devanagari": ((0x0905, 0x0939),),
    "thai": ((0x0E01, 0x0E2E),),
}

#: How many queries of each script :func:`nonsense_queries` draws by default (80 in all).
DEFAULT_COUNTS: dict[str, int] = {"latin-letters": 20, "latin-characters": 12, "han": 10, "kana": 10, "cyrillic": 4,
                                  "greek": 4, "arabic": 4, "hebrew": 4, "hangul": 4, "devanagari": 4, "thai": 4}

#: The seed of the draw an index fits its own "nothing relevant" level on (:mod:`mlatr.search.abstention`); the
#: draws a calibration is fitted and measured on use others (:data:`mlatr.lab.experiments.real_heads.NONSENSE_SEEDS`).
INDEX_SEED = 2

#: Scripts written without spaces between words: one run of characters per query.
_UNSPACED = {"han", "kana", "thai"}


def _draw(rng: np.random.Generator, ranges: tuple[tuple[int, int], ...], n: int) -> str:
    sizes = np.array([hi - lo + 1 for lo, hi in ranges])
    which = rng.choice(len(ranges), size=n, p=sizes / sizes.sum())
    return "".join(chr(ranges[w][0] + int(rng.integers(sizes[w]))) for w in which)


def nonsense_queries(languages: list[str], counts: dict[str, int] | None = None,
                     seed: int = 0) -> list[dict[str, str]]:
    """``[{"text", "lang", "script"}]``: random strings of each script in ``counts`` (default
    :data:`DEFAULT_COUNTS`), one to three "words" of 3-8 characters (one run of 2-6 characters for the
    scripts written without spaces), the languages of ``languages`` given in turn. Seeded: the same
    arguments give the same queries."""
    rng = np.random.default_rng(seed)
    out = []
    for script, n in (DEFAULT_COUNTS if counts is None else counts).items():
        for _ in range(n):
            if script in _UNSPACED:
                text = _draw(rng, SCRIPTS[script], int(rng.integers(2, 7)))
            else:
                text = " ".join(_draw(rng, SCRIPTS[script], int(rng.integers(3, 9)))
                                for _ in range(int(rng.integers(1, 4))))
            out.append({"text": text, "lang": languages[len(out) % len(languages)], "script": script})
    return out
