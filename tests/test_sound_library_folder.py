"""One sound designer's folder holding every kind of file mlatr reads, searched through the CLI as a user runs it
(issue 46, "Done when"): one ``python -m mlatr`` process per command, on a folder made here.

The folder: a BWF file described in its ``bext`` chunk with an iXML note, an MP3 with an ID3 title, an Ogg and a
FLAC with Vorbis comments, a UCS-named file, a file with a sidecar caption, a meaningless name (``take_0042``), a
joined name (``blackcat``), a folder that names its file (``birds/ZOOM0001``), a 75 s field recording with a high
tone at 40.2 s, a WAV re-save of the Ogg, an MP3 re-encode and a 6 dB quieter copy of the UCS file, a digital
silence and a broken file. Each sound is a tone in a band of its own, so that no two are alike but the copies.

The model is the suite's toy model (``served_toy``) whose audio side is the band tower in every process
(``tests/band_process/sitecustomize.py``: a sound's embedding is its energy per 500 Hz band, known in closed form),
so where the long recording's tone is and which files are copies are facts of the sounds written here; the tower
also counts what each command encodes, which proves that a sync follows a rename or a move without encoding.
Every expectation below comes from what the test wrote (tags, names, durations, channels, the tone's time), not
from the commands' own reports. A file kind whose encoder this machine lacks (MP3, Vorbis in libsndfile) is left
out with a warning naming it; the rest of the folder is still tested. No MP4 / M4A: a folder's listing takes no
``.m4a`` (mlatr.data.sound_names.AUDIO_EXTENSIONS) and libsndfile writes none; its tags' reader is tested in
test_file_metadata.
"""

from __future__ import annotations

import csv
import io
import json
import os
import subprocess
import sys
import warnings
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import mutagen.flac
import mutagen.id3
import mutagen.oggvorbis
import numpy as np
import pytest
import soundfile as sf

from mlatr.search import Index
from test_file_metadata import IXML, bwf, sine
from test_results_export import _same_as_json

TESTS = Path(__file__).resolve().parent
SR = 16000
#: The long recording: its length, and the 0.5 s tone in it (seconds) at EVENT_HZ, a band no other sound uses.
LONG_SECONDS, EVENT, EVENT_HZ = 75.0, (40.2, 40.7), 6250.0
#: The toy model's window (toydata.train_toy_model: data.eval_max_seconds=2.0): a long file's segments last as long.
SEGMENT_SECONDS = 2.0
SILENT, LONG, UCS = "misc/untitled", "field/walk_2024-06-01", "ucs/DOORWood_Creaky door opens slowly_ACME_LIB"
SHORT_MONO_WAV = "format=wav and channels=1 and duration<1"


@dataclass
class Written:
    """What the test wrote for one clip: its facts, and the query word its own text holds with where that text
    was written (``origin``: bext, id3, vorbis, ucs, sidecar, name, folder)."""

    seconds: float
    channels: int
    format: str
    word: str | None = None
    origin: str | None = None
    tags: list[str] = field(default_factory=list)  # the kinds of metadata written into the file or beside it


def _tone(path: Path, hz: float, seconds: float, channels: int = 1, subtype: str = "PCM_16") -> Path:
    return sine(path, freq=hz, amplitude=0.3, seconds=seconds, sr=SR, channels=channels, subtype=subtype, fade=0.01)


