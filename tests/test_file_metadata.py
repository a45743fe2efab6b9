"""What a sound file says about itself: BWF bext / iXML written here byte by byte (independent of the reader),
ID3 / Vorbis / FLAC tags written with mutagen, UCS names, joined words, folder words; captions in precedence
order with their sources, keywords, technical facets (loudness against the BS.1770 formula), silence, and
hostile tags counted and skipped, never a crash."""

import importlib.util
import json
import math
import struct
from pathlib import Path

import mutagen.flac
import mutagen.id3
import mutagen.oggopus
import mutagen.oggvorbis
import mutagen.wave
import numpy as np
import pyloudnorm
import pytest
import scipy.signal
import soundfile as sf

from mlatr.audio import file_tags
from mlatr.audio.file_tags import read_file_tags
from mlatr.audio.loudness import LoudnessMeter
from mlatr.cli import main
from mlatr.data.file_metadata import CAPTION_SOURCES, measure_clips, metadata_report, source_of
from mlatr.data.importers.folder import import_folder
from mlatr.data.manifest import Clip, Manifest
from mlatr.data.sound_names import split_joined, split_word
from mlatr.data.ucs import UCS_TABLE, parse_ucs_name, ucs_categories
from mlatr.errors import InputError
from mlatr.inference.worker_pool import ordered_map
from mlatr.search import milvus
from mlatr.search.columns import CaptionColumns, ClipColumns
from mlatr.search.index import Index

#: BS.1770-4 Table 1 and 2: the K-weighting stages' coefficients at 48 kHz, as the standard prints them.
BS1770_STAGE1 = ([1.53512485958697, -2.69169618940638, 1.19839281085285], [1.0, -1.69065929318241, 0.73248077421585])
BS1770_STAGE2 = ([1.0, -2.0, 1.0], [1.0, -1.99004745483398, 0.99007225036621])


