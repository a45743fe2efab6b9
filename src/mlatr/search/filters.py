"""Filters over a clip's facets: one small expression language for the CLI, Python, HTTP and the page.

A filter (``mlatr search --where``, ``Index.search_text(..., where=)``, ``GET /search?where=``) is parsed once,
where the query enters, into a checked :class:`Filter`; a search ranks only the clips it allows (the candidates
are filtered before the top-k cut, on every path: :mod:`mlatr.search.eligibility`). The grammar::

    filter  := either ( ("or" | "||") either )*
    either  := one ( ("and" | "&&") one )*
    one     := ("not" | "!") one  |  "(" filter ")"  |  test
    test    := FIELD                                  a flag is true:        silent
             | FIELD ("="|"=="|"!="|"<"|"<="|">"|">=") VALUE                 duration<1.5s, format=wav
             | FIELD ["not"] "in" "(" VALUE ("," VALUE)* ")"                 format in (wav, flac)
             | FIELD "has" VALUE                      a list holds a value:  keywords has door
    VALUE   := a number with an optional unit (500ms, 500 ms, 48k, -30lufs, 2mb), a bare word (wav, Castle/Doors),
               a quoted text ("door slam" or 'door slam'; a backslash keeps the next character as it is)

Words (``and``, ``or``, ``not``, ``in``, ``has``, ``true``, ``false``) and field names are read in any case;
``not`` binds tighter than ``and``, ``and`` tighter than ``or``. The fields are :data:`FIELDS` (the facets
:mod:`mlatr.data.file_metadata` writes): numbers (compared in their unit: ``duration`` in seconds, with ``ms``,
``s``, ``min``; ``sample_rate`` in Hz, with ``khz`` / ``k``; ``file_size`` in bytes, with ``kb`` ``mb`` ``gb``
(1000) and ``kib`` ``mib`` ``gib`` (1024); ``channels`` also ``mono`` / ``stereo``), one flag (``silent``), texts
(compared whole and ignoring case: ``format=WAV`` is ``format=wav``) and lists (``keywords``, ``tags``: ``has``
compares an element whole, ignoring case). A clip without a facet (an index built before facets, a file that
does not say, a loudness too short to measure) fails every test of it, ``!=`` and ``in`` included; ``not``
negates the test, so ``not duration<1`` keeps a clip whose duration is unknown.

A malformed filter, an unknown field, a value of the wrong kind or unit, or ``not`` with nothing after it is a
:class:`FilterError` naming the position (1-based character) and the field, listing the known fields.

A :class:`FacetTable` holds the facets of an index's clips as columns (read once per field, on first use), which
a :class:`Filter` evaluates to a row mask (:meth:`Filter.mask`); a Milvus target gets the same filter as its own
expression (:mod:`mlatr.search.milvus_filter`).
"""

from __future__ import annotations

import difflib
import math
import re
import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

from mlatr.data.file_metadata import TAG_FACETS
from mlatr.errors import MlatrError
from mlatr.search.columns import every_value, in_rows_files, rows_matching

#: Longest filter text, and deepest nesting of parentheses and ``not``.
MAX_FILTER_CHARS = 2000
MAX_DEPTH = 32


@dataclass(frozen=True)
class Field:
    """A facet a filter can test: ``kind`` number | flag | text | list; a number's ``unit`` (the stored one) and
    ``units`` (a written unit, lower case -> its factor to the stored unit), ``words`` (a word standing for a
    number: ``mono``); ``about`` says what it is."""

    name: str
    kind: str
    about: str
    unit: str = ""
    units: dict[str, float] = field(default_factory=dict)
    words: dict[str, float] = field(default_factory=dict)


_SECONDS = {"s": 1.0, "sec": 1.0, "secs": 1.0, "second": 1.0, "seconds": 1.0, "ms": 1e-3, "min": 60.0,
            "mins": 60.0, "minute": 60.0, "minutes": 60.0, "h": 3600.0}
