"""Back-translation check of a multilingual manifest (ATRI Appendix A, Table 5).

ATRI re-translates every translated test caption into English, embeds the original English caption and
the round trip with a sentence encoder, and reports the mean cosine per language and data set (all above
90 % in its Table 5). Here:

1. :func:`back_translate`: every non-null ``captions[L][j]`` (``L`` not English) goes through a
   :class:`~mlatr.translation.translate.Translator` ``L -> eng`` (cached like any translation); a caption
   whose back-translation failed keeps ``round_trip = None`` and is counted, not scored;
2. :func:`score_rows`: cosine of ``captions["eng"][j]`` and the round trip
   (:func:`~mlatr.translation.sentence.pair_cosines`);
3. :func:`qa_table`: mean cosine per language and split, Table 5's layout (languages as rows, one column
   per split, plus all splits together).

The files a person reads (table, distribution figure, worst captions, captions under a threshold) are
written by :mod:`mlatr.translation.qa_report`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np
from tqdm import tqdm

from mlatr.data.manifest import PIVOT, Manifest, language_order
from mlatr.errors import MlatrError
from mlatr.translation.sentence import SentenceEncoder, pair_cosines
from mlatr.translation.translate import Translator

ALL_SPLITS = "all"


@dataclass
class QARow:
    """One translated caption, its English source and its round trip back into English."""

    clip_id: str
    split: str
    lang: str
    index: int
    english: str
    translation: str
    round_trip: str | None = None
    cosine: float | None = None
    reason: str = ""

    def to_json(self) -> dict:
        return asdict(self)


def qa_languages(manifest: Manifest, languages: Sequence[str] | None = None) -> list[str]:
    """The languages to check: ``languages`` (English refused), or every non-English one the manifest has."""
    have = [lang for lang in manifest.languages() if lang != PIVOT]
    if languages is None:
        if not have:
            raise MlatrError(f"{manifest.path or 'manifest'}: no captions besides {PIVOT}: nothing to check")
        return have
    langs = language_order(languages)
    if PIVOT in langs:
        raise MlatrError(f"{PIVOT} is the reference of the check, not a language to check")
    missing = [lang for lang in langs if lang not in have]
    if missing:
        raise MlatrError(f"{manifest.path or 'manifest'} has no captions in {', '.join(missing)} "
                         f"(it has: {', '.join(have) or 'none'})")
    return langs


def collect_rows(manifest: Manifest, languages: Sequence[str]) -> list[QARow]:
    """A row per non-null translated caption of ``languages``, in manifest order."""
    rows: list[QARow] = []
    for clip in manifest.clips:
        english = clip.captions.get(PIVOT, [])
        for lang in languages:
            for j, text in enumerate(clip.captions.get(lang, [])):
                if text is not None and j < len(english):
                    rows.append(QARow(clip.id, clip.split or "(none)", lang, j, english[j], text))
    return rows


def back_translate(rows: list[QARow], translator: Translator, progress: bool = True) -> None:
    """Fill ``round_trip`` (or ``reason``) of every row by translating ``translation`` back into English."""
    langs = list(dict.fromkeys(r.lang for r in rows))
    for lang in langs:  # every pair is checked before anything is sent
        translator.backend.check_pair(lang, PIVOT)
    total = sum(len(dict.fromkeys(r.translation for r in rows if r.lang == lang)) for lang in langs)
    with tqdm(total=total, unit="caption", disable=not progress, desc="back-translate") as bar:
        for lang in langs:
            bar.set_description(f"back-translate {lang}->{PIVOT}")
            mine = [r for r in rows if r.lang == lang]
            outcomes = translator.translate([r.translation for r in mine], lang, PIVOT, bar)
            for row in mine:
                outcome = outcomes[row.translation]
                row.round_trip, row.reason = outcome.translation, outcome.reason


def score_rows(rows: list[QARow], encoder: SentenceEncoder, progress: bool = False) -> None:
    """Cosine of the English caption and its round trip, for every row that has a round trip."""
    done = [r for r in rows if r.round_trip is not None]
    if not done:
        return
    cos = pair_cosines(encoder, [r.english for r in done], [r.round_trip for r in done], progress=progress)
    for row, value in zip(done, cos, strict=True):
        row.cosine = float(value)


def qa_table(rows: Sequence[QARow]) -> dict[str, dict[str, dict[str, float | int]]]:
    """``{lang: {split | "all": {"mean", "n", "failed"}}}``: mean cosine of the scored rows (NaN when none),
    number scored, number whose back-translation failed. Languages in the default order."""
    splits = list(dict.fromkeys(r.split for r in rows))
    table: dict[str, dict[str, dict[str, float | int]]] = {}
    for lang in language_order({r.lang for r in rows}):
        table[lang] = {}
        for split in [*splits, ALL_SPLITS]:
            sel = [r for r in rows if r.lang == lang and split in (r.split, ALL_SPLITS)]
            scored = [r.cosine for r in sel if r.cosine is not None]
            table[lang][split] = {"mean": float(np.mean(scored)) if scored else float("nan"), "n": len(scored),
                                  "failed": sum(r.round_trip is None for r in sel)}
    return table


def below_threshold(rows: Sequence[QARow], threshold: float) -> list[QARow]:
    """Scored rows with cosine under ``threshold``, lowest first."""
    return sorted((r for r in rows if r.cosine is not None and r.cosine < threshold), key=lambda r: r.cosine)


def worst_rows(rows: Sequence[QARow], per_language: int) -> dict[str, list[QARow]]:
    """The ``per_language`` lowest-cosine rows of each language, lowest first."""
    out: dict[str, list[QARow]] = {}
    for lang in language_order({r.lang for r in rows}):
        scored = [r for r in rows if r.lang == lang and r.cosine is not None]
        out[lang] = sorted(scored, key=lambda r: r.cosine)[:per_language]
    return out
