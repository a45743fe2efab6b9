"""Moments inside long recordings (mlatr.search.segments): a long clip is indexed as overlapping segments
beside its pooled vector, its sound score is the higher of the two, its hit says where it matched, and it
counts once.

The model-path tests give the toy model an audio tower whose embedding is known in closed form
(``band_model``: the share of the signal's energy in each of 16 frequency bands, square-rooted), so the segment a
query should find and its cosine are computed here independently of mlatr.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import soundfile as sf

from band_model import SR, band_tower, bands
from browsertools import start_chromium
from clitools import run_cli
from mlatr.audio.io import load_audio
from mlatr.data.manifest import Manifest
from mlatr.inference.checkpoint import load_model
from mlatr.models.dual_encoder import DualEncoder
from mlatr.search import build_index
from mlatr.search.backends import NumpyBackend, ShardedSearcher
from mlatr.search.columns import SegmentColumns
from mlatr.search.eligibility import Allowed
from mlatr.search.hybrid import TextRanker
from mlatr.search.results import Hit, clock
from mlatr.search.segments import (
    MomentSearcher,
    Segmenting,
    Segments,
    segment_bounds,
    segmenting,
    stream_segments,
)

EVENT = (13.0, 13.3)  # seconds: the high tone inside the long recording


def tone(seconds: float, freq: float = 1760.0) -> np.ndarray:
    t = np.arange(int(round(seconds * SR))) / SR
    return (0.5 * np.sin(2 * np.pi * freq * t)).astype(np.float32)


@pytest.fixture
def band_library(served_toy, tmp_path, monkeypatch):
    """The toy tones plus a 30 s quiet recording holding a 0.3 s high tone at 13 s (``long``), with the band
    tower as the model's audio side; ``(manifest, checkpoint, long path, query path)``."""
    monkeypatch.setattr(DualEncoder, "encode_audio", band_tower)
    manifest, ckpt, _ = served_toy
    rng = np.random.default_rng(0)
    long = 0.003 * rng.standard_normal(30 * SR).astype(np.float32)
    a = int(EVENT[0] * SR)
    long[a:a + len(tone(EVENT[1] - EVENT[0]))] += tone(EVENT[1] - EVENT[0])
    sf.write(tmp_path / "REC_0042.wav", long, SR)
    sf.write(tmp_path / "query.wav", tone(1.0), SR)
    toy = Manifest.load(manifest)
    rows = [json.dumps({"id": c.id, "audio": str(c.audio_path(toy.root)), "captions": c.captions})
            for c in toy.clips]
    rows.append(json.dumps({"id": "REC_0042", "audio": str(tmp_path / "REC_0042.wav"),
                            "captions": {"eng": ["REC 0042"]}}))
    (tmp_path / "lib.jsonl").write_text("\n".join(rows) + "\n", encoding="utf-8")
    return tmp_path / "lib.jsonl", ckpt, tmp_path / "REC_0042.wav", tmp_path / "query.wav"


def test_segments_of_a_long_file_are_its_whole_decode_cut_every_hop(tmp_path):
    rng = np.random.default_rng(1)
    x = (0.2 * rng.standard_normal(int(23.3 * 8000))).astype(np.float32)
    sf.write(tmp_path / "a.wav", x, 8000)  # read at 16 kHz: resampled as a stream
    whole = load_audio(tmp_path / "a.wav", SR)
    got = list(stream_segments(tmp_path / "a.wav", SR, 4.0, 1.5))
    want = segment_bounds(len(whole), 4 * SR, int(1.5 * SR))
    assert [(round(a * SR), round(b * SR)) for a, b, _ in got] == want
    assert want[-1][1] == len(whole) and want[1][0] == int(1.5 * SR)  # the last one ends at the file's end
    for (_, _, w), (s, e) in zip(got, want, strict=True):
        assert len(w) == e - s and np.abs(w - whole[s:e]).max() < 2e-3
    assert [(a, b) for a, b, _ in stream_segments(tmp_path / "a.wav", SR, 30.0, 10.0)] == [(0.0, len(whole) / SR)]