_BYTES = {"b": 1.0, "kb": 1e3, "mb": 1e6, "gb": 1e9, "kib": 1024.0, "mib": 1024.0 ** 2, "gib": 1024.0 ** 3}
_TEXTS = {"format": "the container: wav, flac, ogg, mp3, aiff ...", "codec": "pcm_16, pcm_24, float, vorbis, mp3 ...",
          "folder": "the clip's folder under the library root ('' at the top)",
          "library": "the first folder under the library root", "ucs_cat_id": "UCS CatID (DOORWood)",
          "ucs_category": "UCS category (DOORS)", "ucs_subcategory": "UCS subcategory (WOOD)",
          "ucs_fx_name": "UCS FXName", "ucs_creator": "UCS CreatorID", "ucs_source": "UCS SourceID",
          "ucs_user_category": "UCS UserCategory", "ucs_user_data": "UCS UserData"}

#: The facets a filter can test, by name (:mod:`mlatr.data.file_metadata` writes them).
FIELDS: dict[str, Field] = {f.name: f for f in (
    Field("duration", "number", "length", "s", _SECONDS),
    Field("sample_rate", "number", "sample rate", "Hz", {"hz": 1.0, "khz": 1e3, "k": 1e3}),
    Field("bit_depth", "number", "bits per sample (none for compressed audio)", "bits", {"bit": 1.0, "bits": 1.0}),
    Field("channels", "number", "channel count", "", {}, {"mono": 1.0, "stereo": 2.0}),
    Field("file_size", "number", "the file's size", "bytes", _BYTES),
    Field("loudness_lufs", "number", "integrated loudness (BS.1770)", "LUFS", {"lufs": 1.0, "lu": 1.0}),
    Field("true_peak_dbtp", "number", "true peak", "dBTP", {"dbtp": 1.0, "db": 1.0}),
    Field("peak_dbfs", "number", "sample peak", "dBFS", {"dbfs": 1.0, "db": 1.0}),
    Field("silent", "flag", "silent or near-silent (no 400 ms block above -70 LUFS, or a peak below -60 dBFS)"),
    *(Field(name, "text", about) for name, about in _TEXTS.items()),
    *(Field(name, "text", "from the file's tags") for name in TAG_FACETS),
    Field("keywords", "list", "keyword and genre tags, UCS category and subcategory (lower case)"),
    Field("tags", "list", "the tag families found (bext, ixml, id3, vorbis ...)"),
)}

#: Comparison operators as written -> as tested.
_OPS = {"=": "=", "==": "=", "!=": "!=", "<": "<", "<=": "<=", ">": ">", ">=": ">="}
_NUMBER = re.compile(r"([+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?)([^\W\d][\w]*)?$")
_TOKEN = re.compile(r"""\s*(?:(?P<punct>&&|\|\||[(),])|(?P<op>==|!=|<=|>=|[=<>!])|(?P<quote>["'])|"""
                    r"""(?P<word>(?:[^\s()<>=!,"'&|]|&(?!&)|\|(?!\|))+))""")
_WORDS = ("and", "or", "not", "in", "has")


class FilterError(MlatrError):
    """A filter that cannot be read: ``where: position N (TOKEN): message``."""

    def __init__(self, message: str, position: int | None = None, token: str | None = None):
        where = "" if position is None else f"position {position}" + (f" ({token!r})" if token else "") + ": "
        self.position = position
        super().__init__(f"where: {where}{message}")


def _known() -> str:
    return "known fields: " + ", ".join(FIELDS)


@dataclass(frozen=True)
class _Token:
    kind: str  # punct | op | string | word | end
    text: str
    pos: int  # 1-based

    def word(self) -> str | None:
        """The token as a reserved word (lower case), or None."""
        return self.text.lower() if self.kind == "word" and self.text.lower() in _WORDS else None


