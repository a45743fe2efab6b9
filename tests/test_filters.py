"""The filter language over a clip's facets (issue 46, item 2): parsed once into a checked predicate; every test
against an independent evaluation of the documented semantics over the facet objects themselves; bad input a clear
error naming the position and the field (and never another exception: a property test); the same filter as a Milvus
expression allowing exactly the same clips (milvus-lite), its quoted values never breaking out."""

from __future__ import annotations

import importlib.util
import inspect
import math
import re
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mlatr.data import file_metadata as fm
from mlatr.data.file_metadata import TAG_FACETS
from mlatr.errors import MlatrError
from mlatr.search.filters import (
    FIELDS,
    And,
    FacetTable,
    FieldTest,
    FilterError,
    Not,
    Or,
    filter_mask,
    fold,
    parse_filter,
    without_silence,
)
from mlatr.search.milvus_filter import expression

#: Facet objects of a small library: every kind of field, missing values, null facets, case variants.
FACETS = [
    {"duration": 0.5, "sample_rate": 48000, "channels": 1, "format": "wav", "silent": False, "library": "Castle",
     "keywords": ["door", "Wood"], "loudness_lufs": -23.5, "file_size": 1_500_000, "ucs_category": "DOORS"},
    {"duration": 2.0, "sample_rate": 44100, "channels": 2, "format": "WAV", "silent": True, "library": "castle",
     "keywords": [], "loudness_lufs": None, "file_size": 900},
    None,
    {},
    {"duration": 12.0, "sample_rate": 96000, "channels": 2, "format": "flac", "silent": False, "library": "wesnoth",
     "keywords": ["rain"], "loudness_lufs": -35.0, "bit_depth": 24, "title": 'fla"c\\'},
    {"duration": 1.0, "channels": 1, "format": "mp3", "library": "", "keywords": ["DOOR", "metal"], "bit_depth": None,
     "title": "it's"},
    {"duration": "1.0", "channels": True, "format": 3, "keywords": "door"},  # wrong JSON types: missing
]

ROOT = Path(__file__).resolve().parents[1]


def _number(f, name):
    v = f.get(name) if isinstance(f, dict) else None
    return v if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _text(f, name):
    v = f.get(name) if isinstance(f, dict) else None
    return fold(v) if isinstance(v, str) else None


def _list(f, name):
    v = f.get(name) if isinstance(f, dict) else None
    return {fold(x) for x in v if isinstance(x, str)} if isinstance(v, list) else set()


def _flag(f, name):
    v = f.get(name) if isinstance(f, dict) else None
    return v if isinstance(v, bool) else None


