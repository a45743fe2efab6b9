"""Captions and labels from paths (mlatr.data.path_captions) and `mlatr data recaption`."""

import json

import pytest

from mlatr.cli import main
from mlatr.data.manifest import Clip, Manifest
from mlatr.data.path_captions import CaptionRules, clean_name, drop_numbering, path_captions, recaption
from mlatr.errors import MlatrError

TABLE = CaptionRules(
    words={"cracky": "stone", "bd": "bass drum", "node": "block"},
    labels={"lib/Animal/": "animal", "lib/": "library sound", "kit/bd_": "drum"},
    captions={"lib/Animal/Dog": ["a dog barking"], "lib/odd": None, "lib/named.ogg": ["a named sound"]},
)


@pytest.mark.parametrize("clip_id, expected", [
    ("wesnoth/core/wolf-hit-3", "wesnoth/core/wolf-hit"), ("widelands/animals/bird1_00", "widelands/animals/bird"),
    ("minetest/default/break_glass.2", "minetest/default/break_glass"), ("scratch/Animal/Dog1", "scratch/Animal/Dog"),
    ("a/b/plain", "a/b/plain"), ("12", "12"),
])
def test_drop_numbering(clip_id, expected):
    assert drop_numbering(clip_id) == expected


@pytest.mark.parametrize("name, expected", [
    ("dig_cracky", "digging stone"), ("gravel_footstep", "footsteps on gravel"), ("dug_node", "block dug out"),
    ("wolf-die", "wolf dying"), ("orc-hit", "orc hurt"), ("bow-miss", "bow missing its target"),
    ("magic-missile-2-miss", "magic missile missing its target"), ("bd_fat", "bass drum fat"),
    ("place_node", "place block"),
])
def test_clean_name_drops_numbers_and_replaces_jargon(name, expected):
    assert clean_name(name, TABLE.words) == expected


def test_path_captions_reviewed_automatic_context_and_left_out():
    assert path_captions("lib/Animal/Dog2", TABLE) == (["a dog barking", "a dog barking, animal"], "animal")
    assert path_captions("lib/Animal/CatMeow1", TABLE) == (["cat meow", "cat meow, animal"], "animal")
    assert path_captions("lib/odd", TABLE) == (None, "library sound")
    assert path_captions("lib/named.ogg", TABLE)[0] == ["a named sound", "a named sound, library sound"]
    assert path_captions("lib/Animal/01", TABLE)[0] == ["animal"]  # no words: the folder's
    assert path_captions("kit/bd_808", TABLE) == (["bass drum"], "drum")  # the label is already said
    assert path_captions("other/x.wav", TABLE) == (["x"], None)


def test_recaption_rewrites_english_only_clips_and_drops_left_out_ones(tmp_path):
    m = Manifest(clips=[Clip(id="lib/Animal/Dog1", audio="d.wav", captions={"eng": ["dog"]}),
                        Clip(id="lib/odd", audio="o.wav", captions={"eng": ["odd"]}),
                        Clip(id="lib/dig_cracky", audio="c.wav", captions={"eng": ["dig cracky"], "fra": ["creuser"]}),
                        Clip(id="mine/Birds/Owl2", audio="w.wav", captions={"eng": ["owl"]}, labels=["birds"])])
    counts = recaption(m, TABLE).counts
    assert [c.id for c in m.clips] == ["lib/Animal/Dog1", "lib/dig_cracky", "mine/Birds/Owl2"]
    assert m.clips[2].captions["eng"] == ["owl"] and m.clips[2].labels == ["birds"]  # unknown library: kept
    assert m.clips[0].captions == {"eng": ["a dog barking", "a dog barking, animal"]}
    assert m.clips[0].labels == ["animal"]
    assert m.clips[1].captions["fra"] == ["creuser"]  # translated clips are kept as they are
    assert counts == {"recaptioned": 2, "reviewed": 1, "removed": 1, "kept_as_is": 1, "kept_own": 0, "labelled": 2}
    path = tmp_path / "m.jsonl"
    m.save(path)
    table = tmp_path / "t.json"
    table.write_text(json.dumps({"captions": {"lib/Animal/Dog1": ["a puppy"]}}), encoding="utf-8")
    assert main(["data", "recaption", str(path), "--table", str(table), "--in-place"]) == 0
    assert Manifest.load(path).clips[0].captions["eng"] == ["a puppy"]  # an earlier recaption's: replaced
    table.write_text(json.dumps({"captions": {"lib/Animal/Dog1": "a puppy"}}), encoding="utf-8")
    with pytest.raises(MlatrError, match="captions.lib/Animal/Dog1"):
        CaptionRules.load(table)