def sine(path, freq=997.0, amplitude=0.5, seconds=2.0, sr=48000, channels=1, subtype="FLOAT", phase=0.0,
         fade=0.0):
    """A sine written to ``path``; ``fade``: seconds of Hann ramp at each end (an abrupt start overshoots when
    band-limited, which a true-peak meter rightly reads)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    t = np.arange(int(seconds * sr)) / sr
    x = amplitude * np.sin(2 * np.pi * freq * t + phase)
    n = int(fade * sr)
    if n:
        ramp = np.hanning(2 * n)
        x[:n] *= ramp[:n]
        x[-n:] *= ramp[n:]
    x = x.astype(np.float32)
    fmt = "OGG" if path.suffix in (".ogg", ".opus") else None
    sf.write(path, np.repeat(x[:, None], channels, axis=1), sr, subtype=subtype, format=fmt)
    return path


def chunk(kind: bytes, body: bytes) -> bytes:
    return kind + struct.pack("<I", len(body)) + body + (b"\0" if len(body) % 2 else b"")


def bwf(path, *, description=b"", originator=b"", reference=b"", date=b"", time=b"", ixml=None, bext=None,
        frames=4800, sr=48000, channels=2, bits=24):
    """A WAV written byte by byte: fmt, bext (the fixed struct), data (a 997 Hz tone), then iXML."""
    path.parent.mkdir(parents=True, exist_ok=True)
    width = bits // 8
    fmt = struct.pack("<HHIIHH", 1, channels, sr, sr * channels * width, channels * width, bits)
    if bext is None:
        bext = struct.pack("<256s32s32s10s8s", description, originator, reference, date, time) + bytes(602 - 338)
    t = np.arange(frames) / sr
    samples = np.round(0.25 * np.sin(2 * np.pi * 997 * t) * (2 ** (bits - 1) - 1)).astype(np.int32)
    frame_bytes = b"".join(int(v).to_bytes(4, "little", signed=True)[:width] * channels for v in samples)
    body = b"WAVE" + chunk(b"fmt ", fmt) + chunk(b"bext", bext) + chunk(b"data", frame_bytes)
    if ixml is not None:
        body += chunk(b"iXML", ixml)
    path.write_bytes(b"RIFF" + struct.pack("<I", len(body)) + body)
    return path


IXML = (b'<?xml version="1.0" encoding="UTF-8"?><BWFXML><IXML_VERSION>2.0</IXML_VERSION>'
        b"<PROJECT>Castle</PROJECT><SCENE>12</SCENE><TAKE>3</TAKE><NOTE>recorded in the great hall</NOTE>"
        b"<USER><KEYWORDS>Door; Slam, Wood</KEYWORDS><UNKNOWN>ignored</UNKNOWN></USER></BWFXML>")


def clips_by_id(manifest):
    return {c.id: c for c in manifest.clips}


# ---- tags ------------------------------------------------------------------------------------------------
def test_bwf_bext_and_ixml_come_before_the_name_with_their_sources_and_facets(tmp_path):
    bwf(tmp_path / "lib" / "DOOR_0001.wav", description=b"Heavy wooden door slams shut", originator=b"ACME Field",
        reference=b"REF-42", date=b"2024-05-01", time=b"12:34:56", ixml=IXML)
    clip = import_folder([tmp_path / "lib"])[0]
    assert clip.captions == {"eng": ["Heavy wooden door slams shut", "recorded in the great hall", "door"]}
    assert clip.extra["caption_sources"] == {"eng": ["bext", "ixml", "name"]}
    facets = clip.extra["facets"]
    assert {k: facets[k] for k in ("sample_rate", "channels", "bit_depth", "format", "codec", "duration")} == {
        "sample_rate": 48000, "channels": 2, "bit_depth": 24, "format": "wav", "codec": "pcm_24", "duration": 0.1}
    assert {k: facets[k] for k in ("creator", "originator_reference", "origination_date", "project", "scene",
                                   "take", "keywords", "tags")} == {
        "creator": "ACME Field", "originator_reference": "REF-42", "origination_date": "2024-05-01",
        "project": "Castle", "scene": "12", "take": "3", "keywords": ["door", "slam", "wood"],
        "tags": ["bext", "ixml"]}
    assert facets["file_size"] == (tmp_path / "lib" / "DOOR_0001.wav").stat().st_size


def test_rf64_bext_is_read_past_a_data_chunk_sized_by_ds64(tmp_path):
    frames = b"\0\0" * 100
    ds64 = struct.pack("<QQQI", 0, len(frames), 100, 0)
    bext = struct.pack("<256s32s32s10s8s", b"Rain on a tin roof", b"", b"", b"", b"") + bytes(264)
    body = (b"WAVE" + chunk(b"ds64", ds64) + chunk(b"fmt ", struct.pack("<HHIIHH", 1, 1, 8000, 16000, 2, 16))
            + b"data" + struct.pack("<I", 0xFFFFFFFF) + frames + chunk(b"bext", bext))
    path = tmp_path / "long.wav"
    path.write_bytes(b"RF64" + struct.pack("<I", 0xFFFFFFFF) + body)
    tags = read_file_tags(path)
    assert tags.descriptions() == [("bext", "Rain on a tin roof")] and tags.skipped == []


def _mp3(path, seconds=0.5):
    path.parent.mkdir(parents=True, exist_ok=True)
    t = np.arange(int(16000 * seconds)) / 16000
    sf.write(path, (0.3 * np.sin(2 * np.pi * 440 * t)).astype(np.float32), 16000, format="MP3")
    return path


def test_id3_vorbis_and_flac_tags_give_captions_keywords_creator_and_album(tmp_path):
    lib = tmp_path / "lib"
    mp3 = _mp3(lib / "track07.mp3")
    id3 = mutagen.id3.ID3()
    id3.add(mutagen.id3.TIT2(encoding=3, text="Thunder roll"))
    id3.add(mutagen.id3.COMM(encoding=3, lang="eng", desc="", text="Distant thunder rumbling over hills"))
    id3.add(mutagen.id3.COMM(encoding=3, lang="eng", desc="iTunNORM", text="00000 11111"))
    id3.add(mutagen.id3.TCON(encoding=3, text="Weather"))
    id3.add(mutagen.id3.TPE1(encoding=3, text="Jane Doe"))
    id3.add(mutagen.id3.TALB(encoding=3, text="Storm Library"))
    id3.add(mutagen.id3.TXXX(encoding=3, desc="KEYWORDS", text="thunder, storm"))
    id3.save(mp3)
    ogg = sine(lib / "b" / "x1.ogg", sr=16000, subtype="VORBIS")
    tags = mutagen.oggvorbis.OggVorbis(ogg)
    tags["DESCRIPTION"], tags["TITLE"], tags["GENRE"] = "A kettle whistles", "x1", "Kitchen"
    tags.save()
    opus = sine(lib / "c" / "y.opus", sr=48000, subtype="OPUS")
    tags = mutagen.oggopus.OggOpus(opus)
    tags["COMMENT"], tags["ARTIST"] = "Waves crash on rocks", "Sea Team"
    tags.save()
    flac = sine(lib / "c" / "z.flac", sr=16000, subtype="PCM_16")
    tags = mutagen.flac.FLAC(flac)
    tags["TITLE"], tags["KEYWORDS"], tags["ALBUM"] = "Glass breaking", "glass; shatter", "Impacts Vol 1"
    tags.save()
    clips = clips_by_id(import_folder([lib]))
    mp3c = clips["track07"]
    assert mp3c.captions["eng"][:2] == ["Distant thunder rumbling over hills", "Thunder roll"]
    assert mp3c.extra["caption_sources"]["eng"][:2] == ["id3", "id3"]
    assert {k: mp3c.extra["facets"][k] for k in ("creator", "album", "title", "format", "codec", "bit_depth")} == {
        "creator": "Jane Doe", "album": "Storm Library", "title": "Thunder roll", "format": "mp3", "codec": "mp3",
        "bit_depth": None}
    assert sorted(mp3c.extra["facets"]["keywords"]) == ["storm", "thunder", "weather"]
    # a title equal to the file's name says nothing: not a caption
    assert clips["b/x1"].captions["eng"][0] == "A kettle whistles" and "x1" not in clips["b/x1"].captions["eng"]
    assert clips["b/x1"].extra["caption_sources"]["eng"][0] == "vorbis"
    assert clips["b/x1"].extra["facets"]["keywords"] == ["kitchen"]
    assert clips["c/y"].captions["eng"][0] == "Waves crash on rocks"
    assert clips["c/y"].extra["facets"]["creator"] == "Sea Team" and clips["c/y"].extra["facets"]["codec"] == "opus"
    assert clips["c/z"].captions["eng"][0] == "Glass breaking"
    assert clips["c/z"].extra["facets"]["album"] == "Impacts Vol 1"
    assert clips["c/z"].extra["facets"]["keywords"] == ["glass", "shatter"]


def test_id3_chunk_of_a_wav_and_riff_info_are_read(tmp_path):
    path = sine(tmp_path / "a.wav", sr=16000, subtype="PCM_16")
    wave = mutagen.wave.WAVE(path)
    wave.add_tags()
    wave.tags.add(mutagen.id3.TIT3(encoding=3, text="Footsteps on gravel"))
    wave.save()
    assert read_file_tags(path).descriptions() == [("id3", "Footsteps on gravel")]
    info = b"INFO" + chunk(b"ICMT", b"A bell rings twice\0") + chunk(b"IGNR", b"Bells\0")
    data = path.read_bytes()
    data = data[:4] + struct.pack("<I", struct.unpack("<I", data[4:8])[0] + 8 + len(info)) + data[8:] + chunk(
        b"LIST", info)
    path.write_bytes(data)
    tags = read_file_tags(path)
    # a description (ID3 TIT3) before a comment (INFO ICMT)
    assert tags.descriptions() == [("id3", "Footsteps on gravel"), ("info", "A bell rings twice")]
    assert tags.keywords == ["bells"]


def test_software_names_addresses_and_numbers_in_tags_are_no_captions(tmp_path):
    """The real-sound corpus's tag texts are mostly "Processed by SoX", "Made with Sonic Foundry ACID 4", a
    URL or the file's own name again."""
    ogg = sine(tmp_path / "lib" / "bird4_01.ogg", sr=16000, subtype="VORBIS")
    tags = mutagen.oggvorbis.OggVorbis(ogg)
    tags["COMMENT"], tags["TITLE"], tags["DESCRIPTION"] = "Processed by SoX", "bird4 01", "www.example.com"
    tags.save()
    wav = sine(tmp_path / "lib" / "hit.wav", sr=16000, subtype="PCM_16")
    info = b"INFO" + chunk(b"ICMT", b"Made with Sonic Foundry ACID 4\0") + chunk(b"INAM", b"Fire small missile\0")
    data = wav.read_bytes()
    wav.write_bytes(data[:4] + struct.pack("<I", struct.unpack("<I", data[4:8])[0] + 8 + len(info)) + data[8:]
                    + chunk(b"LIST", info))
    clips = clips_by_id(import_folder([tmp_path / "lib"]))
    assert clips["bird4_01"].extra["caption_sources"]["eng"] == ["name"] and "tags" not in clips["bird4_01"].extra[
        "facets"]
    assert clips["hit"].captions["eng"] == ["Fire small missile", "hit"]
    assert clips["hit"].extra["facets"]["tags"] == ["info"] and clips["hit"].extra["facets"]["title"] == \
        "Fire small missile"


