"""Scene -> waveform: 16 kHz mono float32, each event at its onset and loudness, no clipping.

Loudness is absolute, not normalised away: a "loud" event has an active RMS of -15 dBFS and a "quiet"
one -31 dBFS (16 dB apart), a background event sits 4 dB below a foreground one of the same loudness,
and a short event is limited to a peak of 0.9. The mix gets a faint noise floor (-70 dBFS) and, only
if its peak would exceed 0.99, one gain that brings it down to 0.99, so the loud/quiet contrast
survives. All randomness comes from the ``rng`` passed in.
"""

from __future__ import annotations

import numpy as np

from mlatr.data.synth.events import SAMPLE_RATE, generate_event
from mlatr.data.synth.scene import Scene

#: Active RMS of an event per loudness word (linear; -15 and -31 dBFS).
LEVELS = {"loud": 10 ** (-15 / 20), "quiet": 10 ** (-31 / 20)}
BACKGROUND_GAIN = 10 ** (-4 / 20)
EVENT_PEAK = 0.9
MIX_PEAK = 0.99
NOISE_FLOOR = 10 ** (-70 / 20)


def render_scene(scene: Scene, rng: np.random.Generator) -> np.ndarray:
    """The clip of ``scene`` as float32 ``[scene.num_samples]`` at 16 kHz, peak <= 0.99, finite."""
    total = scene.num_samples
    mix = np.zeros(total)
    for event in scene.events:
        start = min(int(round(event.onset * SAMPLE_RATE)), total - 1)
        n = max(16, min(int(round(event.length * SAMPLE_RATE)), total - start))
        x = generate_event(event.kind, rng, event.pitch, event.count, n)
        gain = LEVELS[event.loudness] * (BACKGROUND_GAIN if event is scene.background else 1.0)
        gain *= 10 ** (rng.uniform(-1.5, 1.5) / 20)
        peak = float(np.max(np.abs(x))) * gain
        if peak > EVENT_PEAK:
            gain *= EVENT_PEAK / peak
        mix[start:start + len(x)] += gain * x[: total - start]
    mix += NOISE_FLOOR * rng.standard_normal(total)
    peak = float(np.max(np.abs(mix)))
    if peak > MIX_PEAK:
        mix *= MIX_PEAK / peak
    return mix.astype(np.float32)