#: filter -> the same test written in Python over one facet object (the documented semantics, apart from the code).
CASES = {
    "duration<1": lambda f: (d := _number(f, "duration")) is not None and d < 1,
    "duration < 1.5s and channels=1": lambda f: (_number(f, "duration") or 99) < 1.5 and _number(f, "channels") == 1,
    "duration<=500ms": lambda f: (d := _number(f, "duration")) is not None and d <= 0.5,
    "duration>=0.02min": lambda f: (d := _number(f, "duration")) is not None and d >= 1.2,
    "not duration<1": lambda f: not ((d := _number(f, "duration")) is not None and d < 1),
    "duration!=2": lambda f: (d := _number(f, "duration")) is not None and d != 2,
    "sample_rate >= 48k": lambda f: (r := _number(f, "sample_rate")) is not None and r >= 48000,
    "sample_rate in (44.1khz, 96000hz)": lambda f: _number(f, "sample_rate") in (44100, 96000),
    "channels=stereo": lambda f: _number(f, "channels") == 2,
    "channels = MONO or channels>2": lambda f: _number(f, "channels") == 1,
    "file_size < 1MB": lambda f: (s := _number(f, "file_size")) is not None and s < 1e6,
    "file_size > 1kib": lambda f: (s := _number(f, "file_size")) is not None and s > 1024,
    "loudness_lufs>-30": lambda f: (v := _number(f, "loudness_lufs")) is not None and v > -30,
    "not loudness_lufs>-30lufs": lambda f: not ((v := _number(f, "loudness_lufs")) is not None and v > -30),
    "bit_depth = 24bit": lambda f: _number(f, "bit_depth") == 24,
    "format=WAV": lambda f: _text(f, "format") == "wav",
    "format in (wav, flac)": lambda f: _text(f, "format") in ("wav", "flac"),
    "format not in (wav, flac)": lambda f: _text(f, "format") not in ("wav", "flac"),
    "format != mp3": lambda f: _text(f, "format") not in (None, "mp3"),
    "library=castle": lambda f: _text(f, "library") == "castle",
    "library = ''": lambda f: _text(f, "library") == "",
    "ucs_category=doors": lambda f: _text(f, "ucs_category") == "doors",
    'title = "fla\\"c\\\\"': lambda f: _text(f, "title") == 'fla"c\\',
    "title='it\\'s'": lambda f: _text(f, "title") == "it's",
    "keywords has door": lambda f: "door" in _list(f, "keywords"),
    "not keywords has door": lambda f: "door" not in _list(f, "keywords"),
    "keywords has WOOD or keywords has rain": lambda f: bool({"wood", "rain"} & _list(f, "keywords")),
    "silent": lambda f: _flag(f, "silent") is True,
    "not silent": lambda f: _flag(f, "silent") is not True,
    "silent=false": lambda f: _flag(f, "silent") is False,
    "silent != false": lambda f: _flag(f, "silent") is True,
    "! (duration > 1 || format=wav) && not silent": lambda f: not (
        ((d := _number(f, "duration")) is not None and d > 1) or _text(f, "format") == "wav")
        and _flag(f, "silent") is not True,
    "(library=castle or library=wesnoth) and duration<5": lambda f: _text(f, "library") in ("castle", "wesnoth")
        and (d := _number(f, "duration")) is not None and d < 5,
    "NOT (Format = wav AND Duration < 1)": lambda f: not (_text(f, "format") == "wav"
                                                         and (d := _number(f, "duration")) is not None and d < 1),
}


@pytest.mark.parametrize("text", list(CASES))
def test_each_filter_allows_what_its_documented_meaning_allows(text):
    expected = np.asarray([CASES[text](f) for f in FACETS], bool)
    found = filter_mask(parse_filter(text), FacetTable(FACETS))
    assert found.tolist() == expected.tolist()
    assert parse_filter(str(parse_filter(text))) == parse_filter(text)  # written back canonically, read the same


BAD = {
    "chanels=1": ("position 1", "unknown field 'chanels'", "did you mean channels", "known fields: duration"),
    "duration<1 and": ("position 15", "expected a test"),
    "not": ("position 1", "'not' needs a test after it"),
    "not and duration<1": ("'not' needs a test",),
    "duration < fast": ("position 12", "duration is a number", "'fast' is not one"),
    "duration<3 hz": ("position 12", "unexpected", "join tests with and / or"),
    "duration<3hz": ("position 10", "duration: unknown unit 'hz'", "ms, min"),
    "format < wav": ("position 8", "format is a text", "not <"),
    "keywords=door": ("keywords is a list", "has"),
    "duration has 1": ("duration is a number", "'has' tests a list"),
    "duration": ("duration is a number: compare it",),
    "silent=maybe": ("silent is a flag",),
    "format in wav": ("'in' takes a list in parentheses",),
    "format in (wav flac)": ("expected ',' or ')'",),
    "(duration<1": ("expected ')'",),
    "duration<1)": ("unexpected ')'",),
    "title='open": ("position 7", "not closed"),
    "duration<1e999": ("not a finite number",),
    "= 3": ("expected a field name",),
    "a" * 2001: ("2001 characters",),
    "(" * 40 + "silent" + ")" * 40: ("nested deeper than 32",),
    "duration<1 ; drop": ("position 12", "unexpected ';'"),
}


@pytest.mark.parametrize("text", list(BAD), ids=lambda t: t[:30])
def test_a_bad_filter_is_a_clear_error_naming_the_position_and_the_field(text):
    with pytest.raises(FilterError) as exc:
        parse_filter(text)
    message = str(exc.value)
    assert message.startswith("where: ")
    for fragment in BAD[text]:
        assert fragment in message, (fragment, message)