def _tokens(text: str) -> list[_Token]:
    out, i = [], 0
    while i < len(text):
        m = _TOKEN.match(text, i)
        if m is None:
            if not text[i:].strip():
                break
            j = i + len(text[i:]) - len(text[i:].lstrip())
            raise FilterError(f"unexpected character {text[j]!r}", j + 1)
        kind = m.lastgroup
        start = m.start(kind)
        if kind == "quote":
            value, i = _quoted(text, start)
            out.append(_Token("string", value, start + 1))
            continue
        out.append(_Token(kind, m.group(kind), start + 1))
        i = m.end()
    out.append(_Token("end", "", len(text) + 1))
    return out


def _quoted(text: str, start: int) -> tuple[str, int]:
    """The text of the quoted string opening at ``start`` (backslash escapes its next character) and the
    position after it."""
    quote, out, i = text[start], [], start + 1
    while i < len(text):
        ch = text[i]
        if ch == "\\" and i + 1 < len(text):
            out.append(text[i + 1])
            i += 2
        elif ch == quote:
            return "".join(out), i + 1
        else:
            out.append(ch)
            i += 1
    raise FilterError(f"a quoted text opened here is not closed (add a {quote})", start + 1)


# ---- the checked filter ---------------------------------------------------------------------------------------
class Filter:
    """A checked filter: a node of the parsed expression (:class:`FieldTest`, :class:`Not`, :class:`And`,
    :class:`Or`). ``str()`` writes it back in the language, canonically (a cache's key)."""

    def mask(self, table: FacetTable) -> np.ndarray:
        """``[N]`` bool: the clips of ``table`` it allows."""
        raise NotImplementedError

    def fields(self) -> set[str]:
        """The fields it tests."""
        raise NotImplementedError


@dataclass(frozen=True)
class FieldTest(Filter):
    """One test of one field: ``op`` = | != | < | <= | > | >= | in | has | is (a flag is true); ``values``:
    numbers (in the stored unit), booleans or texts (folded to compare without case)."""

    field: str
    op: str
    values: tuple

    def fields(self) -> set[str]:
        return {self.field}

    def mask(self, table: FacetTable) -> np.ndarray:
        kind = FIELDS[self.field].kind
        if kind == "list":
            return table.holders(self.field, self.values[0])
        if kind == "flag":
            want = 1 if self.op == "is" else int(bool(self.values[0]))
            want = want if self.op in ("is", "=") else 1 - want
            if want == 1:  # the rows where it is true: found without reading every row where rows files hold them
                return table.true_rows(self.field)
            return table.flags(self.field) == 0  # -1 missing, 0, 1
        if kind == "number":
            col = table.numbers(self.field)  # NaN: missing
            present = ~np.isnan(col)
            v = self.values
            with np.errstate(invalid="ignore"):
                if self.op == "in":
                    return np.isin(col, np.asarray(v, np.float64))
                test = {"=": col == v[0], "!=": col != v[0], "<": col < v[0], "<=": col <= v[0], ">": col > v[0],
                        ">=": col >= v[0]}[self.op]
            return test & present
        codes, vocab = table.texts(self.field)  # -1: missing
        wanted = [vocab[v] for v in self.values if v in vocab]
        if self.op == "!=":
            return (codes >= 0) & ~np.isin(codes, wanted)
        return np.isin(codes, wanted)

    def __str__(self) -> str:
        if self.op == "is":
            return self.field
        if self.op == "in":
            return f"{self.field} in ({', '.join(_literal(v) for v in self.values)})"
        op = " has " if self.op == "has" else self.op
        return f"{self.field}{op}{_literal(self.values[0])}"


@dataclass(frozen=True)
class Not(Filter):
    inner: Filter

    def fields(self) -> set[str]:
        return self.inner.fields()

    def mask(self, table: FacetTable) -> np.ndarray:
        return ~self.inner.mask(table)

    def __str__(self) -> str:
        return f"not {_wrapped(self.inner)}"


@dataclass(frozen=True)
class And(Filter):
    parts: tuple[Filter, ...]

    def fields(self) -> set[str]:
        return set().union(*(p.fields() for p in self.parts))

    def mask(self, table: FacetTable) -> np.ndarray:
        out = self.parts[0].mask(table)
        for p in self.parts[1:]:
            out = out & p.mask(table)
        return out

    def __str__(self) -> str:
        return " and ".join(_wrapped(p) for p in self.parts)


