"""Per-language caption noise that mimics machine-translation errors.

ATRI trains on machine-translated AudioCaps/Clotho (§5.1) and attributes the anomalies of its Table 1
to noise in the data (§5.5.2); this module makes that noise a controlled variable of the synthetic
benchmark, set per language.

With probability ``p`` (independently per caption, for the languages given a rate) a caption is
replaced by a corrupted realisation of its plan, made by one of:

- ``drop_attribute``: an attribute word the caption had is left out;
- ``wrong_attribute``: a pitch or loudness word contradicts the sound (flipped, or added wrong);
- ``wrong_count``: a count becomes another count;
- ``synonym``: a noun is replaced by a different noun for the same sound (meaning kept, wording not);
- ``order``: the first two events of a sequence swap places;
- ``word_slip``: two neighbouring words swap (languages written with spaces), or two neighbouring
  clauses (Japanese, Chinese).

The corrupted caption always differs from the clean one, so the measured noise rate is the rate asked
for. Only the languages with a rate are touched.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from mlatr.data.synth.captions import CaptionPlan, realise
from mlatr.data.synth.languages import GRAMMARS

NOISE_KINDS = ("drop_attribute", "wrong_attribute", "wrong_count", "synonym", "order", "word_slip")
OPPOSITE = {"low": "high", "high": "low", "quiet": "loud", "loud": "quiet"}


def _mention_noise(kind: str, plan: CaptionPlan, lang: str, rng: np.random.Generator) -> CaptionPlan | None:
    ms = list(plan.mentions)
    i = int(rng.integers(len(ms)))
    m = ms[i]
    if kind == "drop_attribute":
        shown = [a for a in ("pitch", "loudness") if getattr(m, a)]
        if m.numeral:
            shown.append("count")
        if not shown:
            return None
        what = shown[int(rng.integers(len(shown)))]
        ms[i] = replace(m, show_count=False) if what == "count" else replace(m, **{what: None})
    elif kind == "wrong_attribute":
        # a pitch or loudness word that contradicts the sound: a shown word flips, an omitted one is
        # added with the wrong value
        attr = ("pitch", "loudness")[int(rng.integers(2))]
        true = plan.truth[i][0 if attr == "pitch" else 1]
        ms[i] = replace(m, **{attr: OPPOSITE[true]})
    elif kind == "wrong_count":
        if m.count is None:
            return None
        ms[i] = replace(m, count=int(rng.choice([c for c in (1, 2, 3) if c != m.count])), show_count=True)
    elif kind == "synonym":
        n = len(GRAMMARS[lang].NOUNS[m.kind])
        if n < 2:
            return None
        ms[i] = replace(m, synonym=(m.synonym + int(rng.integers(1, n))) % n)
    elif kind == "order":
        if plan.n_foreground < 2:
            return None
        ms[0], ms[1] = ms[1], ms[0]
    return replace(plan, mentions=tuple(ms))


def _word_slip(text: str, lang: str, rng: np.random.Generator) -> str | None:
    if GRAMMARS[lang].SPACED:
        words = text.split(" ")
        if len(words) < 2:
            return None
        i = int(rng.integers(len(words) - 1))
        words[i], words[i + 1] = words[i + 1], words[i]
        return " ".join(words)
    sep = "，" if "，" in text else "、"
    parts = text.split(sep)
    if len(parts) < 2:
        return None
    i = int(rng.integers(len(parts) - 1))
    parts[i], parts[i + 1] = parts[i + 1], parts[i]
    return sep.join(parts)


def corrupt_caption(plan: CaptionPlan, lang: str, rng: np.random.Generator) -> tuple[str, str]:
    """A corrupted caption of ``plan`` in ``lang`` and its error kind; never equal to the clean one."""
    clean = realise(plan, lang)
    for k in rng.permutation(len(NOISE_KINDS)):
        kind = NOISE_KINDS[int(k)]
        if kind == "word_slip":
            text = _word_slip(clean, lang, rng)
        else:
            noisy = _mention_noise(kind, plan, lang, rng)
            text = realise(noisy, lang) if noisy is not None else None
        if text is not None and text != clean:
            return text, kind
    # ``wrong_attribute`` always changes the text, so this is reached only if a grammar ignores attributes
    raise RuntimeError(f"could not corrupt caption {clean!r} ({lang})")


def apply_noise(
    captions: dict[str, list[str]], plans: list[CaptionPlan], rates: dict[str, float],
    rng_for: dict[str, np.random.Generator],
) -> tuple[dict[str, list[str]], dict[str, list[str | None]]]:
    """Corrupt each caption of language ``L`` with probability ``rates[L]`` using ``rng_for[L]``.

    Returns the new captions (other languages untouched, same list objects) and, per noisy language,
    the kind of error of each caption (``None`` = clean).
    """
    out = dict(captions)
    record: dict[str, list[str | None]] = {}
    for lang, p in rates.items():
        if p <= 0 or lang not in captions:
            continue
        rng = rng_for[lang]
        texts, kinds = [], []
        for plan, clean in zip(plans, captions[lang], strict=True):
            if rng.random() < p:
                text, kind = corrupt_caption(plan, lang, rng)
                texts.append(text)
                kinds.append(kind)
            else:
                texts.append(clean)
                kinds.append(None)
        out[lang] = texts
        record[lang] = kinds
    return out, record