def make_folder(lib: Path) -> dict[str, Written]:
    """The folder (module docstring); ``{clip id: Written}`` of each clip that should be indexed."""
    formats = sf.available_formats()
    mp3 = "MP3" in formats
    vorbis = "OGG" in formats and "VORBIS" in sf.available_subtypes("OGG")
    for kind, there in (("MP3 (ID3 tags, a re-encoded copy)", mp3), ("Ogg Vorbis (Vorbis comments)", vorbis)):
        if not there:
            warnings.warn(f"this libsndfile writes no {kind}: that file kind is left out of the folder", stacklevel=2)
    made: dict[str, Written] = {}
    # BWF: 2 channels, 24 bit, a 997 Hz tone (test_file_metadata.bwf writes it byte by byte)
    bwf(lib / "bwf" / "take_0017.wav", description=b"Heavy wooden door slams shut", originator=b"ACME Field",
        ixml=IXML, sr=SR, frames=int(1.5 * SR))
    made["bwf/take_0017"] = Written(1.5, 2, "wav", "wooden", "bext", ["bext", "ixml"])
    if mp3:
        path = _tone(lib / "mp3" / "rec_0117.mp3", 1750, 1.5, subtype="MPEG_LAYER_III")
        tags = mutagen.id3.ID3()
        tags.add(mutagen.id3.TIT2(encoding=3, text="Thunder clap over the hills"))
        tags.save(path)
        made["mp3/rec_0117"] = Written(1.5, 1, "mp3", "thunder", "id3", ["id3"])
    if vorbis:
        path = _tone(lib / "farm" / "a0193.ogg", 2250, 1.5, subtype="VORBIS")
        tags = mutagen.oggvorbis.OggVorbis(path)
        tags["DESCRIPTION"] = "Rooster crowing at dawn"
        tags.save()
        made["farm/a0193"] = Written(1.5, 1, "ogg", "rooster", "vorbis", ["vorbis"])
        audio, rate = sf.read(path, dtype="float32")  # a WAV re-save of the Ogg: the same audio
        (lib / "copies").mkdir(parents=True, exist_ok=True)
        sf.write(lib / "copies" / "a0193_resaved.wav", audio, rate, subtype="FLOAT")
        made["copies/a0193_resaved"] = Written(1.5, 1, "wav")
    path = _tone(lib / "flac" / "x7.flac", 2750, 0.5)
    tags = mutagen.flac.FLAC(path)
    tags["TITLE"] = "Glass bottle shatters"
    tags.save()
    made["flac/x7"] = Written(0.5, 1, "flac", "glass", "vorbis", ["vorbis"])
    door = _tone(lib / "ucs" / "DOORWood_Creaky door opens slowly_ACME_LIB.wav", 3250, 1.5)
    made[UCS] = Written(1.5, 1, "wav", "creaky", "ucs", ["ucs"])
    audio, rate = sf.read(door, dtype="float32")
    (lib / "copies").mkdir(parents=True, exist_ok=True)
    if mp3:
        sf.write(lib / "copies" / "door_take2.mp3", audio, rate, subtype="MPEG_LAYER_III")  # re-encoded
        made["copies/door_take2"] = Written(1.5, 1, "mp3")
    sf.write(lib / "copies" / "door_quiet.wav", audio * 10 ** (-6 / 20), rate)  # 6 dB quieter: a near copy
    made["copies/door_quiet"] = Written(1.5, 1, "wav")
    _tone(lib / "notes" / "clip_07.wav", 3750, 0.5)
    (lib / "notes" / "clip_07.txt").write_text("A kettle whistles on the stove\n", encoding="utf-8")
    made["notes/clip_07"] = Written(0.5, 1, "wav", "kettle", "sidecar", ["sidecar"])
    _tone(lib / "take_0042.wav", 4250, 0.5)
    made["take_0042"] = Written(0.5, 1, "wav")
    _tone(lib / "blackcat.wav", 4750, 0.5)
    made["blackcat"] = Written(0.5, 1, "wav", "cat", "name")
    _tone(lib / "birds" / "ZOOM0001.wav", 5250, 0.5, channels=2)
    made["birds/ZOOM0001"] = Written(0.5, 2, "wav", "bird", "folder")
    rng = np.random.default_rng(0)
    long = 0.003 * rng.standard_normal(int(LONG_SECONDS * SR))
    t = np.arange(int((EVENT[1] - EVENT[0]) * SR)) / SR
    at = int(EVENT[0] * SR)
    long[at:at + len(t)] += 0.5 * np.sin(2 * np.pi * EVENT_HZ * t)
    (lib / "field").mkdir()
    sf.write(lib / "field" / "walk_2024-06-01.wav", long.astype(np.float32), SR)
    made[LONG] = Written(LONG_SECONDS, 1, "wav")
    (lib / "misc").mkdir()
    sf.write(lib / "misc" / "untitled.wav", np.zeros(SR, np.float32), SR)
    made[SILENT] = Written(1.0, 1, "wav")
    (lib / "misc" / "broken.wav").write_bytes(b"RIFF\x24\x00\x00\x00WAVEfmt " + b"\x00" * 20)  # no data chunk
    return made