def test_the_shipped_table_is_consistent():
    t = CaptionRules.load()
    assert t.note and len(t.captions) >= 300
    assert set(t.labels.values()) <= set(t.label_translations)
    langs = {"fra", "deu", "spa", "nld", "cat", "jpn", "zho"}
    assert all(set(v) == langs for v in t.label_translations.values())
    assert not any(k.startswith("tuxpaint") for k in t.captions)


def test_a_template_puts_the_automatic_caption_into_a_phrase():
    from mlatr.data.path_captions import CaptionRules, path_captions

    table = CaptionRules(templates={"game/voices/": 'a cartoon voice saying "{}"'}, labels={"game/voices/": "voice"})
    assert path_captions("game/voices/Pirate/Incoming2", table) == (['a cartoon voice saying "incoming"'], "voice")
    assert path_captions("game/sfx/door_open", table)[0] == ["door open"]


def _library(tmp_path):
    """A folder import of two tones: track_01.wav with an English sidecar a person wrote, Dog_bark2.wav without."""
    from clitools import write_tone

    folder = tmp_path / "Sounds"
    write_tone(folder / "fx" / "track_01.wav", 0.3)
    write_tone(folder / "fx" / "Dog_bark2.wav", 0.3)
    (folder / "fx" / "track_01.txt").write_text("heavy rain falling on a tin roof\n", encoding="utf-8")
    m = tmp_path / "my-sounds.jsonl"
    assert main(["data", "import", "--format", "folder", str(folder), "-o", str(m)]) == 0
    return m


def test_recaption_keeps_a_sidecar_caption_and_writes_a_new_manifest(tmp_path, capsys):
    """Was: the manifest was rewritten in place and 'heavy rain falling on a tin roof' (track_01.txt) became
    'track', with no warning and no preview."""
    m = _library(tmp_path)
    before = m.read_bytes()
    capsys.readouterr()
    assert main(["data", "recaption", str(m)]) == 0
    assert m.read_bytes() == before  # the user's manifest is untouched
    new = tmp_path / "my-sounds.recaptioned.jsonl"
    assert f"wrote {new}" in capsys.readouterr().out
    clips = {c.id: c for c in Manifest.load(new)}
    # what the person wrote comes first; the import added the name's words and the folder's after it
    assert clips["fx/track_01"].captions == {"eng": ["heavy rain falling on a tin roof", "track", "track, fx"]}
    assert clips["fx/track_01"].extra["caption_sources"] == {"eng": ["sidecar", "name", "folder"]}
    assert clips["fx/Dog_bark2"].captions == {"eng": ["dog bark", "dog bark, fx"]}  # from the path; no table entry
    assert main(["data", "recaption", str(m), "--in-place"]) == 0
    assert Manifest.load(m).clips[1].captions["eng"][0] == "heavy rain falling on a tin roof"


def test_recaption_keeps_a_manifest_caption_a_person_edited(tmp_path):
    m = Manifest(clips=[Clip(id="lib/Animal/Dog1", audio="d.wav", captions={"eng": ["my old dog Rex growling"]}),
                        Clip(id="lib/odd", audio="o.wav", captions={"eng": ["a door I recorded"]})])
    done = recaption(m, TABLE)
    assert [c.captions["eng"] for c in m.clips] == [["my old dog Rex growling"], ["a door I recorded"]]
    assert done.counts["kept_own"] == 2 and done.counts["removed"] == 0  # the table's null does not drop it
    assert [c.labels for c in m.clips] == [["animal"], ["library sound"]]


def test_recaption_dry_run_prints_the_changes_and_writes_nothing(tmp_path, capsys):
    m = _library(tmp_path)
    table = tmp_path / "t.json"
    table.write_text(json.dumps({"captions": {"fx/Dog_bark2": ["a dog barking twice"]}}), encoding="utf-8")
    before = m.read_bytes()
    capsys.readouterr()
    assert main(["data", "recaption", str(m), "--table", str(table), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert 'fx/Dog_bark2: ["dog bark", "dog bark, fx"] -> ["a dog barking twice"]' in out
    assert 'fx/track_01: labels ["fx"] -> []' in out  # the table knows fx/: its label; the caption is kept
    assert "kept_own 1" in out and "nothing written" in out
    assert m.read_bytes() == before and sorted(p.name for p in tmp_path.glob("*.jsonl")) == ["my-sounds.jsonl"]
    assert main(["data", "recaption", str(m), "-o", str(tmp_path / "x.jsonl"), "--in-place"]) == 2