def test_segmenting_defaults_follow_the_model_window_and_refuse_a_segment_longer_than_it():
    assert segmenting(10.0) == Segmenting(5.0, 2.5, 10.0)  # at most 5 s (docs/sound-libraries.md: found in 7/8)
    assert segmenting(2.0) == Segmenting(2.0, 1.0, 2.0)
    assert segmenting(10.0, enabled=False).above is None and segmenting(10.0, 4.0).hop == 2.0
    with pytest.raises(ValueError, match="longer than the model's window"):
        segmenting(2.0, 5.0)
    with pytest.raises(ValueError, match="hop"):
        Segmenting(2.0, 3.0, 2.0)


def _unit(x):
    return (x / np.linalg.norm(x, axis=-1, keepdims=True)).astype(np.float32)


def _vectors(seed: int = 0, n: int = 30, d: int = 8):
    """Clips, segments (every other clip, 1-9 each), deleted clips and the brute-force sound score."""
    rng = np.random.default_rng(seed)
    clips = _unit(rng.standard_normal((n, d)))
    owners = np.asarray([i for i in range(0, n, 2) for _ in range(1 + (i * 7) % 9)], np.int64)
    seg = _unit(rng.standard_normal((len(owners), d)))
    order = rng.permutation(len(owners))  # segments need not be stored clip after clip
    table = SegmentColumns(seg[order], owners[order], np.stack([np.arange(len(owners)), np.arange(len(owners)) + 1],
                                                               axis=1)[order])
    deleted = np.asarray([3, 4, 10], np.int64)
    return clips, table, deleted


def _segments(table: SegmentColumns, n: int, deleted: np.ndarray) -> Segments:
    gone = np.flatnonzero(np.isin(table.clip, deleted))
    return Segments(table, n, ShardedSearcher([(0, len(table), NumpyBackend(np.asarray(table.embeddings)))], gone))


def test_the_moment_searcher_gives_the_exact_top_k_of_the_best_of_vector_and_segments():
    clips, table, deleted = _vectors()
    searcher = MomentSearcher(ShardedSearcher([(0, len(clips), NumpyBackend(clips))], deleted),
                              _segments(table, len(clips), deleted))
    queries = _unit(np.random.default_rng(5).standard_normal((6, clips.shape[1])))
    for q in queries:
        sound = clips @ q
        np.maximum.at(sound, table.clip, np.asarray(table.embeddings) @ q)
        sound[deleted] = -np.inf
        for k in (1, 3, 10, 27, 40):
            want = np.lexsort((np.arange(len(sound)), -sound))[:min(k, len(clips) - len(deleted))]
            s, r = searcher.top_k(q[None], k)
            assert r[0].tolist() == want.tolist(), k
            np.testing.assert_allclose(s[0], sound[want], atol=1e-6)


def test_the_moment_searcher_keeps_to_the_clips_a_filter_allows():
    """A filter (issue 46's where, a query's NOT) reaches the segments too: the exact top k among the allowed
    clips by the higher of vector and best segment, given as an Allowed or as its mask."""
    clips, table, deleted = _vectors(seed=3)
    searcher = MomentSearcher(ShardedSearcher([(0, len(clips), NumpyBackend(clips))], deleted),
                              _segments(table, len(clips), deleted))
    mask = np.random.default_rng(7).random(len(clips)) < 0.4
    mask[[0, 2]] = True, False  # a segmented clip of each kind
    queries = _unit(np.random.default_rng(8).standard_normal((4, clips.shape[1])))
    for q in queries:
        sound = clips @ q
        np.maximum.at(sound, table.clip, np.asarray(table.embeddings) @ q)
        sound[deleted] = -np.inf
        sound[~mask] = -np.inf
        for k in (1, 4, 30):
            want = np.lexsort((np.arange(len(sound)), -sound))[:min(k, int(np.isfinite(sound).sum()))]
            for allowed in (Allowed(mask), mask):
                s, r = searcher.top_k(q[None], k, allowed=allowed)
                got = r[0][r[0] >= 0]
                assert got.tolist() == want.tolist(), k
                np.testing.assert_allclose(s[0][:len(got)], sound[want], atol=1e-6)