def _atom(kind: bytes, body: bytes) -> bytes:
    return struct.pack(">I", 8 + len(body)) + kind + body


def test_mp4_atoms_give_description_title_and_keywords(tmp_path):
    """An M4A's iTunes atoms, written byte by byte: ftyp, moov/udta/meta/ilst with UTF-8 data atoms."""
    def item(kind, text):
        return _atom(kind, _atom(b"data", struct.pack(">II", 1, 0) + text.encode()))

    ilst = _atom(b"ilst", item(b"\xa9nam", "Purr") + item(b"\xa9cmt", "A cat purrs on a lap")
                 + item(b"\xa9gen", "Animals") + item(b"\xa9ART", "Kim Lee"))
    hdlr = _atom(b"hdlr", bytes(8) + b"mdir" + bytes(12) + b"\0")
    meta = _atom(b"meta", bytes(4) + hdlr + ilst)
    path = tmp_path / "cat.m4a"
    path.write_bytes(_atom(b"ftyp", b"M4A " + bytes(4) + b"M4A mp42isom") + _atom(b"moov", _atom(b"udta", meta)))
    tags = read_file_tags(path)
    assert tags.descriptions() == [("mp4", "A cat purrs on a lap"), ("mp4", "Purr")] and tags.skipped == []
    assert tags.keywords == ["animals"] and tags.first("artist") == "Kim Lee"


