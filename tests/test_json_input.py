"""JSON from a user's file: deep nesting, huge integers and bad syntax are InputErrors with their place."""

import json
from collections import OrderedDict

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from clitools import assert_user_error, run_cli
from mlatr.data.manifest import Manifest, validate_manifest
from mlatr.data.path_captions import CaptionRules
from mlatr.errors import InputError
from mlatr.json_input import MAX_DEPTH, nesting_depth, parse_json

GOOD = {"id": "c", "audio": "a.wav", "captions": {"eng": ["a dog"]}}


@pytest.mark.parametrize("text,fragment", [
    ("[" * 100_000, "nested too deeply"),
    ("[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1), "nested too deeply"),
    ("1" * 5000, "invalid JSON"),
    ('{"id": ', "invalid JSON"),
])
def test_parse_json_refuses_with_the_place(text, fragment):
    with pytest.raises(InputError, match=fragment) as info:
        parse_json(text, "f.jsonl", 7)
    assert str(info.value).startswith("f.jsonl:7: json: ")


def test_nesting_depth_counts_without_recursion():
    deep = []
    node = deep
    for _ in range(50_000):
        node.append([])
        node = node[0]
    assert nesting_depth(deep) == 50_001
    assert nesting_depth({"a": [1, {"b": []}]}) == 4 and nesting_depth(3) == 0


@pytest.mark.parametrize("value", ["[" * 100_000, '{"x": ' * 5000 + "1" + "}" * 5000, "9" * 5000])
def test_a_manifest_line_nested_too_deeply_is_a_problem_not_a_traceback(tmp_path, capsys, value):
    path = tmp_path / "m.jsonl"
    path.write_text(json.dumps(GOOD) + "\n" + json.dumps({**GOOD, "id": "d"})[:-1] + f', "extra": {value}}}\n')
    problems = validate_manifest(path)
    assert [(p.line, p.field) for p in problems] == [(2, "json")]
    assert_user_error(run_cli(capsys, "data", "split", str(path)), f"{path}:2: json: ")


@settings(max_examples=40, deadline=None, derandomize=True)
@given(st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=5),
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
                    max_leaves=8),
       st.sampled_from(["words", "labels", "captions", "label_translations", "note", None]))
def test_a_caption_table_with_any_value_anywhere_loads_or_refuses(tmp_path_factory, value, key):
    path = tmp_path_factory.mktemp("t") / "table.json"
    path.write_text(json.dumps(value if key is None else {key: value}))
    try:
        CaptionRules.load(path)
    except InputError as exc:
        assert str(exc).startswith(str(path))


@settings(max_examples=40, deadline=None, derandomize=True)
@given(st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=5),
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
                    max_leaves=8),
       st.sampled_from(["id", "audio", "split", "labels", "duration", "captions", "extra"]))
def test_a_manifest_field_of_any_type_loads_or_refuses_with_its_line(tmp_path_factory, value, field):
    path = tmp_path_factory.mktemp("m") / "m.jsonl"
    path.write_text(json.dumps({**GOOD, field: value}) + "\n")
    try:
        Manifest.load(path)
    except InputError as exc:
        assert str(exc).startswith(f"{path}:1: ")


def test_nesting_depth_of_a_long_flat_list_and_mixed_values():
    assert nesting_depth(["x"] * 100_000) == 1 and nesting_depth([]) == 1 and nesting_depth({}) == 1
    assert nesting_depth([1, "a", [2, [3]], {"k": None}]) == 3
    assert nesting_depth([OrderedDict(k=[1])]) == 3  # a dict subclass in a list is still walked
