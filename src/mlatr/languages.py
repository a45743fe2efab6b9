"""Language codes used across mlatr (ISO 639-3), and their names.

:func:`normalize` is the one normaliser every entry point uses (config ``data.languages``, ``--languages``,
``--lang``, ``--pivot``, importers' language columns): ISO 639-1 / 639-2 aliases map to ISO 639-3 and an
unknown code is an error that lists the supported ones.

The default set is the eight languages of ATRI / ML-CLAP. English is the pivot of the
consistency metrics (ATRI eq. 14-16) and the anchor of CACL (ATRI eq. 12).
"""

from __future__ import annotations

from collections.abc import Iterable

from mlatr.errors import MlatrError

PIVOT = "eng"

#: ISO 639-3 code -> English name, for every language mlatr knows.
LANGUAGE_NAMES: dict[str, str] = {
    "eng": "English",
    "fra": "French",
    "deu": "German",
    "spa": "Spanish",
    "nld": "Dutch",
    "cat": "Catalan",
    "jpn": "Japanese",
    "zho": "Chinese",
    "ita": "Italian",
    "por": "Portuguese",
    "rus": "Russian",
    "kor": "Korean",
    "ara": "Arabic",
    "hin": "Hindi",
    "pol": "Polish",
    "tur": "Turkish",
    "swe": "Swedish",
    "fin": "Finnish",
    "ces": "Czech",
    "ell": "Greek",
}

#: The default languages (ATRI, ML-CLAP), English first.
DEFAULT_LANGUAGES: tuple[str, ...] = ("eng", "fra", "deu", "spa", "nld", "cat", "jpn", "zho")

#: Common ISO 639-1 and 639-2/B codes mapped to ISO 639-3, for importers.
ALIASES: dict[str, str] = {
    "en": "eng", "fr": "fra", "fre": "fra", "de": "deu", "ger": "deu", "es": "spa", "nl": "nld",
    "dut": "nld", "ca": "cat", "ja": "jpn", "zh": "zho", "chi": "zho", "it": "ita", "pt": "por",
    "ru": "rus", "ko": "kor", "ar": "ara", "hi": "hin", "pl": "pol", "tr": "tur", "sv": "swe",
    "fi": "fin", "cs": "ces", "cze": "ces", "el": "ell", "gre": "ell",
}


#: ISO 639-3 -> NLLB / FLORES-200 codes (script included): the NLLB tokenizer's language tokens, used by
#: SONAR (its text encoder) and by the NLLB translation models.
NLLB_CODES: dict[str, str] = {
    "eng": "eng_Latn", "fra": "fra_Latn", "deu": "deu_Latn", "spa": "spa_Latn", "nld": "nld_Latn",
    "cat": "cat_Latn", "jpn": "jpn_Jpan", "zho": "zho_Hans", "ita": "ita_Latn", "por": "por_Latn",
    "rus": "rus_Cyrl", "kor": "kor_Hang", "ara": "arb_Arab", "hin": "hin_Deva", "pol": "pol_Latn",
    "tur": "tur_Latn", "swe": "swe_Latn", "ukr": "ukr_Cyrl", "ces": "ces_Latn", "ell": "ell_Grek",
}


def is_known(code: str) -> bool:
    """True when ``code`` is an ISO 639-3 code mlatr knows."""
    return code in LANGUAGE_NAMES


def supported_codes() -> str:
    """The codes :func:`normalize` accepts, for messages."""
    return (f"known ISO 639-3 codes: {', '.join(sorted(LANGUAGE_NAMES))}; "
            "ISO 639-1 codes such as fr are accepted too")


def normalize(code: str, where: str | None = None) -> str:
    """Map an ISO 639-1/639-2/639-3 code (any case) to ISO 639-3; raise :class:`MlatrError` (a
    ``ValueError``) naming the supported codes if it is unknown. ``where`` (e.g. ``"--lang"``,
    ``"config: data.languages"``) starts the message."""
    c = str(code).strip().lower()
    c = ALIASES.get(c, c)
    if c not in LANGUAGE_NAMES:
        prefix = f"{where}: " if where else ""
        raise MlatrError(f"{prefix}unknown language code {code!r} ({supported_codes()})")
    return c


def normalize_all(codes: Iterable[str], where: str | None = None) -> list[str]:
    """:func:`normalize` of each code, in order; a code given twice (``fr`` and ``fra`` count as one) is an
    error."""
    out = [normalize(c, where) for c in codes]
    repeated = sorted({c for c in out if out.count(c) > 1})
    if repeated:
        prefix = f"{where}: " if where else ""
        raise MlatrError(f"{prefix}language {repeated[0]} is given twice")
    return out


def parse_language_list(text: str, where: str | None = None) -> list[str]:
    """A comma-separated list of language codes (``"eng,fr,deu"``) as ISO 639-3 codes."""
    codes = [c for c in (part.strip() for part in text.split(",")) if c]
    if not codes:
        prefix = f"{where}: " if where else ""
        raise MlatrError(f"{prefix}no language code in {text!r}")
    return normalize_all(codes, where)


def iso639_1(code: str) -> str | None:
    """The two-letter ISO 639-1 code of an ISO 639-3 code mlatr knows (``"fra"`` -> ``"fr"``), or None."""
    for short, long in ALIASES.items():
        if long == code and len(short) == 2:
            return short
    return None