# ---- UCS -------------------------------------------------------------------------------------------------
def test_the_shipped_ucs_list_states_its_source_and_licence():
    data = json.loads(UCS_TABLE.read_text(encoding="utf-8"))
    assert "universalcategorysystem.com" in data["source"] and "CC0" in data["licence"]
    cats = ucs_categories()
    assert len(cats) == len(data["categories"]) > 700
    door = cats["DOORWood"]
    assert (door.category, door.subcategory) == ("DOORS", "WOOD") and door.explanation and door.synonyms


def test_ucs_names_parse_and_malformed_or_unknown_ones_are_simply_not_ucs():
    name = parse_ucs_name("DOORWood-Castle_Creaky door opens slowly_ACME_LIB_take 2_mono")
    assert (name.category.cat_id, name.user_category, name.fx_name, name.creator_id, name.source_id,
            name.user_data) == ("DOORWood", "Castle", "Creaky door opens slowly", "ACME", "LIB", "take 2_mono")
    assert name.caption() == "Creaky door opens slowly, doors wood"
    assert parse_ucs_name("WOODBrk_Wood breaks_ME_LIB").caption() == "Wood breaks, wood break"
    assert parse_ucs_name("AIRMisc_Air leaking_ME_LIB").caption() == "Air leaking"  # MISC says nothing
    for stem in ("DOORWood_Creaky door", "doorwood_Creaky door_ACME_LIB", "NOPEZzz_Thing_A_B", "DOORWood__ACME_LIB",
                 "DOORWood_x_ACME_" + "L" * 300, "", "____"):
        assert parse_ucs_name(stem) is None, stem


def test_ucs_named_files_give_the_fx_name_category_and_creator(tmp_path):
    lib = tmp_path / "lib"
    sine(lib / "Castle" / "DOORWood_Creaky door opens slowly_ACME_LIB.wav", sr=16000, subtype="PCM_16")
    sine(lib / "NOPEZzz_Thing_A_B.wav", sr=16000, subtype="PCM_16")
    clips = clips_by_id(import_folder([lib]))
    ucs = clips["Castle/DOORWood_Creaky door opens slowly_ACME_LIB"]
    assert ucs.captions["eng"] == ["Creaky door opens slowly, doors wood",
                                   "Creaky door opens slowly, doors wood, castle"]
    assert ucs.extra["caption_sources"]["eng"] == ["ucs", "folder"]
    facets = ucs.extra["facets"]
    assert {k: facets[k] for k in ("ucs_cat_id", "ucs_category", "ucs_subcategory", "ucs_fx_name", "ucs_creator",
                                   "ucs_source", "keywords", "folder", "library")} == {
        "ucs_cat_id": "DOORWood", "ucs_category": "DOORS", "ucs_subcategory": "WOOD",
        "ucs_fx_name": "Creaky door opens slowly", "ucs_creator": "ACME", "ucs_source": "LIB",
        "keywords": ["doors", "wood"], "folder": "Castle", "library": "Castle"}
    other = clips["NOPEZzz_Thing_A_B"]  # an unknown CatID: its words, no UCS facet
    assert other.extra["caption_sources"]["eng"] == ["name"] and "ucs_cat_id" not in other.extra["facets"]


# ---- names and folders -----------------------------------------------------------------------------------
@pytest.mark.parametrize("word,pieces", [
    ("blackcat", ["black", "cat"]), ("doorslam", ["door", "slam"]), ("dogbark", ["dog", "bark"]),
    ("woodendoorcreak", ["wooden", "door", "creak"]), ("zombiegrowl", ["zombie", "growl"]),
    ("thunderclap", ["thunderclap"]), ("footsteps", ["footsteps"]), ("creaky", ["creaky"]),  # known words
    ("woosh", ["woosh"]), ("bgm", ["bgm"]), ("sfx", ["sfx"]), ("mp3", ["mp3"]),  # no one-letter piece, short
])
def test_joined_words_split_only_where_the_word_is_unknown(word, pieces):
    assert split_word(word) == pieces


