"""What an evaluation's numbers cannot say: too few candidates, consistency metrics left blank.

Retrieval metrics rank the right item among the candidates: with one test clip every R@k is 100, with
ten R@10 is 100 by construction, and with fewer than :data:`MIN_CANDIDATES` chance alone reaches
``k / N``. The consistency metrics (gap, dis, MRV; ATRI eq. 14-16) use the caption groups present in
every language, and are blank when there is none. :func:`evaluation_caveats` says so in words, for the
commands to print as warnings (stderr) and store in the results (``"warnings"``).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

#: Fewer candidates than this (clips for text-to-audio, captions of a language for audio-to-text)
#: get a warning: chance R@10 is then at least 10 %.
MIN_CANDIDATES = 100
_KS = (1, 5, 10)


def _chance(n: int) -> str:
    return ", ".join(f"R@{k} {min(100.0, 100.0 * k / n):.0f} %" for k in _KS)


def candidate_caveats(n_audio: int, text_lang: Sequence[str]) -> list[str]:
    """Warnings for too few candidates: clips (text-to-audio) and captions per language (audio-to-text)."""
    out = []
    if n_audio < MIN_CANDIDATES:
        out.append(f"only {n_audio} clip(s) to rank in text-to-audio retrieval (at least {MIN_CANDIDATES} "
                   f"make R@k meaningful): chance alone gives {_chance(n_audio)}")
    langs, counts = np.unique(np.asarray(text_lang, dtype=str), return_counts=True)
    few = [f"{lang} {int(n)}" for lang, n in zip(langs.tolist(), counts.tolist(), strict=True)
           if n < MIN_CANDIDATES]
    if few:
        out.append(f"few captions to rank in audio-to-text retrieval ({', '.join(few)}; at least "
                   f"{MIN_CANDIDATES} per language make R@k meaningful)")
    return out


def consistency_caveats(text_lang: Sequence[str], text_group: Sequence, pivot: str) -> list[str]:
    """Why gap, dis and MRV are blank when no caption group has a caption in every language: the
    languages that share no group with the pivot (or, if each does, that no group spans them all)."""
    lang = np.asarray(text_lang, dtype=str)
    group = np.asarray(text_group)
    languages = sorted(set(lang.tolist()))
    if len(languages) < 2:
        return []
    members = {code: set(group[lang == code].tolist()) for code in languages}
    if set.intersection(*members.values()):
        return []
    base = members.get(pivot, set())
    alone = [code for code in languages if code != pivot and not (members[code] & base)]
    if alone:
        why = (f"{', '.join(alone)} share{'s' if len(alone) == 1 else ''} no caption group with the pivot "
               f"{pivot} (no caption there translates a {pivot} caption of the set)")
    else:
        why = "no caption group has a caption in every language (each pair overlaps, but never all at once)"
    return [f"gap, dis and MRV are blank: {why}; evaluate those languages separately, or with translations "
            "aligned to the same source captions"]


def evaluation_caveats(n_audio: int, text_lang: Sequence[str], text_group: Sequence, pivot: str) -> list[str]:
    """Every caveat of one evaluation (see the module docstring)."""
    return candidate_caveats(n_audio, text_lang) + consistency_caveats(text_lang, text_group, pivot)
