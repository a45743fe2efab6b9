import json
import os
import textwrap
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from mlatr.cli import main
from mlatr.data.importers import (
    caption_from_name,
    import_audiocaps_csv,
    import_clotho_csv,
    import_esc50_csv,
    import_folder,
    import_mlclap_json,
    import_urbansound8k_csv,
    merge_translations,
)
from mlatr.data.manifest import Clip, Manifest, validate_manifest
from mlatr.errors import InputError, MlatrError

# The real ML-CLAP AudioCaps-test file lives beside the repository (../shared/data);
# MLATR_MLCLAP_JSON overrides the path.
MLCLAP_TEST = os.environ.get("MLATR_MLCLAP_JSON") or str(
    Path(__file__).resolve().parents[1].parent / "shared" / "data" / "mlclap-audiocaps-test.json")
needs_mlclap = pytest.mark.skipif(not Path(MLCLAP_TEST).is_file(), reason=f"{MLCLAP_TEST} not present")


def write(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
    return path


# ---------------------------------------------------------------- AudioCaps

AUDIOCAPS = """
audiocap_id,youtube_id,start_time,caption
103549,7fmOlUlwoNg,20,Constant rattling noise
103548,7fmOlUlwoNg,20,"Vibrations, and rattling"
97166,6BJ455B1aAs,0,A rocket flies by
103550,7fmOlUlwoNg,20,A machine is clicking
"""


def test_audiocaps_groups_rows_of_one_clip(tmp_path):
    src = write(tmp_path / "test.csv", AUDIOCAPS)
    m = import_audiocaps_csv([src], audio_dir="audio", split="test")
    assert [c.to_json() for c in m] == [
        {"id": "Y7fmOlUlwoNg", "audio": "audio/Y7fmOlUlwoNg.wav", "split": "test",
         "captions": {"eng": ["Constant rattling noise", "Vibrations, and rattling",
                              "A machine is clicking"]},
         "youtube_id": "7fmOlUlwoNg", "start_time": 20, "audiocap_ids": [103549, 103548, 103550]},
        {"id": "Y6BJ455B1aAs", "audio": "audio/Y6BJ455B1aAs.wav", "split": "test",
         "captions": {"eng": ["A rocket flies by"]},
         "youtube_id": "6BJ455B1aAs", "start_time": 0, "audiocap_ids": [97166]},
    ]
    assert m.problems == []


def test_audiocaps_pattern_and_start_time_collisions(tmp_path):
    src = write(tmp_path / "t.csv", """
        audiocap_id,youtube_id,start_time,caption
        1,abc,30,first
        2,abc,40.5,second
    """)
    with pytest.raises(InputError) as exc:
        import_audiocaps_csv([src])
    assert (exc.value.line, exc.value.field) == (3, "start_time")
    assert "put {start_time} in --audio-pattern" in str(exc.value)
    m = import_audiocaps_csv([src], audio_pattern="{youtube_id}_{start_time}_{end_time}.flac")
    assert [(c.id, c.audio) for c in m] == [("abc_30_40", "abc_30_40.flac"),
                                            ("abc_40.5_50.5", "abc_40.5_50.5.flac")]
    with pytest.raises(MlatrError, match="names 'ytid'"):
        import_audiocaps_csv([src], audio_pattern="{ytid}.wav")


def test_audiocaps_malformed_rows_name_file_and_line(tmp_path):
    src = write(tmp_path / "t.csv", """
        audiocap_id,youtube_id,start_time,caption
        1,abc,30,ok

        2,abc,thirty,bad start
        3,def,0,
        4,ghi,0,too,many
        1,jkl,0,duplicate audiocap id
        5,mno,0,fine
    """)
    with pytest.raises(InputError) as exc:
        import_audiocaps_csv([src])
    assert (exc.value.file, exc.value.line, exc.value.field) == (str(src), 4, "start_time")
    m = import_audiocaps_csv([src], skip_bad=True)
    assert [c.id for c in m] == ["Yabc", "Ymno"]
    assert [(p.line, p.field) for p in m.problems] == [(4, "start_time"), (5, "caption"), (6, None),
                                                      (7, "audiocap_id")]
    missing = write(tmp_path / "h.csv", "youtube_id,caption\nabc,x\n")
    with pytest.raises(InputError, match="missing column.*audiocap_id, start_time"):
        import_audiocaps_csv([missing], skip_bad=True)  # a bad header is never skipped


# ---------------------------------------------------------------- Clotho

def test_clotho_csv(tmp_path):
    src = write(tmp_path / "clotho_captions_evaluation.csv", """
        file_name,caption_1,caption_2,caption_3,caption_4,caption_5
        Santa Motor.wav,A machine whines,A motor runs,Gears turn,"A car, idling",An engine hums
        river.wav,Water flows,A stream,Water babbles,A brook runs,Water trickles
    """)
    m = import_clotho_csv([src], split="test", audio_dir="/data/clotho/evaluation")
    assert m.clips == [
        Clip(id="Santa Motor", audio="/data/clotho/evaluation/Santa Motor.wav", split="test",
             captions={"eng": ["A machine whines", "A motor runs", "Gears turn", "A car, idling",
                               "An engine hums"]}),
        Clip(id="river", audio="/data/clotho/evaluation/river.wav", split="test",
             captions={"eng": ["Water flows", "A stream", "Water babbles", "A brook runs",
                               "Water trickles"]}),
    ]
    bad = write(tmp_path / "b.csv", "file_name,caption_1,caption_2\na.wav,x,\nb.wav,y,z\na.wav,u,v\n")
    with pytest.raises(InputError) as exc:
        import_clotho_csv([bad])
    assert (exc.value.line, exc.value.field) == (2, "caption_2")
    m = import_clotho_csv([bad], skip_bad=True)
    assert [c.id for c in m] == ["b", "a"]  # the skipped row did not claim the id "a"
    assert [(p.line, p.field) for p in m.problems] == [(2, "caption_2")]


# ---------------------------------------------------------------- ML-CLAP JSON

@needs_mlclap
def test_mlclap_real_audiocaps_test_file():
    m = import_mlclap_json([MLCLAP_TEST])
    assert len(m) == 957
    assert sum(len(c.captions["eng"]) for c in m) == 4785
    assert all(list(c.captions) == ["eng"] and len(c.captions["eng"]) == 5 for c in m)
    clip = {c.id: c for c in m}["Y6BJ455B1aAs"]
    assert clip.captions["eng"] == [
        "A rocket flies by followed by a loud explosion and fire crackling as a truck engine runs idle",
        "A whooshing noise followed by an explosion",
        "A missile launching followed by an explosion and metal screeching as a motor hums in the "
        "background.",
        "Whistling and an explosion",
        "A whistling and then an explosion and crackling",
    ]
    assert clip.audio == "AudioCaps/waveforms/test/Y6BJ455B1aAs.wav"
    assert clip.duration == 7.38
    assert clip.extra == {"mlclap_id": "Y6BJ455B1aAs.wav",
                          "mlclap_audio": "/path/audiocaps/16k/Y6BJ455B1aAs.wav", "duration_sample": 118144}
    # duration_sample is at 16 kHz: it agrees with duration for every clip
    assert all(abs(c.extra["duration_sample"] / 16000 - c.duration) < 0.01 for c in m)
    with_dir = import_mlclap_json([MLCLAP_TEST], audio_dir="wavs", split="test")
    first = with_dir[0]
    assert (first.id, first.audio, first.split) == ("Y7fmOlUlwoNg", "wavs/Y7fmOlUlwoNg.wav", "test")
    assert first.extra["mlclap_wav"] == "AudioCaps/waveforms/test/Y7fmOlUlwoNg.wav"


def _mlclap(entries):
    return json.dumps({"data": entries, "num_captions_per_audio": 2}, indent=4, ensure_ascii=False)


def test_mlclap_merges_languages_by_index(tmp_path):
    eng = write(tmp_path / "eng.json", _mlclap([
        {"id": "a.wav", "wav": "w/a.wav", "caption_1": "A dog", "caption_2": "Barking",
         "source_lang_1": "eng_Latn", "source_lang_2": "eng_Latn", "duration": 2.0},
        {"id": "b.wav", "wav": "w/b.wav", "caption_1": "Rain", "caption_2": "Water",
         "source_lang_1": "eng_Latn", "source_lang_2": "eng_Latn"},
    ]))
    fra = write(tmp_path / "fra.json", _mlclap([
        {"id": "a.wav", "wav": "w/a.wav", "caption_2": "Aboiement", "source_lang_2": "fra_Latn"},
        {"id": "b.wav", "wav": "w/b.wav", "caption_1": "Pluie", "caption_2": "Eau",
         "source_lang_1": "zho_Hans", "source_lang_2": "fra_Latn"},
    ]))
    m = import_mlclap_json([eng, fra])
    assert m[0].captions == {"eng": ["A dog", "Barking"], "fra": [None, "Aboiement"]}
    assert m[1].captions == {"eng": ["Rain", "Water"], "zho": ["Pluie"], "fra": [None, "Eau"]}
    assert m.languages() == ["eng", "fra", "zho"]
    plain = write(tmp_path / "plain.json", _mlclap([{"id": "c", "audio": "/x/c.wav", "caption_1": "Wind"}]))
    assert import_mlclap_json([plain])[0].captions == {"eng": ["Wind"]}  # no source_lang_k: English
    assert import_mlclap_json([plain], lang="fra", skip_bad=True).problems[0].field == "captions"
    # force_lang overrides source_lang_k: read as German, the English file has no English list left
    forced = import_mlclap_json([eng], force_lang="deu", skip_bad=True)
    assert len(forced) == 0
    assert [(p.line, p.field) for p in forced.problems] == [(3, "captions"), (12, "captions")]
    assert "no 'eng' list" in forced.problems[0].message


def test_mlclap_bad_entries_give_their_line(tmp_path):
    src = write(tmp_path / "bad.json", _mlclap([
        {"id": "a.wav", "wav": "a.wav", "caption_1": "ok", "source_lang_1": "eng_Latn"},
        {"id": "b.wav", "caption_1": "no audio"},
        {"id": "c.wav", "wav": "c.wav", "caption_1": "", "source_lang_1": "eng_Latn"},
        {"id": "d.wav", "wav": "d.wav", "caption_1": "x", "source_lang_1": "xx_Latn"},
        {"id": "a.wav", "wav": "a.wav", "caption_1": "dup"},
    ]))
    lines = src.read_text().splitlines()
    starts = [i + 1 for i, ln in enumerate(lines) if ln.strip() == "{"][1:]  # entry openings
    with pytest.raises(InputError) as exc:
        import_mlclap_json([src])
    assert (exc.value.line, exc.value.field) == (starts[1], "audio")
    m = import_mlclap_json([src], skip_bad=True)
    assert [c.id for c in m] == ["a"]
    assert [(p.line, p.field) for p in m.problems] == [(starts[1], "audio"), (starts[2], "caption_1"),
                                                      (starts[3], "source_lang_1"), (starts[4], "id")]
    broken = write(tmp_path / "broken.json", '{"data": [\n  {"id": 1,}\n]}')
    with pytest.raises(InputError) as exc:
        import_mlclap_json([broken])
    assert exc.value.line == 2


# ---------------------------------------------------------------- translations

def _base(tmp_path):
    m = Manifest(clips=[
        Clip(id="a", audio="a.wav", captions={"eng": ["A dog", "Barking", "Woof"]}),
        Clip(id="b", audio="b.wav", captions={"eng": ["Rain"], "fra": ["Pluie"]}),
    ], root=tmp_path)
    m.save(tmp_path / "m.jsonl")
    return Manifest.load(tmp_path / "m.jsonl")


def test_translations_long_csv_wide_csv_and_jsonl(tmp_path):
    base = _base(tmp_path)
    long_csv = write(tmp_path / "fra.csv", """
        id,index,caption
        a,2,Ouaf
        a,0,Un chien
    """)
    wide_csv = write(tmp_path / "deu.csv", """
        id,caption_1,caption_2,caption_3,lang
        a,Ein Hund,,Wuff,de
    """)
    jsonl = write(tmp_path / "jpn.jsonl", """
        {"id": "b", "index": 0, "caption": "雨", "lang": "jpn"}
        {"id": "a", "captions": [null, "吠える"], "lang": "ja"}
    """)
    tsv = write(tmp_path / "cat.tsv", "id\tindex\ttext\tlang\nb\t0\tPluja\tcat\n")
    assert merge_translations(base, [tsv])[1].captions["cat"] == ["Pluja"]
    m = merge_translations(base, [long_csv], lang="fra")
    m = merge_translations(m, [wide_csv, jsonl])
    assert m[0].captions == {"eng": ["A dog", "Barking", "Woof"], "fra": ["Un chien", None, "Ouaf"],
                             "deu": ["Ein Hund", None, "Wuff"], "jpn": [None, "吠える", None]}
    assert m[1].captions == {"eng": ["Rain"], "fra": ["Pluie"], "jpn": ["雨"]}
    assert base[0].captions == {"eng": ["A dog", "Barking", "Woof"]}  # the input is not modified


def test_translations_report_unknown_ids_and_indices(tmp_path):
    base = _base(tmp_path)
    src = write(tmp_path / "t.csv", """
        id,index,caption,lang
        a,1,Aboiement,fra
        zz,0,Inconnu,fra
        b,1,Trop loin,fra
        a,x,pas un nombre,fra
        a,0,,fra
        a,0,A dog,eng
        b,0,Autre pluie,fra
        a,1,Encore,fra
        a,0,Un chien,klingon
    """)
    with pytest.raises(InputError) as exc:
        merge_translations(base, [src])
    assert (exc.value.line, exc.value.field) == (3, "id")
    assert "no clip with id 'zz'" in str(exc.value)
    m = merge_translations(base, [src], skip_bad=True)
    assert [(p.line, p.field) for p in m.problems] == [
        (3, "id"), (4, "index"), (5, "index"), (6, "caption"), (7, "lang"), (8, "caption"), (9, "index"),
        (10, "lang")]
    assert "has 1 English caption(s) (indices 0..0); index 1 does not exist" in m.problems[1].message
    assert m[0].captions["fra"] == [None, "Aboiement", None]
    assert m[1].captions["fra"] == ["Pluie"]
    over = merge_translations(base, [write(tmp_path / "o.csv", "id,index,caption\nb,0,Averse\n")],
                              lang="fra", overwrite=True)
    assert over[1].captions["fra"] == ["Averse"]


# ---------------------------------------------------------------- ESC-50, UrbanSound8K

def test_esc50_csv_labels_and_folds(tmp_path):
    src = write(tmp_path / "esc50.csv", """
        filename,fold,target,category,esc10,src_file,take
        1-100032-A-0.wav,1,0,dog,True,100032,A
        5-9032-A-0.wav,5,0,dog,True,9032,A
        2-109505-A-21.wav,2,21,sneezing,False,109505,A
    """)
    m = import_esc50_csv([src], audio_dir="ESC-50/audio")
    assert m[0].to_json() == {"id": "1-100032-A-0", "audio": "ESC-50/audio/1-100032-A-0.wav",
                              "split": "fold1", "labels": ["dog"], "fold": 1, "target": 0, "esc10": True,
                              "src_file": 100032, "take": "A"}
    assert [c.split for c in import_esc50_csv([src], test_fold=5)] == ["train", "test", "train"]
    assert [c.split for c in import_esc50_csv([src], test_fold=5, val_fold=2)] == ["train", "test", "val"]
    assert [c.labels for c in m] == [["dog"], ["dog"], ["sneezing"]]
    bad = write(tmp_path / "bad.csv", "filename,fold,target,category\na.wav,one,0,dog\nb.wav,1,0,\n")
    m = import_esc50_csv([bad], skip_bad=True)
    assert len(m) == 0 and [(p.line, p.field) for p in m.problems] == [(2, "fold"), (3, "category")]


def test_urbansound8k_csv(tmp_path):
    src = write(tmp_path / "UrbanSound8K.csv", """
        slice_file_name,fsID,start,end,salience,fold,classID,class
        100032-3-0-0.wav,100032,0.0,0.317551,1,5,3,dog_bark
        100263-2-0-117.wav,100263,58.5,62.5,1,5,2,children_playing
    """)
    m = import_urbansound8k_csv([src], audio_dir="UrbanSound8K/audio", test_fold=5)
    assert m[0].to_json() == {"id": "100032-3-0-0", "audio": "UrbanSound8K/audio/fold5/100032-3-0-0.wav",
                              "split": "test", "labels": ["dog_bark"], "duration": 0.317551,
                              "fsID": 100032, "salience": 1, "fold": 5, "classID": 3, "start": 0.0,
                              "end": 0.317551}
    assert m[1].duration == 4.0 and m[1].labels == ["children_playing"]
    bad = write(tmp_path / "b.csv", "slice_file_name,fsID,start,end,salience,fold,classID,class\n"
                                    "x.wav,1,5,2,1,1,0,dog\n")
    with pytest.raises(InputError) as exc:
        import_urbansound8k_csv([bad])
    assert (exc.value.line, exc.value.field) == (2, "end")


# ---------------------------------------------------------------- folder

@pytest.mark.parametrize("name,caption", [
    ("CarPassing", "car passing"), ("wolf-die-4", "wolf die"), ("Bass Beatbox", "bass beatbox"),
    ("HTTPServer2", "http server"), ("footstep2", "footstep"),
    ("default_dig_crumbly.1", "default dig crumbly"),
    ("mp3Player", "mp3 player"), ("042", ""),
])
def test_caption_from_name(name, caption):
    assert caption_from_name(name) == caption


def _tone(path, seconds, sr=8000, fmt=None):
    path.parent.mkdir(parents=True, exist_ok=True)
    t = np.arange(int(seconds * sr)) / sr
    sf.write(path, (0.1 * np.sin(2 * np.pi * 440 * t)).astype(np.float32), sr, format=fmt)


def test_folder_import_captions_from_sidecars_and_names(tmp_path):
    lib = tmp_path / "lib"
    _tone(lib / "Effects" / "CarPassing.wav", 0.5)
    _tone(lib / "wolf-die-4.ogg", 0.25, fmt="OGG")
    _tone(lib / "Animals" / "dog.flac", 1.0)
    write(lib / "Animals" / "dog.txt", "A dog barks twice\n\nA dog barking\n")
    write(lib / "Animals" / "dog.fra.txt", "Un chien aboie deux fois\n")
    _tone(lib / "Birds" / "01.wav", 0.125)
    (lib / "notes.md").write_text("not a sound")
    m = import_folder([lib], relative_to=tmp_path)
    got = [c.to_json() for c in m]
    facets = [c.pop("facets") for c in got]
    assert got == [
        {"id": "Animals/dog", "audio": "lib/Animals/dog.flac",
         "captions": {"eng": ["A dog barks twice", "A dog barking", "dog", "dog, animals"],
                      "fra": ["Un chien aboie deux fois", None, None, None]},
         "caption_sources": {"eng": ["sidecar", "sidecar", "name", "folder"]},
         "labels": ["animals"], "duration": 1.0},
        {"id": "Birds/01", "audio": "lib/Birds/01.wav", "captions": {"eng": ["birds"]}, "labels": ["birds"],
         "caption_sources": {"eng": ["name"]}, "duration": 0.125},
        {"id": "Effects/CarPassing", "audio": "lib/Effects/CarPassing.wav",
         "captions": {"eng": ["car passing", "car passing, effects"]},
         "caption_sources": {"eng": ["name", "folder"]}, "labels": ["effects"], "duration": 0.5},
        {"id": "wolf-die-4", "audio": "lib/wolf-die-4.ogg", "captions": {"eng": ["wolf dying"]},  # as recaption
         "caption_sources": {"eng": ["name"]}, "duration": 0.25},
    ]
    assert [(f["format"], f["codec"], f["sample_rate"], f["channels"], f["bit_depth"], f["folder"]) for f in facets] \
        == [("flac", "pcm_16", 8000, 1, 16, "Animals"), ("wav", "pcm_16", 8000, 1, 16, "Birds"),
            ("wav", "pcm_16", 8000, 1, 16, "Effects"), ("ogg", "vorbis", 8000, 1, None, "")]
    out = tmp_path / "m.jsonl"
    m.save(out)
    assert validate_manifest(out, check_audio=True) == []


def test_folder_unreadable_file_and_too_many_translations(tmp_path):
    lib = tmp_path / "lib"
    _tone(lib / "good.wav", 0.1)
    (lib / "broken.wav").write_bytes(b"RIFF not really a wav")
    _tone(lib / "rain.wav", 0.1)
    write(lib / "rain.deu.txt", "Regen\nNoch mehr Regen\n")
    with pytest.raises(InputError, match="broken.wav: audio: cannot read audio"):
        import_folder([lib])
    m = import_folder([lib], skip_bad=True)
    assert [c.id for c in m] == ["good"]
    assert [p.field for p in m.problems] == ["audio", "captions.deu"]
    assert m[0].audio == str((lib / "good.wav").resolve())  # absolute without relative_to


# ---------------------------------------------------------------- CLI

def test_cli_import_audio_dir_relative_to_manifest_and_skip_bad(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write(tmp_path / "src" / "test.csv", AUDIOCAPS + "9,abc,bad,x\n")
    rc = main(["data", "import", "--format", "audiocaps-csv", "src/test.csv", "-o", "data/ac/test.jsonl",
               "--audio-dir", "data/audio", "--split", "test", "--skip-bad"])
    assert rc == 0
    out = capsys.readouterr()
    assert "wrote 2 clips, 4 captions (eng) to data/ac/test.jsonl" in out.out
    assert "skipped 1 bad row(s)" in out.out and "test.csv:6: start_time" in out.err
    m = Manifest.load(tmp_path / "data" / "ac" / "test.jsonl")
    assert m[0].audio == "../audio/Y7fmOlUlwoNg.wav"
    assert m[0].audio_path(m.root).resolve() == (tmp_path / "data" / "audio" / "Y7fmOlUlwoNg.wav").resolve()
    # without --skip-bad the bad row stops the import, with exit status 2 and file:line in the message
    assert main(["data", "import", "-f", "audiocaps-csv", "src/test.csv", "-o", "x.jsonl"]) == 2
    assert "src/test.csv:6: start_time: expected a number" in capsys.readouterr().err
    # translations merge in place into the -o manifest
    write(tmp_path / "fra.csv", "id,index,caption\nY6BJ455B1aAs,0,Une fusée passe\n")
    assert main(["data", "import", "-f", "translations", "fra.csv", "--lang", "fra",
                 "-o", "data/ac/test.jsonl"]) == 0
    m = Manifest.load(tmp_path / "data" / "ac" / "test.jsonl")
    assert m[1].captions == {"eng": ["A rocket flies by"], "fra": ["Une fusée passe"]}
    assert m[0].audio == "../audio/Y7fmOlUlwoNg.wav"
    assert main(["data", "import", "-f", "folder", "src", "-o", "y.jsonl", "--test-fold", "1"]) == 2
    assert "--test-fold does not apply to --format folder" in capsys.readouterr().err


@needs_mlclap
def test_cli_import_mlclap_and_validate(tmp_path, capsys):
    out = tmp_path / "m.jsonl"
    assert main(["data", "import", "-f", "mlclap-json", MLCLAP_TEST, "-o", str(out), "--split", "test"]) == 0
    assert "wrote 957 clips, 4785 captions (eng)" in capsys.readouterr().out
    assert main(["data", "validate", str(out)]) == 0


def test_cli_import_folder_writes_paths_relative_to_the_manifest(tmp_path, capsys):
    _tone(tmp_path / "sounds" / "Effects" / "CarPassing.wav", 0.2)
    out = tmp_path / "data" / "lib.jsonl"
    assert main(["data", "import", "-f", "folder", str(tmp_path / "sounds"), "-o", str(out),
                 "--split", "test", "--no-folder-labels"]) == 0
    assert "wrote 1 clips, 1 captions (eng)" in capsys.readouterr().out
    got = json.loads(out.read_text())
    assert got.pop("facets")["duration"] == 0.2
    assert got == {
        "id": "Effects/CarPassing", "audio": "../sounds/Effects/CarPassing.wav", "split": "test",
        "captions": {"eng": ["car passing"]}, "caption_sources": {"eng": ["name"]}, "duration": 0.2}
    assert main(["data", "validate", str(out), "--check-audio"]) == 0
