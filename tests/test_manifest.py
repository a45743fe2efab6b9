import json

import numpy as np
import pytest
import soundfile as sf

from mlatr.cli import main
from mlatr.data.manifest import Clip, Manifest, validate_manifest
from mlatr.errors import InputError, MlatrError

GOOD = [
    {"id": "a", "audio": "audio/a.wav", "split": "train",
     "captions": {"eng": ["A dog barks", "Barking"], "fra": ["Un chien aboie", None]},
     "labels": ["dog"], "duration": 5.0, "source": "freesound"},
    {"id": "b", "audio": "/abs/b.wav", "split": "test",
     "captions": {"eng": ["Rain falls"], "deu": ["Regen"]}},
    {"id": "c", "audio": "c.flac", "split": "test"},
]


def write_lines(path, lines):
    path.write_text("".join((ln if isinstance(ln, str) else json.dumps(ln)) + "\n" for ln in lines),
                    encoding="utf-8")
    return path


def test_load_builds_typed_clips_and_keeps_unknown_keys(tmp_path):
    p = write_lines(tmp_path / "m.jsonl", GOOD)
    m = Manifest.load(p)
    assert len(m) == 3 and m.root == tmp_path.resolve() and m.path == p
    a = m[0]
    assert a == Clip(id="a", audio="audio/a.wav", split="train",
                     captions={"eng": ["A dog barks", "Barking"], "fra": ["Un chien aboie", None]},
                     labels=["dog"], duration=5.0, extra={"source": "freesound"})
    assert a.line == 1 and m[2].line == 3
    assert a.audio_path(m.root) == tmp_path.resolve() / "audio" / "a.wav"
    assert str(m[1].audio_path(m.root)) == "/abs/b.wav"
    assert m[2].captions == {} and m[2].labels == [] and m[2].duration is None


def test_round_trip_save_load_is_identical(tmp_path):
    p = write_lines(tmp_path / "m.jsonl", GOOD)
    m = Manifest.load(p)
    m.save(tmp_path / "out" / "copy.jsonl")
    m2 = Manifest.load(tmp_path / "out" / "copy.jsonl")
    assert m2.clips == m.clips
    # optional fields that are empty are omitted, unknown keys are written back
    lines = [json.loads(x) for x in (tmp_path / "out" / "copy.jsonl").read_text().splitlines()]
    assert lines[0] == GOOD[0]
    assert lines[2] == {"id": "c", "audio": "c.flac", "split": "test"}
    assert [f.name for f in (tmp_path / "out").iterdir()] == ["copy.jsonl"]  # atomic: no temp left


def test_split_languages_and_caption_table(tmp_path):
    m = Manifest.load(write_lines(tmp_path / "m.jsonl", GOOD))
    assert [c.id for c in m.split("test")] == ["b", "c"]
    with pytest.raises(MlatrError, match="no clip has split 'val'.*test, train"):
        m.split("val")
    assert m.splits() == {"train": 1, "test": 2}
    assert m.languages() == ["eng", "fra", "deu"]  # English first, then the default order
    rows = m.captions_table()
    assert [tuple(r) for r in rows] == [
        (0, "eng", 0, "A dog barks"), (0, "eng", 1, "Barking"), (0, "fra", 0, "Un chien aboie"),
        (1, "eng", 0, "Rain falls"), (1, "deu", 0, "Regen"),
    ]
    assert [tuple(r) for r in m.captions_table(["fra"])] == [(0, "fra", 0, "Un chien aboie")]
    arr = m.caption_arrays()
    assert arr["texts"][2] == "Un chien aboie"
    np.testing.assert_array_equal(arr["text_audio"], [0, 0, 0, 1, 1])
    np.testing.assert_array_equal(arr["text_lang"], ["eng", "eng", "fra", "eng", "deu"])
    # (clip, j) -> one group: "A dog barks" and "Un chien aboie" share group 0
    np.testing.assert_array_equal(arr["text_group"], [0, 1, 0, 2, 2])


# Every kind of problem: (line text, expected field, message fragment)
BAD_LINES = [
    ('{"id": "x1", "audio": "x.wav"', "json", "invalid JSON"),
    ('["not", "an", "object"]', "json", "expected a JSON object"),
    ({"audio": "x.wav"}, "id", "missing"),
    ({"id": "  ", "audio": "x.wav"}, "id", "empty"),
    ({"id": 7, "audio": "x.wav"}, "id", "must be a string"),
    ({"id": "x2"}, "audio", "missing"),
    ({"id": "x3", "audio": ""}, "audio", "empty"),
    ({"id": "x4", "audio": "x.wav", "captions": ["A dog"]}, "captions", "must be an object"),
    ({"id": "x5", "audio": "x.wav", "captions": {"eng": "A dog"}}, "captions.eng", "must be a list"),
    ({"id": "x6", "audio": "x.wav", "captions": {"eng": ["a"], "fra": ["b", "c"]}}, "captions.fra",
     "2 captions but 'eng' has 1"),
    ({"id": "x7", "audio": "x.wav", "captions": {"fra": ["b"]}}, "captions", "no 'eng' list"),
    ({"id": "x8", "audio": "x.wav", "captions": {"eng": ["a"], "fr": ["b"]}}, "captions.fr",
     "did you mean 'fra'"),
    ({"id": "x9", "audio": "x.wav", "captions": {"eng": ["a"], "xxx": ["b"]}}, "captions.xxx",
     "unknown language code"),
    ({"id": "x10", "audio": "x.wav", "captions": {"eng": ["a", "   "]}}, "captions.eng[1]", "empty caption"),
    ({"id": "x11", "audio": "x.wav", "captions": {"eng": ["a", None]}}, "captions.eng[1]", "null English"),
    ({"id": "x12", "audio": "x.wav", "captions": {"eng": ["a"], "fra": [3]}}, "captions.fra[0]",
     "string or null"),
    ({"id": "x13", "audio": "x.wav", "split": 3}, "split", "non-empty string"),
    ({"id": "x14", "audio": "x.wav", "labels": "dog"}, "labels", "list of strings"),
    ({"id": "x15", "audio": "x.wav", "labels": ["dog", ""]}, "labels[1]", "non-empty string"),
    ({"id": "x16", "audio": "x.wav", "duration": "10"}, "duration", "number of seconds"),
    ({"id": "x17", "audio": "x.wav", "duration": -1}, "duration", ">= 0"),
    ({"id": "x18", "audio": "x.wav", "duration": True}, "duration", "number of seconds"),
]