def test_numbered_files_in_a_folder_joined_names_and_meaningless_names(tmp_path):
    lib = tmp_path / "lib"
    for name in ("birds/01.wav", "birds/rec_0042.wav", "blackcat.wav", "ZOOM0001.wav", "Animals/BirdSong/a1.wav"):
        sine(lib / name, sr=16000, subtype="PCM_16", seconds=0.25)
    clips = clips_by_id(import_folder([lib]))
    got = {cid: (c.captions["eng"], c.extra["caption_sources"]["eng"]) for cid, c in clips.items()}
    assert got == {
        "birds/01": (["birds"], ["name"]),  # no words of its own: its folder's
        "birds/rec_0042": (["rec", "rec, birds"], ["name", "folder"]),
        "blackcat": (["black cat"], ["name"]),
        "ZOOM0001": (["zoom"], ["name"]),
        "Animals/BirdSong/a1": (["a", "a, animals bird song"], ["name", "folder"]),
    }
    assert split_joined("blackcat meows") == "black cat meows"
    # --no-folder-labels: neither labels nor the folders' words
    plain = clips_by_id(import_folder([lib], labels_from_folder=False))
    assert plain["birds/rec_0042"].captions["eng"] == ["rec"] and plain["birds/rec_0042"].labels == []


def test_a_folder_name_finds_its_numbered_files_in_an_index_built_from_the_folder(tmp_path, served_toy, capsys):
    """Was: "bird" said nothing relevant with 8 files in birds/ (only their label had the word)."""
    import mlatr

    lib = tmp_path / "lib"
    for i in range(3):  # a recorder's names: the only word in them is "zoom"
        sine(lib / "birds" / f"ZOOM000{i + 1}.wav", freq=2000 + 300 * i, sr=16000, seconds=0.5)
        sine(lib / "machines" / f"ZOOM001{i + 1}.wav", freq=100 + 20 * i, sr=16000, seconds=0.5)
    index = Index.build(mlatr.load(served_toy[1], device="cpu"), lib, progress=False)
    assert index.clip_columns["facets"][0]["silent"] is False  # measured for the clips encoded
    assert index.clip_columns["caption_sources"][0] == {"eng": ["name", "folder"]}
    hits = index.search_text("bird", k=6, rank="hybrid")
    assert sorted(h.id for h in hits[:3]) == ["birds/ZOOM0001", "birds/ZOOM0002", "birds/ZOOM0003"]
    assert any(e.source == "keyword" for e in hits[0].evidence)
    # the command says what it found, and stores the same columns
    assert main(["index", "build", str(lib), "--model", str(served_toy[1]), "-o", str(tmp_path / "x.idx"),
                 "--no-progress"]) == 0
    assert "metadata: 6 from names, 6 with folder words" in capsys.readouterr().out
    built = Index.load(tmp_path / "x.idx")
    assert built.clip_columns["facets"][0]["loudness_lufs"] == index.clip_columns["facets"][0]["loudness_lufs"]


# ---- facets -------------------------------------------------------------------------------------------
def _bs1770_sine_lufs(amplitude, freq, channels, sr=48000):
    """Integrated loudness of a steady sine by BS.1770's formula: -0.691 + 10 log10(sum over channels of the
    K-weighted mean square), the K-weighting gain from the standard's own 48 kHz coefficients."""
    w = 2 * np.pi * freq / sr
    gain = abs(scipy.signal.freqz(*BS1770_STAGE1, [w])[1][0] * scipy.signal.freqz(*BS1770_STAGE2, [w])[1][0])
    return -0.691 + 10 * math.log10(channels * amplitude ** 2 / 2 * gain ** 2)


def test_loudness_true_peak_and_silence_facets_against_independent_values(tmp_path):
    lib = tmp_path / "lib"
    sine(lib / "mono.wav", amplitude=0.5, seconds=3.0)
    sine(lib / "stereo.wav", amplitude=0.25, seconds=3.0, channels=2)
    # samples at +-0.354, the peaks of 0.5 halfway between them (on the 4x grid)
    sine(lib / "fs4.wav", freq=12000, amplitude=0.5, phase=math.pi / 4, seconds=1.0, fade=0.02)
    sf.write(lib / "digital-silence.wav", np.zeros(48000, np.float32), 48000)
    rng = np.random.default_rng(0)
    sf.write(lib / "hiss.wav", (1e-4 * rng.standard_normal(48000)).astype(np.float32), 48000, subtype="FLOAT")
    sine(lib / "quiet.wav", amplitude=0.01, seconds=1.0)  # -40 dBFS: quiet, not silent
    sine(lib / "click.wav", amplitude=0.5, seconds=0.1)  # shorter than a gating block
    facets = {c.id: c.extra["facets"] for c in import_folder([lib])}
    assert facets["mono"]["loudness_lufs"] == pytest.approx(_bs1770_sine_lufs(0.5, 997, 1), abs=0.01)
    assert facets["stereo"]["loudness_lufs"] == pytest.approx(_bs1770_sine_lufs(0.25, 997, 2), abs=0.01)
    assert facets["fs4"]["peak_dbfs"] == pytest.approx(20 * math.log10(0.5 * math.sqrt(0.5)), abs=0.01)
    assert facets["fs4"]["true_peak_dbtp"] == pytest.approx(20 * math.log10(0.5), abs=0.03)  # 3 dB over the samples
    assert facets["mono"]["channels"] == 1 and facets["stereo"]["channels"] == 2
    assert facets["mono"]["bit_depth"] == 32 and facets["mono"]["codec"] == "float"
    silent = {cid for cid, f in facets.items() if f["silent"]}
    assert silent == {"digital-silence", "hiss"}
    assert facets["digital-silence"]["loudness_lufs"] is None and facets["digital-silence"]["peak_dbfs"] is None
    assert facets["click"]["loudness_lufs"] is None and facets["click"]["silent"] is False
    no_loudness = import_folder([lib], loudness=False)[0].extra["facets"]
    assert "loudness_lufs" not in no_loudness and no_loudness["sample_rate"] == 48000