def test_text_ranking_scores_a_clip_by_its_best_segment_windowed_as_exact():
    clips, table, deleted = _vectors(seed=2)
    rng = np.random.default_rng(3)
    cap_clip = np.arange(len(clips))
    captions = _unit(rng.standard_normal((len(clips), clips.shape[1])))
    texts, langs = [f"clip {i} {'dog bark' if i % 4 == 0 else 'rain'}" for i in cap_clip], ["eng"] * len(clips)
    segments = _segments(table, len(clips), deleted)
    exact = TextRanker(clips, captions, cap_clip, texts, langs, deleted, segments=segments)
    searchers = (MomentSearcher(ShardedSearcher([(0, len(clips), NumpyBackend(clips))], deleted), segments),
                 ShardedSearcher([(0, len(clips), NumpyBackend(captions))], deleted))
    windowed = TextRanker(clips, captions, cap_clip, texts, langs, deleted, window=len(clips), searchers=searchers,
                          segments=segments)
    plain = TextRanker(clips, captions, cap_clip, texts, langs, deleted)
    q = _unit(rng.standard_normal(clips.shape[1]))
    sound = clips @ q
    np.maximum.at(sound, table.clip, np.asarray(table.embeddings) @ q)
    for rank in ("hybrid", "audio", "captions"):
        a, b = exact.rank(q, "dog bark", "eng", 8, rank), windowed.rank(q, "dog bark", "eng", 8, rank)
        assert [x.row for x in a] == [x.row for x in b] and np.allclose([x.score for x in a], [x.score for x in b])
        for hit in a:  # the sound evidence is the clip's sound score
            assert next(e.score for e in hit.evidence if e.source == "sound") == pytest.approx(sound[hit.row], abs=1e-6)
    raised = {x.row for x in exact.rank(q, "dog bark", "eng", 5, "audio")}
    assert raised == set(np.argsort(-np.where(np.isin(np.arange(len(sound)), deleted), -np.inf, sound))[:5])
    assert raised != {x.row for x in plain.rank(q, "dog bark", "eng", 5, "audio")}  # segments changed the answer


def test_a_long_recording_is_found_by_its_best_segment_once_and_says_where(band_library, tmp_path):
    manifest, ckpt, long, query = band_library
    loaded = load_model(ckpt)
    index = build_index(loaded, Manifest.load(manifest), tmp_path / "lib.idx", batch_size=8).index
    row = index.ids.index("REC_0042")
    seg = index.segment_columns
    assert index.meta["segments"] == {"seconds": 2.0, "hop": 1.0, "above": 2.0}
    assert set(seg.clip.tolist()) == {row} and len(seg) == 29  # 2 s every 1 s over 30 s; the toy clips: none
    hits = index.search_audio(str(query), k=len(index))
    assert [h.id for h in hits].count("REC_0042") == 1
    hit = next(h for h in hits if h.id == "REC_0042")
    whole, q = load_audio(long, SR), bands(load_audio(query, SR)[:2 * SR])
    cosines = [float(bands(whole[int(a * SR):int(b * SR)]) @ q) for a, b in seg.times]
    best = int(np.argmax(cosines))
    assert hit.segment == tuple(seg.times[best]) and hit.segment[0] <= EVENT[0] and EVENT[1] <= hit.segment[1]
    assert hit.score == pytest.approx(cosines[best], abs=1e-4) and hit.score > 0.9
    assert hit.to_dict()["start"] == hit.segment[0] and hit.to_dict()["end"] == hit.segment[1]
    assert all(h.segment is None for h in hits if h.id != "REC_0042")
    # without segments the same file is its centre crop only: quiet noise, far below every high tone
    flat = build_index(loaded, Manifest.load(manifest), tmp_path / "flat.idx.npz", batch_size=8,
                       segments=Segmenting(above=None)).index
    flat_hit = next(h for h in flat.search_audio(str(query), k=len(flat)) if h.id == "REC_0042")
    assert len(flat.segment_columns) == 0 and flat_hit.segment is None and flat_hit.score < 0.5
    assert hit.rank < flat_hit.rank