class Cli:
    """``python -m mlatr`` in processes of their own, with the band tower (module docstring)."""

    def __init__(self, log: Path):
        self.log = log
        self.env = dict(os.environ, BAND_TOWER_LOG=str(log), OMP_NUM_THREADS="1",
                        PYTHONPATH=os.pathsep.join([str(TESTS / "band_process"), str(TESTS), str(TESTS.parent / "src"),
                                                    os.environ.get("PYTHONPATH", "")]))

    def start(self, *argv) -> subprocess.Popen:
        return subprocess.Popen([sys.executable, "-m", "mlatr", *map(str, argv)], env=self.env, text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)

    @staticmethod
    def done(proc: subprocess.Popen, code: int = 0) -> str:
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == code, (proc.args, proc.returncode, out, err)
        assert "Traceback" not in err, err
        return out

    def run(self, *argv, code: int = 0) -> str:
        return self.done(self.start(*argv), code)

    def encoded(self) -> int:
        """Waveforms the audio side has encoded so far, in every process."""
        return sum(int(n) for n in self.log.read_text().split()) if self.log.is_file() else 0


def _results(out: str) -> list[dict]:
    return json.loads(out)["results"]


def _keyword_origin(hit: dict) -> str | None:
    found = [e.get("origin") for e in hit["evidence"] if e["source"] == "keyword"]
    return found[0] if found else None


@dataclass
class Run:
    """The folder, its index and what each command said, all commands but the sync run once for the module."""

    lib: Path
    idx: Path
    made: dict[str, Written]
    cli: Cli
    built: str  # index build's stdout
    said: dict[str, str]  # each search's and index duplicates' stdout
    words: str  # the query whose words the clips' own texts hold
    facets: dict[str, dict]  # each clip's facets, and its embedding and the long file's segment times, as built
    embeddings: dict[str, np.ndarray]
    segment_times: np.ndarray
    csv: Path


@pytest.fixture(scope="module")
def run(served_toy, tmp_path_factory) -> Run:
    """Build the folder's index (``--skip-bad``: the broken file), then run the searches and index duplicates side
    by side, each in its own process."""
    tmp = tmp_path_factory.mktemp("sound-library")
    lib, idx = tmp / "Sounds", tmp / "sounds.idx"
    made = make_folder(lib)
    cli = Cli(tmp / "encoded.log")
    built = cli.run("index", "build", lib, "--model", served_toy[1], "-o", idx, "--skip-bad", "--no-progress",
                    "--workers", "1")
    index = Index.load(idx)
    live = index.tables.live_rows()
    query = _tone(tmp / "query.wav", EVENT_HZ, 1.0)  # the long recording's tone
    words = " ".join(w.word for w in made.values() if w.word)
    k = str(len(made) + 5)
    runs = {
        "origins": cli.start("search", idx, words, "-k", k, "--json", "--csv", tmp / "hits.csv"),
        "phrase": cli.start("search", idx, '"great hall"', "-k", k, "--json"),
        "not": cli.start("search", idx, "door -creaky", "-k", k, "--json"),
        "where": cli.start("search", idx, "a short sound", "-k", k, "--where", SHORT_MONO_WAV, "--json"),
        "sound": cli.start("search", idx, "--audio", query, "-k", "3", "--json"),
        "duplicates": cli.start("index", "duplicates", idx, "--json", "--no-progress"),
    }
    said = {name: cli.done(proc) for name, proc in runs.items()}
    return Run(lib, idx, made, cli, built, said, words,
               {cid: index.clip_columns["facets"][row] for row, cid in enumerate(index.ids)},
               {cid: np.array(index.embeddings[row]) for cid, row in live.items()},
               index.segment_columns.times[index.segment_columns.clip == live[LONG]].copy(), tmp / "hits.csv")


def test_index_build_skips_the_broken_file_and_counts_what_each_file_says(run):
    assert f"wrote {run.idx}: {len(run.made)} clips" in run.built and "skipped 1 bad file(s)" in run.built
    skipped = [json.loads(line) for line in Path(f"{run.idx}.skipped.jsonl").read_text(encoding="utf-8").splitlines()]
    assert [Path(s["file"]).name for s in skipped] == ["broken.wav"] and skipped[0]["reason"]
    metadata = next(line for line in run.built.splitlines() if line.startswith("metadata: "))
    for kind, n in Counter(tag for w in run.made.values() for tag in w.tags).items():
        assert f" {n} {kind}" in metadata, (kind, n, metadata)
    assert sorted(run.facets) == sorted(run.made)
    for cid, written in run.made.items():
        facets = run.facets[cid]
        assert (facets["channels"], facets["format"]) == (written.channels, written.format), cid
        assert facets["duration"] == pytest.approx(written.seconds, abs=0.1), cid  # an MP3's padding
    assert [cid for cid, f in run.facets.items() if f["silent"]] == [SILENT]
    assert len(run.segment_times) == int(LONG_SECONDS - SEGMENT_SECONDS) + 1  # 2 s every 1 s over 75 s


