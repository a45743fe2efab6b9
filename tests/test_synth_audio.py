"""Audio of the synthetic benchmark: ranges, pitch and loudness audible, events where the scene says."""

from __future__ import annotations

import numpy as np
import pytest

from mlatr.data.synth.events import KINDS, SAMPLE_RATE, generate_event
from mlatr.data.synth.render import render_scene
from mlatr.data.synth.scene import MAX_DURATION, MIN_DURATION, Event, Scene, sample_scene


def spectral_centroid(x: np.ndarray) -> float:
    power = np.abs(np.fft.rfft(x)) ** 2
    freqs = np.fft.rfftfreq(len(x), 1 / SAMPLE_RATE)
    return float((freqs * power).sum() / power.sum())


def rms(x: np.ndarray) -> float:
    return float(np.sqrt(np.mean(x.astype(np.float64) ** 2)))


@pytest.mark.parametrize("kind", list(KINDS))
def test_high_pitch_has_higher_spectral_centroid(kind):
    count = 2 if KINDS[kind].countable else None
    for seed in range(3):
        lo = generate_event(kind, np.random.default_rng(seed), "low", count, SAMPLE_RATE)
        hi = generate_event(kind, np.random.default_rng(seed), "high", count, SAMPLE_RATE)
        assert spectral_centroid(hi) > 1.3 * spectral_centroid(lo), (kind, seed)


def test_sampled_scenes_render_within_range():
    relations, kinds = set(), set()
    for i in range(60):
        rng = np.random.default_rng(i)
        scene = sample_scene(rng)
        relations.add(scene.relation)
        kinds.update(e.kind for e in scene.events)
        assert MIN_DURATION <= scene.duration <= MAX_DURATION
        assert 1 <= len(scene.events) <= 3
        for a, b in zip(scene.sequence, scene.sequence[1:], strict=False):
            assert a.onset + a.length < b.onset  # a sequence does not overlap
        for e in scene.events:
            assert 0 <= e.onset and e.onset + e.length <= scene.duration + 1e-3
            assert (e.count is not None) == KINDS[e.kind].countable
        if scene.background is not None:
            assert not KINDS[scene.background.kind].countable
            assert scene.background.length > 0.8 * scene.duration
        x = render_scene(scene, rng)
        assert x.dtype == np.float32 and x.shape == (scene.num_samples,)
        assert np.isfinite(x).all() and np.abs(x).max() <= 0.99
    assert relations == {"single", "followed by", "while"}
    assert len(kinds) >= 14


def test_events_sound_where_the_scene_places_them():
    """Energy inside each event's interval is far above the silence between them (order is audible)."""
    scene = Scene(duration=3.0, sequence=(
        Event("beep", "high", "quiet", 2, 0.2, 0.6), Event("hum", "low", "loud", None, 1.2, 1.0)))
    x = render_scene(scene, np.random.default_rng(0))
    sec = lambda a, b: x[int(a * SAMPLE_RATE):int(b * SAMPLE_RATE)]  # noqa: E731
    gap = rms(sec(0.85, 1.15))
    assert rms(sec(0.2, 0.8)) > 20 * gap and rms(sec(1.3, 2.1)) > 20 * gap
    assert rms(sec(2.3, 3.0)) < 2 * gap
    # the first event is high-pitched, the second low: the order is in the spectrum
    assert spectral_centroid(sec(0.2, 0.8)) > 3 * spectral_centroid(sec(1.3, 2.1))


@pytest.mark.parametrize("kind", ["hum", "rain", "siren", "knock"])
def test_loud_is_about_16_db_above_quiet(kind):
    count = 2 if KINDS[kind].countable else None
    levels = {}
    for loud in ("quiet", "loud"):
        scene = Scene(duration=2.0, sequence=(Event(kind, "low", loud, count, 0.25, 1.5),))
        x = render_scene(scene, np.random.default_rng(3))
        levels[loud] = 20 * np.log10(rms(x[int(0.25 * SAMPLE_RATE):int(1.75 * SAMPLE_RATE)]))
    assert 12 < levels["loud"] - levels["quiet"] < 20, levels


def test_mix_never_clips():
    scene = Scene(duration=2.0, sequence=(Event("buzz", "high", "loud", None, 0.1, 1.8),),
                  background=Event("engine", "low", "loud", None, 0.0, 2.0))
    x = render_scene(scene, np.random.default_rng(0))
    assert np.abs(x).max() <= 0.99 + 1e-6


def test_hard_negatives_share_kinds_and_differ():
    from mlatr.data.synth.build import clip_scene, variant_parent
    from mlatr.data.synth.scene import sample_content, vary_content

    for i in range(200):
        c = sample_content(np.random.default_rng(i))
        v = vary_content(c, np.random.default_rng(10_000 + i))
        assert v != c
        assert sorted(s.kind for s in v.sequence) == sorted(s.kind for s in c.sequence)
        assert (v.background is None) == (c.background is None)
    parents = [variant_parent(0, "train", i) for i in range(300)]
    share = np.mean([p is not None for p in parents])
    assert 0.2 < share < 0.4
    for i, p in enumerate(parents):
        if p is not None:
            assert p < i and parents[p] is None
            a, b = clip_scene(0, "train", i), clip_scene(0, "train", p)
            assert sorted(e.kind for e in a.events) == sorted(e.kind for e in b.events)
            assert [(e.kind, e.pitch, e.loudness, e.count) for e in a.events] != [
                (e.kind, e.pitch, e.loudness, e.count) for e in b.events]
    assert all(variant_parent(0, "train", i, p_variant=0.0) is None for i in range(50))