def test_an_index_builds_workers_measure_loudness_as_one_process_does(tmp_path):
    """The clips a folder's build encodes are measured in its worker processes (issue 48: every core), in order:
    the BS.1770 values, and a file that does not decode left unmeasured."""
    lib = tmp_path / "lib"
    for k in range(5):
        sine(lib / f"s{k}.wav", amplitude=0.5 / (k + 1), seconds=1.0)
    (lib / "broken.wav").write_bytes((lib / "s0.wav").read_bytes())
    listed = import_folder([lib], loudness=False)
    assert {c.id for c in listed} == {"s0", "s1", "s2", "s3", "s4", "broken"}
    (lib / "broken.wav").write_bytes((lib / "s0.wav").read_bytes()[:2000])  # truncated since it was listed
    asked = []

    def two_workers(work, paths):
        asked.append(len(paths))
        return ordered_map(work, paths, workers=2)

    measured = measure_clips(listed.clips, listed.root, map_files=two_workers)
    facets = {c.id: c.extra["facets"] for c in listed}
    assert asked == [6] and measured == 5 and "loudness_lufs" not in facets["broken"]
    for k in range(5):
        assert facets[f"s{k}"]["loudness_lufs"] == pytest.approx(_bs1770_sine_lufs(0.5 / (k + 1), 997, 1), abs=0.01)


def test_blockwise_loudness_equals_pyloudnorm_on_the_whole_signal():
    rng = np.random.default_rng(3)
    for rate, channels, seconds in ((48000, 2, 2.37), (44100, 5, 1.3), (16000, 1, 0.43), (22050, 3, 4.0)):
        x = rng.standard_normal((int(rate * seconds), channels)) * 0.1 * np.linspace(0.01, 1, int(rate * seconds))[:,
                                                                                                              None]
        meter = LoudnessMeter(rate, channels)
        for start in range(0, len(x), 6151):
            meter.feed(x[start:start + 6151].astype(np.float32))
        want = pyloudnorm.Meter(rate, "DeMan").integrated_loudness(x.astype(np.float32).astype(np.float64))
        assert meter.loudness() == pytest.approx(want, abs=1e-6)


# ---- hostile tags ---------------------------------------------------------------------------------------
def test_hostile_tags_are_counted_and_skipped_and_the_clip_is_kept(tmp_path, capsys):
    lib = tmp_path / "lib"
    mp3 = _mp3(lib / "huge.mp3")
    id3 = mutagen.id3.ID3()
    id3.add(mutagen.id3.COMM(encoding=3, lang="eng", desc="", text="x" * (10 << 20)))  # 10 MB of text
    id3.add(mutagen.id3.TIT2(encoding=3, text="Still a title"))
    id3.save(mp3)
    junk = bytes(np.random.default_rng(1).integers(0, 256, 5000, dtype=np.uint8))
    bwf(lib / "junk.wav", description=b"Rain on leaves", ixml=junk)
    bwf(lib / "entity.wav", ixml=b'<?xml version="1.0"?><!DOCTYPE x [<!ENTITY a "aaaa">]><BWFXML><NOTE>&a;</NOTE>'
                                 b"</BWFXML>")
    bwf(lib / "shortbext.wav", bext=b"only ten b")
    manifest = import_folder([lib])
    clips = clips_by_id(manifest)
    assert sorted(clips) == ["entity", "huge", "junk", "shortbext"]
    assert clips["huge"].captions["eng"][0] == "Still a title"
    assert clips["huge"].extra["tag_problems"] == ["id3 comment: 10,485,760 characters (at most 4,096)"]
    assert clips["junk"].captions["eng"][0] == "Rain on leaves"
    assert clips["junk"].extra["tag_problems"][0].startswith("ixml: not well-formed XML")
    assert clips["entity"].extra["tag_problems"] == ["ixml: declares a DTD or entities (not read)"]
    assert clips["shortbext"].extra["tag_problems"][0].startswith("bext: a chunk of 10 bytes")
    assert metadata_report(manifest.clips).endswith("; 4 tag(s) unreadable or too large (skipped)")
    out = tmp_path / "m.jsonl"
    assert main(["data", "import", "-f", "folder", str(lib), "-o", str(out)]) == 0
    said = capsys.readouterr()
    assert "metadata: 1 bext, 1 id3, 4 from names; 4 tag(s) unreadable or too large (skipped)" in said.out
    assert "huge: id3 comment: 10,485,760 characters" in said.err
    assert [c.extra["tag_problems"] for c in Manifest.load(out)] == [clips[c].extra["tag_problems"]
                                                                    for c in sorted(clips)]


