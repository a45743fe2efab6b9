"""Procedural sound events: one generator per kind of sound, each with a low and a high pitch.

A generator ``gen(rng, pitch, count, n) -> np.ndarray [n]`` draws one event of ``n`` samples at
:data:`SAMPLE_RATE`. ``pitch`` is ``"low"`` or ``"high"``: the two ranges of every kind do not overlap,
so the pitch word of a caption is audible. Countable kinds (beeps, knocks, barks ...) repeat their unit
``count`` times, evenly spaced over the ``n`` samples; continuous kinds (hums, rain, engines ...) fill
them and have no count. Output is float64 with unit RMS over its active (non-silent) samples; the
renderer applies the loudness. Randomness comes only from ``rng`` (a ``numpy.random.Generator``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from scipy import signal

from mlatr.errors import MlatrError

SAMPLE_RATE = 16000
NYQUIST = SAMPLE_RATE / 2

Generator = Callable[[np.random.Generator, str, "int | None", int], np.ndarray]


@dataclass(frozen=True)
class EventKind:
    """A kind of sound: its generator, whether it is counted, and its unit period in seconds."""

    name: str
    generate: Generator
    countable: bool
    #: Seconds one repetition takes (countable kinds) or a typical length (continuous kinds).
    period: float


# ---- helpers ------------------------------------------------------------------------------------

def _between(rng: np.random.Generator, pitch: str, low: tuple[float, float],
             high: tuple[float, float]) -> float:
    lo, hi = low if pitch == "low" else high
    return float(rng.uniform(lo, hi))


def _fade(x: np.ndarray, seconds: float = 0.005) -> np.ndarray:
    """Raised-cosine fade in and out (no clicks at the edges)."""
    k = min(int(seconds * SAMPLE_RATE), len(x) // 2)
    if k > 0:
        ramp = 0.5 - 0.5 * np.cos(np.linspace(0, np.pi, k))
        x[:k] *= ramp
        x[-k:] *= ramp[::-1]
    return x


def _band(x: np.ndarray, lo: float | None, hi: float | None, order: int = 4) -> np.ndarray:
    """Butterworth band-, low- or high-pass filter (``lo``/``hi`` in Hz, ``None`` = open)."""
    if lo is not None and hi is not None:
        band = [lo, min(hi, NYQUIST * 0.95)]
        sos = signal.butter(order, band, btype="bandpass", fs=SAMPLE_RATE, output="sos")
    elif lo is not None:
        sos = signal.butter(order, lo, btype="highpass", fs=SAMPLE_RATE, output="sos")
    else:
        sos = signal.butter(order, hi, btype="lowpass", fs=SAMPLE_RATE, output="sos")
    return signal.sosfilt(sos, x)


def _tone(freq: np.ndarray | float, n: int, harmonics: tuple[float, ...] = (1.0,)) -> np.ndarray:
    """Sum of harmonics of a (possibly time-varying) fundamental, phase-integrated, below Nyquist."""
    f = np.broadcast_to(np.asarray(freq, dtype=float), (n,))
    phase = 2 * np.pi * np.cumsum(f) / SAMPLE_RATE
    out = np.zeros(n)
    for k, amp in enumerate(harmonics, start=1):
        if amp and k * float(f.max()) < NYQUIST * 0.95:
            out += amp * np.sin(k * phase)
    return out


def _repeat(n: int, count: int, unit: Callable[[int], np.ndarray], unit_seconds: float) -> np.ndarray:
    """``count`` units evenly spaced over ``n`` samples, each at most ``unit_seconds`` long."""
    out = np.zeros(n)
    period = n // count
    m = max(8, min(int(unit_seconds * SAMPLE_RATE), period))
    for i in range(count):
        start = i * period
        seg = unit(m)
        out[start:start + len(seg)] += seg[: n - start]
    return out


def _unit_rms(x: np.ndarray) -> np.ndarray:
    """Scale to unit RMS over the active samples (those above -80 dB of the peak)."""
    peak = float(np.max(np.abs(x))) if len(x) else 0.0
    if peak == 0.0:
        return x
    active = x[np.abs(x) > 1e-4 * peak]
    return x / float(np.sqrt(np.mean(active ** 2)))


def _decay(m: int, tau: float) -> np.ndarray:
    return np.exp(-np.arange(m) / (tau * SAMPLE_RATE))


# ---- countable kinds -----------------------------------------------------------------------------

def beep(rng, pitch, count, n):
    f = _between(rng, pitch, (350, 550), (1600, 2600))
    dur = rng.uniform(0.12, 0.2)
    return _repeat(n, count, lambda m: _fade(_tone(f, m, (1.0, 0.15))), dur)


def chirp(rng, pitch, count, n):
    f0 = _between(rng, pitch, (400, 600), (2500, 3200))
    ratio = rng.uniform(1.8, 2.3)
    dur = rng.uniform(0.08, 0.14)

    def unit(m):
        sweep = f0 * ratio ** (np.arange(m) / m)
        return _fade(_tone(sweep, m, (1.0, 0.2)) * np.hanning(m), 0.002)
    return _repeat(n, count, unit, dur)


def bell(rng, pitch, count, n):
    """Struck bell: inharmonic partials (ratios of a church bell) with decays shorter for higher ones."""
    f0 = _between(rng, pitch, (200, 330), (900, 1300))
    ratios = (1.0, 2.76, 5.40, 8.93)
    amps = (1.0, 0.6, 0.4, 0.25)

    def unit(m):
        t = np.arange(m) / SAMPLE_RATE
        out = np.zeros(m)
        for r, a in zip(ratios, amps, strict=True):
            if f0 * r < NYQUIST * 0.95:
                out += a * np.sin(2 * np.pi * f0 * r * t) * _decay(m, 0.3 / r ** 0.5)
        return _fade(out, 0.002)
    return _repeat(n, count, unit, 1.2)


def click(rng, pitch, count, n):
    lo, hi = (300, 1200) if pitch == "low" else (4000, 7000)

    def unit(m):
        k = int(0.006 * SAMPLE_RATE)
        burst = np.zeros(m)
        burst[:k] = rng.standard_normal(k) * _decay(k, 0.0015)
        return _band(burst, lo, hi, order=2)
    return _repeat(n, count, unit, 0.03)


def knock(rng, pitch, count, n):
    f = _between(rng, pitch, (80, 150), (500, 800))

    def unit(m):
        t = np.arange(m) / SAMPLE_RATE
        body = np.sin(2 * np.pi * f * t) * _decay(m, 0.04)
        tap = _band(rng.standard_normal(m) * _decay(m, 0.004), f, f * 4, order=2)
        return _fade(body + 0.5 * tap, 0.001)
    return _repeat(n, count, unit, 0.15)


def noise_burst(rng, pitch, count, n):
    lo, hi = (None, 700) if pitch == "low" else (4000, None)
    dur = rng.uniform(0.15, 0.28)

    def unit(m):
        x = _band(rng.standard_normal(m), lo, hi)
        return _fade(x * _decay(m, dur / 2.5), 0.003)
    return _repeat(n, count, unit, dur)


def bark(rng, pitch, count, n):
    """Dog-bark-like: a falling harmonic source through two formants, short and abrupt."""
    f0 = _between(rng, pitch, (150, 230), (480, 650))
    formants = (500, 1100) if pitch == "low" else (1600, 3000)
    dur = rng.uniform(0.12, 0.2)

    def unit(m):
        fall = f0 * np.linspace(1.15, 0.8, m)
        src = _tone(fall, m, tuple(1.0 / k for k in range(1, 16)))
        x = sum(_band(src, f * 0.8, f * 1.25, order=2) for f in formants)
        env = np.minimum(1.0, np.arange(m) / (0.01 * SAMPLE_RATE)) * _decay(m, dur / 3)
        return _fade(x * env + 0.15 * _band(rng.standard_normal(m), 800, 4000) * env, 0.002)
    return _repeat(n, count, unit, dur)


def drip(rng, pitch, count, n):
    f0 = _between(rng, pitch, (350, 600), (1500, 2200))

    def unit(m):
        rise = f0 * (1 + np.minimum(1.0, np.arange(m) / (0.02 * SAMPLE_RATE)))
        return _fade(_tone(rise, m) * _decay(m, 0.035), 0.001)
    return _repeat(n, count, unit, 0.12)


def horn(rng, pitch, count, n):
    f = _between(rng, pitch, (200, 300), (650, 900))
    dur = rng.uniform(0.25, 0.4)
    odd = tuple((1.0 / k if k % 2 else 0.0) for k in range(1, 10))

    def unit(m):
        return _fade(_tone(f, m, odd) + _tone(f * 1.26, m, odd), 0.01)
    return _repeat(n, count, unit, dur)


# ---- continuous kinds ----------------------------------------------------------------------------

def siren(rng, pitch, count, n):
    fc = _between(rng, pitch, (450, 600), (1300, 1700))
    rate = rng.uniform(0.5, 1.5)
    t = np.arange(n) / SAMPLE_RATE
    f = fc * (1 + 0.25 * np.sin(2 * np.pi * rate * t + rng.uniform(0, 2 * np.pi)))
    return _fade(_tone(f, n, (1.0, 0.3, 0.15)), 0.05)


def hum(rng, pitch, count, n):
    f = _between(rng, pitch, (50, 70), (180, 260))
    t = np.arange(n) / SAMPLE_RATE
    am = 1 + 0.1 * np.sin(2 * np.pi * rng.uniform(0.5, 3) * t)
    return _fade(_tone(f, n, tuple(1.0 / k for k in range(1, 7))) * am, 0.05)


def buzz(rng, pitch, count, n):
    """Sawtooth-like buzz: every harmonic below Nyquist, so it is bright where a hum is smooth."""
    f = _between(rng, pitch, (90, 130), (380, 520))
    return _fade(_tone(f, n, tuple(1.0 / k for k in range(1, 60))), 0.02)


def rain(rng, pitch, count, n):
    """Rain-like texture: a dense random field of tiny filtered drops over a faint noise bed."""
    rate = rng.uniform(150, 400)
    drops = np.zeros(n)
    hits = rng.integers(0, n, size=int(rate * n / SAMPLE_RATE))
    drops[hits] = rng.uniform(0.3, 1.0, size=len(hits)) * rng.choice([-1, 1], size=len(hits))
    drops = np.convolve(drops, _decay(64, 0.001), mode="same")
    x = drops + 0.05 * rng.standard_normal(n)
    x = _band(x, None, 1200) if pitch == "low" else _band(x, 3000, 7500)
    return _fade(x, 0.1)


def drum(rng, pitch, count, n):
    """A regular rhythm: kick-like falling sines (low) or tom/snare-like hits with noise (high)."""
    bpm = rng.uniform(120, 220)
    period = int(SAMPLE_RATE * 60 / bpm)
    m = min(period, int(0.2 * SAMPLE_RATE))
    t = np.arange(m) / SAMPLE_RATE
    if pitch == "low":
        f = 50 + 90 * np.exp(-t / 0.03)
        hit = np.sin(2 * np.pi * np.cumsum(f) / SAMPLE_RATE) * _decay(m, 0.08)
    else:
        f = rng.uniform(350, 500)
        hit = np.sin(2 * np.pi * f * t) * _decay(m, 0.05) + 0.6 * _band(
            rng.standard_normal(m) * _decay(m, 0.04), 2500, None)
    hit = _fade(hit, 0.01)
    out = np.zeros(n)
    for i, start in enumerate(range(0, n - m, period)):
        out[start:start + m] += hit * (1.0 if i % 4 == 0 else 0.6)
    if not out.any():
        out[:m] = hit[: n]
    return out


def whistle(rng, pitch, count, n):
    f = _between(rng, pitch, (650, 950), (2000, 2800))
    t = np.arange(n) / SAMPLE_RATE
    glide = 1 + rng.uniform(-0.1, 0.1) * t / max(t[-1], 1e-9)
    vib = 1 + 0.02 * np.sin(2 * np.pi * rng.uniform(4, 7) * t)
    breath = 0.05 * _band(rng.standard_normal(n), f * 0.8, f * 1.3, order=2)
    return _fade(_tone(f * glide * vib, n) + breath, 0.05)


def engine(rng, pitch, count, n):
    """Engine-like: a jittered pulse train at the firing rate through a resonant low-pass."""
    rate = _between(rng, pitch, (22, 35), (90, 130))
    pulses = np.zeros(n)
    pos = 0.0
    while pos < n:
        pulses[int(pos)] = rng.uniform(0.7, 1.0)
        pos += SAMPLE_RATE / rate * rng.uniform(0.92, 1.08)
    lo, hi = (20, 400) if pitch == "low" else (60, 2000)  # the high-pass removes the pulses' DC
    x = _band(np.convolve(pulses, _decay(200, 0.004), mode="same"), lo, hi)
    x += 0.1 * _band(rng.standard_normal(n), lo, hi)
    return _fade(x, 0.05)


def wind(rng, pitch, count, n):
    lo, hi = (None, 500) if pitch == "low" else (1500, 3500)
    x = _band(rng.standard_normal(n), lo, hi, order=2)
    t = np.arange(n) / SAMPLE_RATE
    gust = 0.6 + 0.4 * np.sin(2 * np.pi * rng.uniform(0.2, 0.6) * t + rng.uniform(0, 2 * np.pi))
    return _fade(x * gust, 0.15)


KINDS: dict[str, EventKind] = {
    k.name: k for k in (
        EventKind("beep", beep, True, 0.3),
        EventKind("chirp", chirp, True, 0.22),
        EventKind("bell", bell, True, 0.7),
        EventKind("click", click, True, 0.15),
        EventKind("knock", knock, True, 0.22),
        EventKind("noise_burst", noise_burst, True, 0.4),
        EventKind("bark", bark, True, 0.35),
        EventKind("drip", drip, True, 0.25),
        EventKind("horn", horn, True, 0.5),
        EventKind("siren", siren, False, 1.5),
        EventKind("hum", hum, False, 1.2),
        EventKind("buzz", buzz, False, 1.0),
        EventKind("rain", rain, False, 1.5),
        EventKind("drum", drum, False, 1.5),
        EventKind("whistle", whistle, False, 1.0),
        EventKind("engine", engine, False, 1.5),
        EventKind("wind", wind, False, 1.5),
    )
}

COUNTABLE: tuple[str, ...] = tuple(k for k, v in KINDS.items() if v.countable)
CONTINUOUS: tuple[str, ...] = tuple(k for k, v in KINDS.items() if not v.countable)
PITCHES = ("low", "high")
LOUDNESSES = ("quiet", "loud")


def generate_event(kind: str, rng: np.random.Generator, pitch: str, count: int | None, n: int) -> np.ndarray:
    """``n`` samples of one event of ``kind`` with unit active RMS (see the module docstring)."""
    spec = KINDS[kind]
    if spec.countable and not count:
        raise MlatrError(f"event kind {kind!r} needs a count >= 1")
    x = spec.generate(rng, pitch, count if spec.countable else None, n)
    return _unit_rms(np.asarray(x, dtype=np.float64)[:n])
