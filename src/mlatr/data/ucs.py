"""UCS file names: ``CatID_FXName_CreatorID_SourceID[_UserData].ext`` read against the UCS category list.

The Universal Category System names a sound file by blocks separated by ``_``: the ``CatID`` (a category /
subcategory pair abbreviated as the published list spells it, case included: ``DOORWood``), the ``FXName``
(a short description a person wrote: ``Creaky door opens slowly``), the ``CreatorID`` (recordist, designer
or vendor) and the ``SourceID`` (project, show or library), then optional user data. The CatID may carry a
user category after a hyphen (``DOORWood-Castle``). The list (``mlatr/data/ucs_categories.json``, UCS 8.2.1 in
English: CatID -> category, subcategory, explanation, synonyms) ships with mlatr; its ``source`` and
``licence`` fields say where it comes from and under which terms.

:func:`parse_ucs_name` gives a :class:`UcsName`, or ``None`` for any name that is not UCS: fewer than four
blocks, an empty block, a CatID the list does not hold (an unknown or mis-cased one), a name over
:data:`MAX_NAME_CHARS`. A name that only looks like UCS is simply not UCS: no error.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from mlatr.errors import InputError

#: The category list shipped with mlatr.
UCS_TABLE = Path(__file__).resolve().parent / "ucs_categories.json"
#: Longest file name (without extension) read as UCS: file systems allow 255 bytes.
MAX_NAME_CHARS = 255


@dataclass(frozen=True)
class UcsCategory:
    """One entry of the UCS list: ``cat_id`` (``DOORWood``), ``category`` (``DOORS``), ``subcategory``
    (``WOOD``), the list's ``explanation`` and ``synonyms``."""

    cat_id: str
    category: str
    subcategory: str
    explanation: str
    synonyms: tuple[str, ...]

    def words(self) -> str:
        """The category and subcategory in lower-case words: ``"doors wood"`` (a ``MISC`` subcategory, which
        says nothing, left out)."""
        parts = [self.category] + ([self.subcategory] if self.subcategory != "MISC" else [])
        return " ".join(p.lower().replace("-", " ") for p in parts)


@dataclass(frozen=True)
class UcsName:
    """A file name read as UCS: its ``category`` entry, the ``user_category`` after the CatID's hyphen (or
    ``""``), ``fx_name`` (as written), ``creator_id``, ``source_id`` and ``user_data`` (the blocks after the
    fourth, joined by ``_``; ``""`` without)."""

    category: UcsCategory
    user_category: str
    fx_name: str
    creator_id: str
    source_id: str
    user_data: str

    def caption(self) -> str:
        """The FXName with the category's words when it does not say them already:
        ``"Creaky door opens slowly, doors wood"``."""
        words = self.category.words()
        have = set(self.fx_name.lower().split())
        return self.fx_name if set(words.split()) <= have else f"{self.fx_name}, {words}"


@cache
def ucs_categories(path: str | Path = UCS_TABLE) -> dict[str, UcsCategory]:
    """CatID -> :class:`UcsCategory` of the list at ``path`` (checked: a damaged list is an
    :class:`~mlatr.errors.InputError` naming the entry)."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise InputError(f"cannot read the UCS category list: {exc}", str(path)) from exc
    if not isinstance(data, dict) or data.get("format") != "mlatr-ucs-1" or not isinstance(data.get("categories"),
                                                                                           list):
        raise InputError("expected a mlatr-ucs-1 object with a list of categories", str(path))
    out: dict[str, UcsCategory] = {}
    for i, entry in enumerate(data["categories"]):
        keys = ("cat_id", "category", "subcategory", "explanation")
        if not isinstance(entry, dict) or not all(isinstance(entry.get(k), str) for k in keys) \
                or not isinstance(entry.get("synonyms"), list) or not all(isinstance(s, str)
                                                                          for s in entry["synonyms"]):
            raise InputError("expected cat_id, category, subcategory, explanation (strings) and synonyms (a list "
                             "of strings)", str(path), field=f"categories[{i}]")
        out[entry["cat_id"]] = UcsCategory(entry["cat_id"], entry["category"], entry["subcategory"],
                                           entry["explanation"], tuple(entry["synonyms"]))
    return out


def parse_ucs_name(stem: str, categories: dict[str, UcsCategory] | None = None) -> UcsName | None:
    """``stem`` (a file name without its extension) read as UCS, or ``None`` when it is not one (see the
    module docstring)."""
    if len(stem) > MAX_NAME_CHARS:
        return None
    blocks = stem.split("_")
    if len(blocks) < 4 or any(not b.strip() for b in blocks[:4]):
        return None
    cat_id, _, user_category = blocks[0].partition("-")
    category = (categories if categories is not None else ucs_categories()).get(cat_id)
    if category is None:
        return None
    return UcsName(category, user_category.strip(), blocks[1].strip(), blocks[2].strip(), blocks[3].strip(),
                   "_".join(blocks[4:]).strip())