def test_search_prints_and_answers_where_a_long_recording_matched(band_library, tmp_path, capsys):
    manifest, ckpt, _, query = band_library
    # --workers 1: the patched encoder is this process's (worker processes encode with the model they are sent)
    assert run_cli(capsys, "index", "build", manifest, "--model", ckpt, "-o", tmp_path / "cli.idx", "--no-progress",
                   "--segment-seconds", "2", "--segment-hop", "0.5", "--workers", "1").code == 0
    r = run_cli(capsys, "search", tmp_path / "cli.idx", "--audio", query, "--json", "-k", "30")
    found = next(h for h in json.loads(r.out)["results"] if h["id"] == "REC_0042")
    assert found["start"] <= EVENT[0] and EVENT[1] <= found["end"] and found["end"] - found["start"] == 2.0
    assert all(h["start"] is None for h in json.loads(r.out)["results"] if h["id"] != "REC_0042")
    r = run_cli(capsys, "search", tmp_path / "cli.idx", "--audio", query, "-k", "30")
    assert f"REC_0042  at {clock(found['start'])}-{clock(found['end'])}" in r.out


def test_a_hit_says_its_time_as_a_clock():
    assert clock(100) == "1:40" and clock(5.5) == "0:05.5" and clock(3725) == "1:02:05"
    hit = Hit(1, 0.5, "a", "/a.wav", [], segment=(100.0, 110.0))
    assert hit.at() == "1:40-1:50" and "at=1:40-1:50" in repr(hit)
    assert Hit(1, 0.5, "a", "/a.wav", []).to_dict()["start"] is None


def test_the_page_plays_a_long_recording_from_where_it_matched_and_marks_it(band_library, tmp_path):
    """The served page (Debian's chromium, headless): the card of the long recording says where it matched, its
    player starts there (a media fragment) and its waveform marks the segment; the API's JSON carries the times."""
    pytest.importorskip("fastapi")
    pytest.importorskip("selenium")
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    from mlatr.serve.app import create_app
    from mlatr.serve.live_index import LiveIndex
    from servetools import running_server, upload

    manifest, ckpt, _, query = band_library
    build_index(load_model(ckpt), Manifest.load(manifest), tmp_path / "page.idx", batch_size=8)
    live = LiveIndex(tmp_path / "page.idx")
    live.reload()
    browser = start_chromium(tmp_path / "profile")
    try:
        with running_server(create_app(live)) as base:
            api = upload(base + "/search/audio?k=30", "query.wav", query.read_bytes()).json()
            found = next(r for r in api["results"] if r["id"] == "REC_0042")
            assert found["start"] <= EVENT[0] and EVENT[1] <= found["end"]
            browser.get(base + "/")
            WebDriverWait(browser, 30).until(
                lambda d: d.find_element(By.TAG_NAME, "body").get_attribute("data-ready") == "1")
            browser.execute_script("show(arguments[0], 'a test');", api)
            card = browser.find_element(By.CSS_SELECTOR, '#results .result[data-id="REC_0042"]')
            chips = [c.text for c in card.find_elements(By.CSS_SELECTOR, ".evidence .chip")]
            assert f"at {clock(found['start'])}-{clock(found['end'])}" in chips
            src = card.find_element(By.TAG_NAME, "audio").get_attribute("src")
            assert src.endswith(f"#t={found['start']:g}")
            mark = WebDriverWait(browser, 30).until(
                lambda d: card.find_elements(By.CSS_SELECTOR, "svg.wave rect.moment"))
            x = float(mark[0].get_attribute("x"))
            assert x == pytest.approx(60 * found["start"] / found["duration"], abs=1e-3)
            others = browser.find_elements(By.CSS_SELECTOR, '#results .result:not([data-id="REC_0042"]) .chip.moment')
            assert not others
    finally:
        browser.quit()