@dataclass(frozen=True)
class Or(Filter):
    parts: tuple[Filter, ...]

    def fields(self) -> set[str]:
        return set().union(*(p.fields() for p in self.parts))

    def mask(self, table: FacetTable) -> np.ndarray:
        out = self.parts[0].mask(table)
        for p in self.parts[1:]:
            out = out | p.mask(table)
        return out

    def __str__(self) -> str:
        return " or ".join(_wrapped(p) for p in self.parts)


def _wrapped(node: Filter) -> str:
    return f"({node})" if isinstance(node, (And, Or)) else str(node)


def _literal(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(int(value)) if value.is_integer() and abs(value) < 1e15 else repr(value)
    return '"' + str(value).replace("\\", "\\\\").replace('"', '\\"') + '"'


#: The test a text query adds unless silence is asked for (:func:`without_silence`).
NOT_SILENT = Not(FieldTest("silent", "is", (True,)))


def both(a: Filter | None, b: Filter | None) -> Filter | None:
    """``a and b`` (either may be None: no filter)."""
    if a is None or b is None:
        return a if b is None else b
    return And((*(a.parts if isinstance(a, And) else (a,)), *(b.parts if isinstance(b, And) else (b,))))


def without_silence(where: Filter | None, include_silent: bool) -> Filter | None:
    """The filter a text query ranks with: ``where`` and ``not silent``, unless ``include_silent`` or ``where``
    tests ``silent`` itself (``where="silent"`` asks for silent clips)."""
    if include_silent or (where is not None and "silent" in where.fields()):
        return where
    return both(where, NOT_SILENT)


# ---- parsing --------------------------------------------------------------------------------------------------
def parse_filter(text: str | Filter | None) -> Filter | None:
    """The checked :class:`Filter` of ``text`` (None or a blank text: no filter; a :class:`Filter`: itself); a
    :class:`FilterError` naming the position and the field otherwise (module docstring)."""
    if text is None or isinstance(text, Filter):
        return text
    if not isinstance(text, str):
        raise FilterError(f"expected a text, got {type(text).__name__}")
    if len(text) > MAX_FILTER_CHARS:
        raise FilterError(f"{len(text)} characters, at most {MAX_FILTER_CHARS}")
    if not text.strip():
        return None
    parser = _Parser(_tokens(text))
    node = parser.either_or(0)
    tok = parser.peek()
    if tok.kind != "end":
        hint = " (join tests with and / or)" if tok.kind in ("word", "string") else ""
        raise FilterError(f"unexpected {tok.text!r}{hint}", tok.pos, tok.text)
    return node


class _Parser:
    def __init__(self, tokens: list[_Token]):
        self.tokens, self.i = tokens, 0

    def peek(self) -> _Token:
        return self.tokens[self.i]

    def take(self) -> _Token:
        tok = self.tokens[self.i]
        self.i += 1
        return tok

    def either_or(self, depth: int) -> Filter:
        parts = [self.both_and(depth)]
        while self.peek().word() == "or" or self.peek().text == "||":
            self.take()
            parts.append(self.both_and(depth))
        return parts[0] if len(parts) == 1 else Or(tuple(parts))

    def both_and(self, depth: int) -> Filter:
        parts = [self.one(depth)]
        while self.peek().word() == "and" or self.peek().text == "&&":
            self.take()
            parts.append(self.one(depth))
        return parts[0] if len(parts) == 1 else And(tuple(parts))

    def one(self, depth: int) -> Filter:
        if depth > MAX_DEPTH:
            tok = self.peek()
            raise FilterError(f"nested deeper than {MAX_DEPTH} levels", tok.pos)
        tok = self.peek()
        if tok.word() == "not" or (tok.kind == "op" and tok.text == "!"):
            self.take()
            after = self.peek()
            if after.kind == "end" or after.word() in ("and", "or") or after.text in (")", "&&", "||"):
                raise FilterError(f"{tok.text!r} needs a test after it (not silent, not format=mp3)", tok.pos,
                                  tok.text)
            return Not(self.one(depth + 1))
        if tok.text == "(" and tok.kind == "punct":
            self.take()
            inner = self.either_or(depth + 1)
            close = self.take()
            if close.text != ")" or close.kind != "punct":
                raise FilterError(f"expected ')' to close the '(' at position {tok.pos}, found "
                                  f"{close.text or 'the end'!r}", close.pos, close.text or None)
            return inner
        return self.test()

    def test(self) -> FieldTest:
        tok = self.take()
        if tok.kind == "end":
            raise FilterError("expected a test (a field and a comparison), found the end", tok.pos)
        if tok.kind != "word" or tok.word() is not None:
            raise FilterError(f"expected a field name, found {tok.text!r}; {_known()}", tok.pos, tok.text)
        name = tok.text.lower()
        spec = FIELDS.get(name)
        if spec is None:
            close = difflib.get_close_matches(name, FIELDS, n=1)
            maybe = f" (did you mean {close[0]}?)" if close else ""
            raise FilterError(f"unknown field {tok.text!r}{maybe}; {_known()}", tok.pos, tok.text)
        nxt = self.peek()
        negated = False
        if nxt.word() == "not" and self.tokens[self.i + 1].word() == "in":
            self.take()
            negated, nxt = True, self.peek()
        if nxt.kind == "op" and nxt.text in _OPS:
            self.take()
            op = _OPS[nxt.text]
            value = self.value(spec, op, nxt)
            return FieldTest(name, op, (value,))
        if nxt.word() == "in":
            self.take()
            values = self.value_list(spec, nxt)
            node = FieldTest(name, "in", tuple(values))
            return Not(node) if negated else node  # type: ignore[return-value]
        if nxt.word() == "has":
            self.take()
            if spec.kind != "list":
                raise FilterError(f"{name} is {_kind_words(spec)}: 'has' tests a list (keywords has door); "
                                  f"compare {name} with = or in", nxt.pos, nxt.text)
            return FieldTest(name, "has", (self.value(spec, "has", nxt),))
        if spec.kind == "flag":
            return FieldTest(name, "is", (True,))
        example = {"number": f"{name}<1", "text": f"{name}=...", "list": f"{name} has ..."}[spec.kind]
        raise FilterError(f"{name} is {_kind_words(spec)}: compare it ({example})", tok.pos, tok.text)

    def value_list(self, spec: Field, at: _Token) -> list:
        open_ = self.take()
        if open_.text != "(" or open_.kind != "punct":
            raise FilterError("'in' takes a list in parentheses: format in (wav, flac)", open_.pos,
                              open_.text or None)
        values = [self.value(spec, "in", at)]
        while self.peek().text == "," and self.peek().kind == "punct":
            self.take()
            values.append(self.value(spec, "in", at))
        close = self.take()
        if close.text != ")" or close.kind != "punct":
            raise FilterError(f"expected ',' or ')' in the list opened at position {open_.pos}, found "
                              f"{close.text or 'the end'!r}", close.pos, close.text or None)
        return values

    def value(self, spec: Field, op: str, at: _Token):
        tok = self.take()
        if tok.kind not in ("word", "string"):
            raise FilterError(f"expected a value for {spec.name}, found {tok.text or 'the end'!r}", tok.pos,
                              tok.text or None)
        if spec.kind in ("text", "list"):
            if op in ("<", "<=", ">", ">="):
                raise FilterError(f"{spec.name} is {_kind_words(spec)}: it takes =, != or in, not {at.text}",
                                  at.pos, at.text)
            if spec.kind == "list" and op != "has":
                raise FilterError(f"{spec.name} is a list: test it with has ({spec.name} has {tok.text})", at.pos,
                                  at.text)
            return fold(tok.text)
        if spec.kind == "flag":
            word = tok.text.lower() if tok.kind == "word" else None
            if word not in ("true", "false") or op not in ("=", "!="):
                raise FilterError(f"{spec.name} is a flag: write {spec.name}, not {spec.name}, {spec.name}=true or "
                                  f"{spec.name}=false", tok.pos, tok.text)
            return word == "true"
        return self.number(spec, tok, op, at)

    def number(self, spec: Field, tok: _Token, op: str, at: _Token) -> float:
        if op == "has":
            raise FilterError(f"{spec.name} is a number: compare it (<, =, in)", at.pos, at.text)
        text = tok.text.lower()
        if tok.kind == "word" and text in spec.words:
            return spec.words[text]
        m = _NUMBER.match(tok.text) if tok.kind == "word" else None
        if m is None:
            words = f" or {', '.join(spec.words)}" if spec.words else ""
            raise FilterError(f"{spec.name} is a number{_unit_words(spec)}: {tok.text!r} is not one{words}",
                              tok.pos, tok.text)
        value, unit = float(m.group(1)), (m.group(2) or "").lower()
        after = self.peek()
        if not unit and after.kind == "word" and after.text.lower() in spec.units:  # a unit a space apart: 500 ms
            unit = self.take().text.lower()
        if unit:
            if unit not in spec.units:
                known = f"one of {', '.join(spec.units)} (stored in {spec.unit})" if spec.units else "none"
                raise FilterError(f"{spec.name}: unknown unit {unit!r}; its units: {known}", tok.pos, tok.text)
            value *= spec.units[unit]
        if not math.isfinite(value):
            raise FilterError(f"{spec.name}: {tok.text!r} is not a finite number", tok.pos, tok.text)
        return value


def _kind_words(spec: Field) -> str:
    return {"number": "a number", "flag": "a flag (true or false)", "text": "a text", "list": "a list"}[spec.kind]


def _unit_words(spec: Field) -> str:
    if not spec.units:
        return ""
    return f" (in {spec.unit}; units {', '.join(spec.units)})"


def filter_mask(where: Filter, table: FacetTable) -> np.ndarray:
    """``[N]`` bool: the clips of ``table`` that ``where`` allows (its fields read in one pass; a flag tested for
    true alone, as the default ``not silent``, found by :meth:`FacetTable.true_rows`)."""
    table.prepare(sorted(f for f in where.fields() if not (table.scans and _flag_true_only(where, f))))
    return where.mask(table)


def _flag_true_only(where: Filter, name: str) -> bool:
    """Whether ``where`` tests flag ``name`` only for being true (its rows found without reading every row)."""
    if FIELDS[name].kind != "flag":
        return False
    stack = [where]
    while stack:
        node = stack.pop()
        if isinstance(node, Not):
            stack.append(node.inner)
        elif isinstance(node, (And, Or)):
            stack.extend(node.parts)
        elif isinstance(node, FieldTest) and node.field == name:
            want = 1 if node.op == "is" else int(bool(node.values[0]))
            if (want if node.op in ("is", "=") else 1 - want) != 1:
                return False
    return True


def fold(text: str) -> str:
    """A text as filters compare it: NFKC, without case (``WAV`` is ``wav``)."""
    return unicodedata.normalize("NFKC", text).casefold()


# ---- the facets as columns ------------------------------------------------------------------------------------
class FacetTable:
    """The facets of an index's clips (``values[i]``: clip row ``i``'s facet object, or None) as columns, each read
    on first use in one pass over the rows: numbers as ``float64`` (NaN: missing or not a number), flags as
    ``int8`` (-1 missing), texts as codes into their folded distinct values (-1 missing), lists as the rows holding
    each folded element. A value of the wrong JSON type counts as missing."""

    def __init__(self, values: Sequence):
        self.values = values
        self.n = len(values)
        self._raw: dict[str, list] = {}
        self._columns: dict[str, object] = {}
        #: read from rows files: a flag's true rows are found by a scan (:meth:`true_rows`)
        self.scans = in_rows_files(values)

    def prepare(self, names: Iterable[str]) -> None:
        """Read the values of the fields ``names`` not read yet, in one pass over the rows (a folder index reads
        each row from disk)."""
        todo = [name for name in names if name not in self._raw]
        if todo:
            got: dict[str, list] = {name: [] for name in todo}
            for v in every_value(self.values):
                for name in todo:
                    got[name].append(v.get(name) if isinstance(v, dict) else None)
            self._raw.update(got)

    def _field_values(self, name: str) -> list:
        self.prepare([name])
        return self._raw[name]

    def numbers(self, name: str) -> np.ndarray:
        if name not in self._columns:
            self._columns[name] = np.asarray(
                [v if isinstance(v, (int, float)) and not isinstance(v, bool) else np.nan
                 for v in self._field_values(name)], np.float64).reshape(-1)
        return self._columns[name]

    def flags(self, name: str) -> np.ndarray:
        if name not in self._columns:
            self._columns[name] = np.asarray([int(v) if isinstance(v, bool) else -1 for v in self._field_values(name)],
                                             np.int8).reshape(-1)
        return self._columns[name]

    def true_rows(self, name: str) -> np.ndarray:
        """``[N]`` bool: the rows whose flag ``name`` is true. Where the facets are read from an index folder's rows
        files, only the rows whose line holds ``"NAME": true`` are parsed (a JSON text escapes its quotes, so every
        such row holds it): the default ``not silent`` of a text query costs a scan of the files, not a parse."""
        key = f"{name}/true"
        if key not in self._columns:
            found = None
            if self.scans and name not in self._raw:
                found = rows_matching(self.values, re.compile(b'"' + name.encode() + rb'"\s*:\s*true'))
            if found is None:
                self._columns[key] = self.flags(name) == 1
            else:
                mask = np.zeros(self.n, bool)
                for row in found.tolist():
                    v = self.values[row]
                    mask[row] = isinstance(v, dict) and v.get(name) is True
                self._columns[key] = mask
        return self._columns[key]

    def texts(self, name: str) -> tuple[np.ndarray, dict[str, int]]:
        """``(codes [N], vocab)``: each row's code in ``vocab`` (folded text -> code), -1 where missing."""
        if name not in self._columns:
            vocab: dict[str, int] = {}
            codes = np.asarray([vocab.setdefault(fold(v), len(vocab)) if isinstance(v, str) else -1
                                for v in self._field_values(name)], np.int64).reshape(-1)
            self._columns[name] = (codes, vocab)
        return self._columns[name]

    def stored(self, name: str) -> dict[str, list[str]]:
        """Each folded value of text or list field ``name`` -> the values as stored that fold to it (what a
        database compares case by case)."""
        key = f"{name}/stored"
        if key not in self._columns:
            out: dict[str, list[str]] = {}
            for v in self._field_values(name):
                for item in (v if isinstance(v, list) else [v]):
                    if isinstance(item, str):
                        seen = out.setdefault(fold(item), [])
                        if item not in seen:
                            seen.append(item)
            self._columns[key] = out
        return self._columns[key]

    def holders(self, name: str, value: str) -> np.ndarray:
        """``[N]`` bool: the rows whose list ``name`` holds ``value`` (folded)."""
        key = f"{name}/holders"
        if key not in self._columns:
            rows: dict[str, list[int]] = {}
            for i, v in enumerate(self._field_values(name)):
                if isinstance(v, list):
                    for item in {fold(x) for x in v if isinstance(x, str)}:
                        rows.setdefault(item, []).append(i)
            self._columns[key] = {k: np.asarray(r, np.int64) for k, r in rows.items()}
        out = np.zeros(self.n, bool)
        out[self._columns[key].get(value, np.zeros(0, np.int64))] = True
        return out

    def lists(self, name: str) -> list[tuple[int, str]]:
        """``(row, element)`` of every text element of list field ``name``, row after row (as stored)."""
        return [(i, x) for i, v in enumerate(self._field_values(name)) if isinstance(v, list)
                for x in v if isinstance(x, str)]
