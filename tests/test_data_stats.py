import json

import pytest

from mlatr.cli import main
from mlatr.data.manifest import Clip, Manifest
from mlatr.data.stats import format_stats, manifest_stats


def small_manifest():
    return Manifest(clips=[
        Clip(id="a", audio="a.wav", split="train", duration=2.0, labels=["dog"],
             captions={"eng": ["A dog", "Barking", "Woof"], "fra": ["Un chien", None],
                       "deu": ["Hund", "Bellen", "W"]}),
        Clip(id="b", audio="b.wav", split="train", duration=4.0, labels=["dog", "outdoor"],
             captions={"eng": ["Rain"], "fra": [None]}),
        Clip(id="c", audio="c.wav", split="test", duration=9.0,
             captions={"eng": ["Wind", "Gust"], "fra": ["Vent"]}),
        Clip(id="d", audio="d.wav", labels=["silence"]),
    ])


def test_stats_hand_computed():
    s = manifest_stats(small_manifest())
    assert s["clips"] == 4
    assert s["splits"] == {"train": 2, "test": 1, "(none)": 1}
    assert s["languages"] == ["eng", "fra", "deu"]
    assert s["captions"] == {"eng": 6, "fra": 2, "deu": 3}
    assert s["captions_by_split"] == {"train": {"eng": 4, "fra": 1, "deu": 3}, "test": {"eng": 2, "fra": 1},
                                      "(none)": {}}
    assert s["clips_with_captions"] == {"eng": 3, "fra": 2, "deu": 1}
    # fra: a has 1 of 3 (2 missing), b 0 of 1 (1), c 1 of 2 (1) -> 4; deu: a 0, b 1, c 2 -> 3
    assert s["missing_translations"] == {"fra": 4, "deu": 3}
    assert s["clips_without_captions"] == 1
    assert s["duration"] == {"known": 3, "total": 15.0, "min": 2.0, "mean": 5.0, "max": 9.0}
    assert s["labels"] == {"dog": 2, "outdoor": 1, "silence": 1}
    json.dumps(s)  # JSON-able


def test_stats_without_durations_or_captions():
    s = manifest_stats(Manifest(clips=[Clip(id="x", audio="x.wav")]))
    assert s["duration"] is None and s["captions"] == {} and s["clips_without_captions"] == 1
    text = format_stats(s)
    assert "durations: unknown" in text and "clips without captions: 1" in text


def test_format_stats_table():
    text = format_stats(manifest_stats(small_manifest()))
    lines = text.splitlines()
    assert lines[0] == "clips: 4"
    assert lines[1] == "clips per split: train 2, test 1, (none) 1"
    head = next(i for i, ln in enumerate(lines) if ln.startswith("language"))
    assert lines[head].split() == ["language", "captions", "clips", "missing", "in", "train", "in", "test",
                                   "in", "(none)"]
    assert lines[head + 2].split() == ["eng", "6", "3", "-", "4", "2", "0"]
    assert lines[head + 3].split() == ["fra", "2", "2", "4", "1", "1", "0"]
    assert lines[head + 4].split() == ["deu", "3", "1", "3", "3", "0", "0"]
    assert "durations: total 0:00:15 (15.0 s), min 2.00 s, mean 5.00 s, max 9.00 s (1 clips unknown)" in text
    assert "labels: 3 distinct: dog 2, outdoor 1, silence 1" in text


def test_cli_stats_json_and_table(tmp_path, capsys):
    p = tmp_path / "m.jsonl"
    small_manifest().save(p)
    assert main(["data", "stats", str(p), "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert got == manifest_stats(Manifest.load(p))
    assert main(["data", "stats", str(p)]) == 0
    assert "missing = English captions without a translation" in capsys.readouterr().out
    with open(p, "a") as fh:
        fh.write("{bad\n")
    assert main(["data", "stats", str(p)]) == 2  # a malformed line stops it ...
    assert f"{p}:5: json: invalid JSON" in capsys.readouterr().err
    assert main(["data", "stats", str(p), "--skip-bad", "--json"]) == 0  # ... unless skipped and counted
    got = json.loads(capsys.readouterr().out)
    assert got["skipped_problems"] == 1 and got["skipped_lines"] == 1 and got["clips"] == 4


@pytest.mark.parametrize("split", ["train", "test"])
def test_stats_of_a_split_view(split):
    m = small_manifest().split(split)
    assert manifest_stats(m)["splits"] == {split: len(m)}