@pytest.mark.parametrize("spaced,joined", [
    ("duration < 500 ms", "duration<500ms"), ("sample_rate >= 48 k", "sample_rate>=48k"),
    ("duration in (1 s, 2 min)", "duration in (1s, 2min)"),
    ("file_size < 2 MiB and channels = 1", "file_size<2mib and channels=1"),
])
def test_a_unit_may_stand_a_space_after_its_number(spaced, joined):
    assert parse_filter(spaced) == parse_filter(joined)
    assert str(parse_filter(spaced)) == {"duration<500ms": "duration<0.5", "sample_rate>=48k": "sample_rate>=48000",
                                         "duration in (1s, 2min)": "duration in (1, 120)",
                                         "file_size<2mib and channels=1": "file_size<2097152 and channels=1"}[joined]


def test_blank_and_none_are_no_filter_and_silence_is_added_unless_asked():
    assert parse_filter(None) is None and parse_filter("  ") is None
    assert str(without_silence(None, False)) == "not silent"
    assert without_silence(None, True) is None
    where = parse_filter("duration<1")
    assert str(without_silence(where, False)) == "duration<1 and not silent"
    assert without_silence(parse_filter("silent or duration<1"), False) == parse_filter("silent or duration<1")
    with pytest.raises(FilterError, match="expected a text"):
        parse_filter(3)


def test_the_fields_are_the_facets_file_metadata_writes():
    """Every facet key the metadata reader writes (read from its source: the technical facets' keywords, the keys of
    the path and UCS facets, the tag facets, the facets assigned by name) is a field, of its kind."""
    technical = inspect.getsource(fm.technical_facets)
    written = set(re.findall(r"\b([a-z_]+)=(?!=)", technical)) | set(re.findall(r'out\["(\w+)"\]', technical))
    for function in (fm.path_facets, fm._ucs_facets):
        written |= set(re.findall(r'"(\w+)":', inspect.getsource(function)))
        written |= set(re.findall(r'\("(\w+)", ucs\.', inspect.getsource(function)))
    written |= set(re.findall(r'facets\["(\w+)"\]', inspect.getsource(fm.describe))) | set(TAG_FACETS)
    assert {"duration", "silent", "file_size", "library", "ucs_category", "ucs_user_data", "keywords", "tags",
            "title"} <= written  # the reading above finds them
    assert written - set(FIELDS) == set()
    for name in ("duration", "sample_rate", "bit_depth", "channels", "file_size", "loudness_lufs", "true_peak_dbtp",
                 "peak_dbfs"):
        assert FIELDS[name].kind == "number"
    assert FIELDS["silent"].kind == "flag" and FIELDS["keywords"].kind == FIELDS["tags"].kind == "list"


# ---- properties --------------------------------------------------------------------------------------------------
_NUMBERS = [n for n, f in FIELDS.items() if f.kind == "number"]
_TEXTS = ["format", "library", "title"]
_VALUES = st.sampled_from(["wav", "WAV", "flac", "castle", "", "it's", 'fla"c\\', "door"])


def _tests():
    number = st.builds(lambda name, op, v: FieldTest(name, op, (float(v),)), st.sampled_from(_NUMBERS),
                       st.sampled_from(["=", "!=", "<", "<=", ">", ">="]), st.integers(-100, 100_000))
    text = st.builds(lambda name, op, v: FieldTest(name, op, (fold(v),)), st.sampled_from(_TEXTS),
                     st.sampled_from(["=", "!="]), _VALUES)
    within = st.builds(lambda name, vs: FieldTest(name, "in", tuple(fold(v) for v in vs)), st.sampled_from(_TEXTS),
                       st.lists(_VALUES, min_size=1, max_size=3))
    has = st.builds(lambda v: FieldTest("keywords", "has", (fold(v),)), _VALUES)
    flag = st.sampled_from([FieldTest("silent", "is", (True,)), FieldTest("silent", "=", (False,)),
                            FieldTest("silent", "!=", (True,))])
    return st.one_of(number, text, within, has, flag)


