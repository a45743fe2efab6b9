"""A :class:`~mlatr.search.filters.Filter` as a Milvus boolean expression over a clip row's ``info`` JSON field.

A Milvus target keeps a clip's facets in ``info["facets"]`` (:mod:`mlatr.search.milvus`); its vector search takes
the expression as ``filter=``, so the window a search returns is found among the allowed clips. The expression is
built from the parsed filter, never from the user's text: field names come from
:data:`~mlatr.search.filters.FIELDS`, numbers are written by Python, and texts are quoted by :func:`string_literal`
(a backslash before ``\\`` and ``"``, a newline, a carriage return and a tab written ``\\n`` ``\\r`` ``\\t``, which
Milvus refuses raw inside a literal; every other character as it is).

Two differences from Milvus's own reading are bridged here, so that the expression allows exactly the clips
:meth:`Filter.mask <mlatr.search.filters.Filter.mask>` allows:

- **case**: a filter compares texts ignoring case (``format=WAV``), Milvus compares them exactly; a text test
  becomes a test of each value stored in the library that folds to the one asked
  (:meth:`~mlatr.search.filters.FacetTable.stored`: the facets a Milvus index loads with its rows);
- **missing facets**: Milvus's logic has a third value for a missing key (``not (x < 1)`` leaves out a clip
  without ``x``), a filter's has two (``not duration<1`` keeps it). ``not`` is pushed down to the tests (De
  Morgan) and a negated test written ``(not (exists x) or x >= 1)``. A JSON null is missing in both.

A value of another JSON type than the field's (a duration written as a text: never by mlatr) is missing for the
filter but takes Milvus's third value under ``not``: the window search may then leave such a clip out, the
ranking itself still tests each candidate with the filter.
"""

from __future__ import annotations

from mlatr.search.filters import FIELDS, And, FacetTable, FieldTest, Filter, Not, Or

#: Where a clip row keeps its facets.
FACETS = 'info["facets"]'
#: Milvus's complement of each comparison, for a negated test of a present value.
_COMPLEMENT = {"<": ">=", "<=": ">", ">": "<=", ">=": "<", "=": "!=", "!=": "=="}
_MILVUS_OP = {"<": "<", "<=": "<=", ">": ">", ">=": ">=", "=": "==", "!=": "!="}


#: The escapes a Milvus filter's string literal takes (tried on milvus-lite): ``\\uXXXX``, ``\\xNN`` and octal are
#: refused ("unknown escape sequence"), and a newline, return or tab raw inside a literal too.
_LITERAL_ESCAPES = str.maketrans({"\\": "\\\\", '"': '\\"', "\n": "\\n", "\r": "\\r", "\t": "\\t"})


def string_literal(value: str) -> str:
    """``value`` as a string literal of a Milvus filter expression: quote and backslash escaped (a clip id or a
    facet value cannot end the string and add a condition), newline, return and tab written ``\\n`` ``\\r``
    ``\\t``, other characters as they are (``json.dumps`` writes ``café`` as ``caf\\u00e9``, which Milvus
    refuses)."""
    return '"' + value.translate(_LITERAL_ESCAPES) + '"'


def string_list(values) -> str:
    """A Milvus list literal of texts: ``["a", "b"]``."""
    return "[" + ", ".join(string_literal(v) for v in values) + "]"


def in_filter(key: str, values) -> str:
    """The filter expression ``key in ["v1", ...]`` of string ``values``."""
    return f"{key} in {string_list(values)}"


def _number(value: float) -> str:
    return repr(int(value)) if value.is_integer() and abs(value) < 1e15 else repr(float(value))


def expression(where: Filter, table: FacetTable) -> str | bool:
    """The Milvus expression of ``where`` over the library whose facets ``table`` holds; True (every clip) or
    False (none) where it folds to a constant."""
    return _node(where, table, negate=False)


def _node(node: Filter, table: FacetTable, negate: bool) -> str | bool:
    if isinstance(node, Not):
        return _node(node.inner, table, not negate)
    if isinstance(node, (And, Or)):
        conjunction = isinstance(node, And) != negate  # De Morgan
        parts = [_node(p, table, negate) for p in node.parts]
        return _join(parts, "and" if conjunction else "or")
    assert isinstance(node, FieldTest)
    return _test(node, table, negate)


def _join(parts: list[str | bool], word: str) -> str | bool:
    absorbing, neutral = (False, True) if word == "and" else (True, False)
    if any(p is absorbing for p in parts):
        return absorbing
    kept = [p for p in parts if p is not neutral]
    if not kept:
        return neutral
    return kept[0] if len(kept) == 1 else "(" + f" {word} ".join(kept) + ")"


def _test(t: FieldTest, table: FacetTable, negate: bool) -> str | bool:
    path = f'{FACETS}["{t.field}"]'  # a name of FIELDS: letters and _
    assert t.field in FIELDS
    kind = FIELDS[t.field].kind
    missing = f"not (exists {path})"
    if kind == "list":
        found = table.stored(t.field).get(t.values[0], [])
        if not found:
            return negate
        test = f"json_contains_any({path}, {string_list(found)})"
        return f"not ({test})" if negate else test  # false for a missing list: its negation true
    if kind == "flag":
        want = True if t.op == "is" else bool(t.values[0]) == (t.op == "=")
        value = "true" if want != negate else "false"
        return f"({missing} or {path} == {value})" if negate else f"{path} == {value}"
    if kind == "number":
        if t.op == "in":
            tests = [f"{path} {'!=' if negate else '=='} {_number(v)}" for v in t.values]
            either = _join(tests, "and" if negate else "or")
        else:
            either = f"{path} {_COMPLEMENT[t.op] if negate else _MILVUS_OP[t.op]} {_number(t.values[0])}"
        return f"({missing} or {either})" if negate else either
    # a text: the stored values that fold to those asked
    stored = table.stored(t.field)
    found = [s for v in t.values for s in stored.get(v, [])]
    equal = _join([f"{path} == {string_literal(s)}" for s in found], "or") if found else False
    if t.op == "!=":  # present and none of them
        differ = _join([f"{path} != {string_literal(s)}" for s in found], "and") if found else f"exists {path}"
        if not negate:
            return differ
        return _join([missing, equal], "or")
    if not negate:
        return equal
    return _join([missing, _join([f"{path} != {string_literal(s)}" for s in found], "and") if found else True], "or")