def test_the_evidence_names_where_each_caption_came_from_and_silence_is_left_out(run):
    """Each clip whose own text holds a word of the query has it as keyword evidence, named by where that text
    was written (bext, id3, vorbis, ucs, sidecar, name, folder); the silent clip is not returned."""
    hits = _results(run.said["origins"])
    assert {h["id"] for h in hits} == set(run.made) - {SILENT}
    assert {h["id"]: _keyword_origin(h) for h in hits if _keyword_origin(h)} == {
        cid: w.origin for cid, w in run.made.items() if w.word}


def test_the_csv_export_holds_what_the_json_results_hold(run):
    rows = list(csv.DictReader(io.StringIO(run.csv.read_text(encoding="utf-8"))))
    _same_as_json(rows, _results(run.said["origins"]), run.words)  # each row's duration read from its file


def test_a_phrase_is_required_and_a_minus_word_leaves_out_the_clip_that_holds_it(run):
    hits = _results(run.said["phrase"])  # the iXML note alone holds "great hall"
    assert [h["id"] for h in hits] == ["bwf/take_0017"] and _keyword_origin(hits[0]) == "ixml"
    assert {h["id"] for h in _results(run.said["not"])} == set(run.made) - {SILENT, UCS}


def test_a_where_filter_keeps_the_short_mono_wavs(run):
    assert {h["id"] for h in _results(run.said["where"])} == {
        cid for cid, w in run.made.items() if w.format == "wav" and w.channels == 1 and w.seconds < 1} - {SILENT}


def test_the_long_recordings_tone_is_found_with_the_time_of_its_segment(run):
    best = _results(run.said["sound"])[0]
    assert best["id"] == LONG and best["end"] - best["start"] == SEGMENT_SECONDS
    assert best["start"] <= EVENT[0] and EVENT[1] <= best["end"]
    assert [best["start"], best["end"]] in run.segment_times.tolist()


def test_duplicates_list_the_resave_the_reencode_and_the_quieter_copy(run):
    """The WAV re-save of the Ogg is the same audio; the MP3 re-encode and the quieter copy of the UCS file are
    listed with it (the same audio or near copies: an MP3 of a tone may be within 45 dB of it); nothing else."""
    dup = json.loads(run.said["duplicates"])
    groups = [set(g["ids"]) for g in dup["exact"] + dup["near"]]
    resave = {"farm/a0193", "copies/a0193_resaved"} & set(run.made)
    if resave:
        assert resave in [set(g["ids"]) for g in dup["exact"]]
    door = {UCS, "copies/door_quiet"} | ({"copies/door_take2"} & set(run.made))
    assert set().union(*(g for g in groups if g & door)) == door
    assert "copies/door_quiet" in set().union(*(set(g["ids"]) for g in dup["near"]))
    assert set().union(*groups) == door | resave


def test_sync_follows_a_rename_and_moves_without_encoding_again(run):
    """The last of the module: it changes the folder. The band tower's count of what every process encoded does
    not move; the rows, their vectors and the long file's segments follow the files."""
    encoded = run.cli.encoded()
    assert encoded > 0  # the band tower encoded the folder at build: the count is live
    moves = {"blackcat": "animals/blackcat", "take_0042": "take_0042_final", LONG: "field/2024/walk"}
    for old, new in moves.items():
        (run.lib / new).parent.mkdir(parents=True, exist_ok=True)
        (run.lib / f"{old}.wav").rename(run.lib / f"{new}.wav")
    out = run.cli.run("index", "sync", run.lib, run.idx, "--skip-bad", "--no-progress")
    assert run.cli.encoded() == encoded  # not one window of a renamed or moved file
    for old, new in moves.items():
        assert f"moved: {old} -> {new}" in out
    synced = Index.load(run.idx)
    rows = synced.tables.live_rows()
    assert sorted(rows) == sorted(moves.get(cid, cid) for cid in run.made)
    for cid, vector in run.embeddings.items():
        assert np.array_equal(np.asarray(synced.embeddings[rows[moves.get(cid, cid)]]), vector), cid
    for new in moves.values():
        assert synced.paths[rows[new]] == str(run.lib / f"{new}.wav")
    assert np.array_equal(synced.segment_columns.times[synced.segment_columns.clip == rows[moves[LONG]]],
                          run.segment_times)