FILTERS = st.recursive(_tests(), lambda inner: st.one_of(
    st.builds(Not, inner), st.builds(lambda p: And(tuple(p)), st.lists(inner, min_size=2, max_size=3)),
    st.builds(lambda p: Or(tuple(p)), st.lists(inner, min_size=2, max_size=3))), max_leaves=8)


def _reference(node, f) -> bool:
    """The documented meaning of a filter node over one facet object, written apart from the code."""
    if isinstance(node, Not):
        return not _reference(node.inner, f)
    if isinstance(node, And):
        return all(_reference(p, f) for p in node.parts)
    if isinstance(node, Or):
        return any(_reference(p, f) for p in node.parts)
    kind = FIELDS[node.field].kind
    if kind == "flag":
        v = _flag(f, node.field)
        want = True if node.op == "is" else node.values[0] == (node.op == "=")
        return v is want
    if kind == "list":
        return node.values[0] in _list(f, node.field)
    v = _number(f, node.field) if kind == "number" else _text(f, node.field)
    if v is None:
        return False
    if node.op == "in":
        return v in node.values
    a = node.values[0]
    return {"=": v == a, "!=": v != a, "<": v < a, "<=": v <= a, ">": v > a, ">=": v >= a}[node.op]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(FILTERS)
def test_any_filter_written_out_reads_back_and_allows_what_its_meaning_allows(node):
    parsed = parse_filter(str(node))
    assert str(parsed) == str(node)
    expected = [_reference(node, f) for f in FACETS]
    assert filter_mask(parsed, FacetTable(FACETS)).tolist() == expected


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("duration<>=!()&|,'\"\\ andornotinhas0123.5msformatwavsilent_")),
               max_size=40) | st.text(max_size=40))
def test_any_text_is_a_filter_or_a_filter_error_never_a_crash(text):
    try:
        node = parse_filter(text)
    except FilterError as exc:
        assert str(exc).startswith("where: ")
        return
    if node is not None:
        filter_mask(node, FacetTable(FACETS))


def test_a_facet_table_reads_the_rows_once_per_set_of_fields():
    reads = []

    class Counting(list):
        def __getitem__(self, i):
            reads.append(i)
            return super().__getitem__(i)

        def __iter__(self):
            for i in range(len(self)):
                yield self[i]

    table = FacetTable(Counting(FACETS))
    filter_mask(parse_filter("duration<1 and format=wav and not silent"), table)
    assert len(reads) == len(FACETS)
    filter_mask(parse_filter("duration>3 or silent"), table)  # read already
    assert len(reads) == len(FACETS)
    assert math.isnan(table.numbers("duration")[2])


# ---- Milvus ----------------------------------------------------------------------------------------------------
HAS_MILVUS = bool(importlib.util.find_spec("pymilvus") and importlib.util.find_spec("milvus_lite"))
needs_milvus = pytest.mark.skipif(not HAS_MILVUS, reason="Milvus needs the milvus extra: pip install 'mlatr[milvus]'")


def _info_collection(db, name: str, infos: list[dict]):
    """A milvus-lite collection ``name`` in ``db`` holding rows ``r0, r1, ...`` with each of ``infos`` as their
    ``info`` JSON (the field a MilvusStorage filters on) and a 2-d stand-in vector; loaded for queries."""
    from pymilvus import DataType, MilvusClient

    mc = MilvusClient(str(db))
    schema = MilvusClient.create_schema(auto_id=False, enable_dynamic_field=False)
    schema.add_field("id", DataType.VARCHAR, is_primary=True, max_length=64)
    schema.add_field("info", DataType.JSON)
    schema.add_field("vector", DataType.FLOAT_VECTOR, dim=2)
    params = mc.prepare_index_params()
    params.add_index(field_name="vector", index_type="FLAT", metric_type="IP")
    mc.create_collection(name, schema=schema, index_params=params)
    mc.insert(name, [{"id": f"r{i}", "info": info, "vector": [1.0, 0.0]} for i, info in enumerate(infos)])
    mc.load_collection(name)
    return mc