def test_oversized_and_truncated_tags_are_refused_unread(tmp_path, monkeypatch):
    monkeypatch.setattr(file_tags, "MAX_TAG_BYTES", 4096)
    ogg = sine(tmp_path / "big.ogg", sr=16000, subtype="VORBIS")
    tags = mutagen.oggvorbis.OggVorbis(ogg)
    tags["COMMENT"], tags["TITLE"] = "y" * 8000, "A title"
    tags.save()
    flac = sine(tmp_path / "big.flac", sr=16000, subtype="PCM_16")
    tags = mutagen.flac.FLAC(flac)
    tags["COMMENT"] = "z" * 8000
    tags.save()
    assert read_file_tags(ogg).skipped[0].startswith("vorbis: ") and read_file_tags(ogg).texts == []
    assert read_file_tags(flac).skipped[0].startswith("vorbis: 8,") and "not read" in read_file_tags(flac).skipped[0]
    wav = bwf(tmp_path / "cut.wav", description=b"A gong", ixml=IXML)
    data = wav.read_bytes()
    wav.write_bytes(data[:-40])  # the iXML chunk's end is gone
    tags = read_file_tags(wav)
    assert tags.first("description") == "A gong" and tags.skipped[0].startswith("tags: unreadable")
    (tmp_path / "noise.wav").write_bytes(b"RIFF\xff\xff\xff\xffWAVEbext\xff\xff\xff\x7f")
    assert "bext" in read_file_tags(tmp_path / "noise.wav").skipped[0]


# ---- the manifest and the index --------------------------------------------------------------------------
def test_a_hit_says_where_its_caption_came_from_in_python_the_cli_json_and_the_page(tmp_path, served_toy, capsys):
    """Issue 46: every source shown in the hit's evidence. A BWF description, an ID3 title and a folder's words
    reach a hit's caption and keyword evidence as their ``origin``, printed by the CLI beside the language and
    named in the page's own words for every source the importer records."""
    import mlatr

    lib = tmp_path / "lib"
    bwf(lib / "take_0042.wav", description=b"Distant explosion with a long rumble", sr=16000)
    mp3 = _mp3(lib / "rec_0117.mp3")
    tags = mutagen.id3.ID3()
    tags.add(mutagen.id3.TIT2(encoding=3, text="Thunder clap over the hills"))
    tags.save(mp3)
    sine(lib / "birds" / "a0193.wav", sr=16000, seconds=0.5)
    index = Index.build(mlatr.load(served_toy[1], device="cpu"), lib, progress=False)
    origin = {h.id: {e.source: e.origin for e in h.evidence} for h in index.search_text("explosion thunder birds", k=3)}
    assert origin["take_0042"]["keyword"] == "bext" and origin["rec_0117"]["keyword"] == "id3"
    assert origin["birds/a0193"]["keyword"] == "folder"
    out = tmp_path / "x.idx"
    assert main(["index", "build", str(lib), "--model", str(served_toy[1]), "-o", str(out), "--no-progress"]) == 0
    capsys.readouterr()
    assert main(["search", str(out), "explosion", "-k", "3"]) == 0
    assert 'in "Distant explosion with a long rumble" [eng, bext]' in capsys.readouterr().out
    assert main(["search", str(out), "thunder", "-k", "3", "--json"]) == 0
    found = {r["id"]: r for r in json.loads(capsys.readouterr().out)["results"]}["rec_0117"]
    assert {e.get("origin") for e in found["evidence"]} >= {"id3"}
    page = (Path(file_tags.__file__).parents[1] / "serve" / "static" / "app.js").read_text(encoding="utf-8")
    named = page[page.index("const ORIGINS"):page.index("};", page.index("const ORIGINS"))]
    assert all(f"{source}:" in named for source in CAPTION_SOURCES), named