def test_validate_reports_every_problem_with_line_and_field(tmp_path):
    lines = [GOOD[0]] + [b[0] for b in BAD_LINES] + [GOOD[1]]
    p = write_lines(tmp_path / "m.jsonl", lines)
    problems = validate_manifest(p)
    assert len(problems) == len(BAD_LINES)
    for k, (prob, (_, field, fragment)) in enumerate(zip(problems, BAD_LINES, strict=True)):
        assert prob.line == k + 2, prob
        assert prob.field == field, prob
        assert fragment in prob.message, prob
        assert str(prob).startswith(f"{p}:{k + 2}: {field}: ")


def test_duplicate_id_names_the_first_line_and_audio_check(tmp_path):
    (tmp_path / "audio").mkdir()
    sf.write(tmp_path / "audio" / "a.wav", np.zeros(5 * 16000, np.float32), 16000)  # GOOD[0] says 5 s
    lines = [GOOD[0], "", {"id": "z", "audio": "z.wav"}, {"id": "a", "audio": "audio/a.wav"}]
    p = write_lines(tmp_path / "m.jsonl", lines)
    problems = validate_manifest(p)
    assert [(x.line, x.field) for x in problems] == [(4, "id")]
    assert "duplicate id 'a' (first at line 1)" in problems[0].message
    with_audio = validate_manifest(p, check_audio=True)
    # a.wav exists (lines 1 and 4), z.wav does not (line 3)
    assert [(x.line, x.field) for x in with_audio] == [(3, "audio"), (4, "id")]
    assert "file not found (a sound file)" in with_audio[0].message


def test_validate_allowed_languages(tmp_path):
    p = write_lines(tmp_path / "m.jsonl", GOOD)
    problems = validate_manifest(p, languages=["eng", "fra"])
    assert [(x.line, x.field) for x in problems] == [(2, "captions.deu")]


def test_load_raises_on_first_problem_and_skip_bad_counts(tmp_path):
    lines = [GOOD[0], "{oops", GOOD[1], {"id": "a", "audio": "dup.wav"},
             {"id": "q", "audio": "q.wav", "captions": {"eng": [""]}, "duration": "x"}, GOOD[2]]
    p = write_lines(tmp_path / "m.jsonl", lines)
    with pytest.raises(InputError) as exc:
        Manifest.load(p)
    assert (exc.value.file, exc.value.line, exc.value.field) == (str(p), 2, "json")
    assert str(exc.value).startswith(f"{p}:2: json: invalid JSON")
    m = Manifest.load(p, skip_bad=True)
    assert [c.id for c in m] == ["a", "b", "c"]
    # line 2: bad JSON; line 4: duplicate; line 5: two problems (empty caption, duration)
    assert [(x.line, x.field) for x in m.problems] == [(2, "json"), (4, "id"), (5, "duration"),
                                                       (5, "captions.eng[0]")]
    assert m.skipped_lines() == 3


def test_cli_validate_prints_problems_and_exit_codes(tmp_path, capsys):
    good = write_lines(tmp_path / "good.jsonl", GOOD)
    assert main(["data", "validate", str(good)]) == 0
    assert "OK: 3 clips, 5 captions in eng, fra, deu" in capsys.readouterr().out
    bad = write_lines(tmp_path / "bad.jsonl", [GOOD[0], {"id": "a", "audio": "x"}, "[]"])
    assert main(["data", "validate", str(bad)]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"{bad}:2: id: duplicate id 'a' (first at line 1)"
    assert out[1] == f"{bad}:3: json: expected a JSON object, got list"
    assert out[2] == f"2 problem(s) on 2 line(s) of {bad}"
    assert main(["data", "validate", str(good), "--check-audio"]) == 1
    assert capsys.readouterr().out.count("file not found (a sound file)") == 3


def test_byte_order_mark_is_accepted(tmp_path):
    p = tmp_path / "bom.jsonl"
    p.write_bytes(b"\xef\xbb\xbf" + json.dumps(GOOD[2]).encode() + b"\n")
    assert validate_manifest(p) == [] and Manifest.load(p)[0].id == "c"


def test_missing_file_is_one_problem(tmp_path):
    problems = validate_manifest(tmp_path / "nope.jsonl")
    assert len(problems) == 1 and problems[0].line is None and problems[0].message == "file not found (a manifest)"
    with pytest.raises(InputError, match="nope.jsonl: file not found"):
        Manifest.load(tmp_path / "nope.jsonl")