@pytest.fixture(scope="module")
def facets_collection(tmp_path_factory):
    """A milvus-lite collection of the rows of :data:`FACETS` (``info["facets"]``, as an index keeps them), and a
    query function: the ids a filter expression selects."""
    mc = _info_collection(tmp_path_factory.mktemp("milvus") / "facets.db", "clips",
                          [{"facets": f} if i != 3 else {"captions": {}} for i, f in enumerate(FACETS)])

    def select(expr) -> list[bool]:
        if expr is True or expr is False:
            return [expr] * len(FACETS)
        ids = {r["id"] for r in mc.query("clips", filter=expr, output_fields=["id"], limit=100)}
        return [f"r{i}" in ids for i in range(len(FACETS))]

    return mc, select


WELL_TYPED = [f for f in FACETS[:-1]]  # Milvus's third value for a wrongly typed value: module docstring


@needs_milvus
@pytest.mark.parametrize("text", list(CASES))
def test_milvus_expression_allows_the_clips_the_filter_allows(text, facets_collection):
    _mc, select = facets_collection
    table = FacetTable(FACETS)
    where = parse_filter(text)
    found = select(expression(where, table))
    expected = filter_mask(where, table).tolist()
    assert found[:len(WELL_TYPED)] == expected[:len(WELL_TYPED)], expression(where, table)


@needs_milvus
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(FILTERS)
def test_milvus_expression_of_any_filter_allows_the_same_clips(facets_collection, node):
    _mc, select = facets_collection
    table = FacetTable(WELL_TYPED)
    found = select(expression(node, table))[:len(WELL_TYPED)]
    assert found == filter_mask(node, table).tolist(), expression(node, table)


@needs_milvus
def test_milvus_values_with_quotes_and_backslashes_never_break_out(tmp_path):
    """Each stored title, however hostile (quotes, backslashes, an injected ``or true``, newlines, control and
    non-ASCII characters), is found by its own equality test, and only it."""
    titles = ['x" or true or "', "a\\", 'q"', "\\\"", "'; drop", "a\nb", "t\tb", "\x01ctl", "\r\x0b\x0c\x1b",
              "é中文", "\\u0061",
              'x") or (id != "', "x\\\" or id != \"", "", " "]
    rng = np.random.default_rng(0)
    alphabet = list('"\\\'\n\r\t ab') + ["é", "\x00"]
    titles += ["".join(rng.choice(alphabet, size=int(rng.integers(1, 8)))) for _ in range(30)]
    titles = [t.replace("\x00", "") for t in titles]
    titles = list(dict.fromkeys(titles))
    facets = [{"title": t} for t in titles]
    mc = _info_collection(tmp_path / "t.db", "c", [{"facets": f} for f in facets])
    table = FacetTable(facets)
    for title in titles:
        where = FieldTest("title", "=", (fold(title),))
        expected = {f"r{j}" for j, t in enumerate(titles) if fold(t) == fold(title)}
        found = {r["id"] for r in mc.query("c", filter=expression(where, table), output_fields=["id"], limit=100)}
        assert found == expected, repr(title)
        negated = {r["id"] for r in mc.query("c", filter=expression(Not(where), table), output_fields=["id"],
                                             limit=100)}
        assert negated == {f"r{j}" for j in range(len(titles))} - expected, repr(title)
    with pytest.raises(MlatrError):  # the user's text is parsed, never pasted: a quote cannot close the literal
        parse_filter('title="x" or true or "')


def test_the_documented_filters_parse():
    """Every filter docs/hybrid-search.md gives as an example and every ``--where`` of the README parses (a
    filter that changed meaning would fail the tests of its meaning above)."""
    doc = (ROOT / "docs" / "hybrid-search.md").read_text(encoding="utf-8")
    examples = doc[doc.index("Examples (each parsed by `tests/test_filters.py"):]
    examples = examples[examples.index("`): ") + 4:examples.index("\n\n")]
    found = [m.replace("\n", " ") for m in re.findall(r"`([^`]+)`", examples, re.S)]
    found += re.findall(r'--where "([^"]+)"', (ROOT / "README.md").read_text(encoding="utf-8"))
    assert len(found) >= 12, found
    for text in found:
        assert parse_filter(text) is not None, text