def test_caption_sources_must_align_with_the_captions(tmp_path):
    good = {"id": "a", "audio": "a.wav", "captions": {"eng": ["x", "y"]}, "caption_sources": {"eng": ["bext", "name"]},
            "facets": {"silent": False}}
    path = tmp_path / "m.jsonl"
    path.write_text(json.dumps(good) + "\n" + json.dumps({"id": "old", "audio": "o.wav"}) + "\n")
    assert Manifest.load(path)[0].extra["caption_sources"] == {"eng": ["bext", "name"]}
    path.write_text(json.dumps(dict(good, caption_sources={"eng": ["bext"]})) + "\n")
    with pytest.raises(InputError, match=r"m.jsonl:1: caption_sources.eng: 1 source\(s\) for 2 caption"):
        Manifest.load(path)
    path.write_text(json.dumps(dict(good, facets=[1])) + "\n")
    with pytest.raises(InputError, match="facets: must be an object"):
        Manifest.load(path)


def test_facets_and_caption_sources_travel_through_every_index_format(tmp_path, vectors_meta):
    rng = np.random.default_rng(0)
    clips = [Clip(id="new", audio="n.wav", captions={"eng": ["a door", "door"]},
                  extra={"facets": {"duration": 1.5, "silent": False, "keywords": ["door"]},
                         "caption_sources": {"eng": ["bext", "name"]}}),
             Clip(id="plain", audio="p.wav", captions={"eng": ["rain"]})]  # a manifest without them
    vectors = rng.standard_normal((2, 8))
    table = ClipColumns.of_clips(clips, tmp_path, vectors / np.linalg.norm(vectors, axis=1, keepdims=True))
    arrays = Manifest(clips=clips, root=tmp_path).caption_arrays(["eng"])
    caps = CaptionColumns.of_arrays(arrays, np.tile(table.embeddings[:1], (len(arrays["texts"]), 1)))
    want = [{"duration": 1.5, "silent": False, "keywords": ["door"]}, None]
    targets = [tmp_path / "x.idx.npz", tmp_path / "x.idx"]
    for out in targets:
        Index(table, caps, vectors_meta).save(out)
    if importlib.util.find_spec("milvus_lite") is not None:
        targets.append(f"milvus:{tmp_path / 'x.db'}")
        milvus.write_milvus(targets[-1], table, caps, vectors_meta, [], replace=True)
    for out in targets:
        index = Index.load(out)
        rows = dict(zip(index.ids, range(len(index.ids)), strict=True))
        assert [index.clip_columns["facets"][rows[c]] for c in ("new", "plain")] == want, out
        assert index.clip_columns["caption_sources"][rows["new"]] == {"eng": ["bext", "name"]}
        row = rows["new"]  # a caption hit's source, from the row's two columns
        assert source_of(index.clip_columns["caption_sources"][row], index.clip_columns["captions"][row], "eng",
                         "door") == "name"
        assert source_of(None, index.clip_columns["captions"][rows["plain"]], "eng", "rain") is None


def test_recaption_keeps_the_folder_words_of_a_users_library_and_the_corpus_flags_keep_its_captions(tmp_path):
    """data recaption after data import: a user's library keeps the folders' words and split words; the real-sound
    corpus imported with --no-folder-words --no-tag-captions recaptions exactly as a manifest of names did."""
    from mlatr.data.path_captions import CaptionRules, recaption
    from mlatr.data.sound_names import name_caption

    lib = tmp_path / "lib"
    sine(lib / "birds" / "blackcat.wav", sr=16000, subtype="PCM_16", seconds=0.25)
    ogg = sine(lib / "wesnoth" / "wolf-die-4.ogg", sr=16000, subtype="VORBIS", seconds=0.25)
    tags = mutagen.oggvorbis.OggVorbis(ogg)
    tags["COMMENT"] = "A wolf howls and dies"
    tags.save()
    table = CaptionRules.load()
    user = import_folder([lib])
    recaption(user, table)
    assert clips_by_id(user)["birds/blackcat"].captions["eng"] == ["black cat", "black cat, birds"]
    corpus = import_folder([lib], folder_words=False, tag_captions=False)
    names = Manifest(clips=[Clip(id=c.id, audio=c.audio, captions={"eng": [name_caption(
        Path(c.id + Path(c.audio).suffix))]}, labels=list(c.labels)) for c in corpus.clips], root=corpus.root)
    recaption(corpus, table)
    recaption(names, table)
    assert [(c.id, c.captions, c.labels) for c in corpus.clips] == [(c.id, c.captions, c.labels) for c in names.clips]
    assert clips_by_id(corpus)["wesnoth/wolf-die-4"].extra["caption_sources"] == {"eng": ["name"]}
