"""Loudness, peaks and silence of a whole sound file, measured block by block as it decodes (ITU-R BS.1770-4).

:class:`LoudnessMeter` takes the decoded blocks of one file (``[n, channels]`` float32, in order; what
:func:`mlatr.audio.integrity.probe_audio` hands its ``on_block``) and keeps only filter states and one
mean square per 100 ms per channel (an hour of stereo: 36,000 x 2 numbers, under a megabyte):

- integrated loudness (LUFS): ``pyloudnorm``'s K-weighting filters (its ``IIRfilter`` stages of the
  ``DeMan`` filter class, :data:`K_WEIGHTING`: BS.1770's own coefficients at 48 kHz) run over each block with
  their state carried to the next; 400 ms gating blocks with 75 % overlap, channel weights 1, 1, 1, 1.41, 1.41
  (channels past the fifth weigh 1, where BS.1770 stops), the absolute gate at -70 LUFS and the relative gate
  10 LU below the absolutely gated loudness: what ``pyloudnorm.Meter(rate, "DeMan").integrated_loudness``
  computes on the whole file at once (the tests compare them). ``None`` for a file shorter than one gating
  block (400 ms) or with no block above the absolute gate;
- true peak (dBTP): the largest magnitude of the signal 4x oversampled (BS.1770-4 Annex 2), by a polyphase
  windowed-sinc FIR (``scipy.signal.firwin``, 81 taps at the oversampled rate, Kaiser window beta 5, cutoff at
  the original Nyquist frequency: the design of ``scipy.signal.resample_poly``): its four phases of 21 taps
  applied (one matrix product over the sliding windows) to each stretch of :data:`PEAK_STRETCH` samples that
  could hold a new peak (whose samples times the filter's largest gain reach the peaks found so far; the
  others cannot, and are skipped), the samples before a block carried to the next;
- sample peak (dBFS), and :attr:`LoudnessFacts.silent`: no gating block above the absolute gate (the file
  never reaches -70 LUFS in any 400 ms) or a sample peak below :data:`SILENT_PEAK_DBFS`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pyloudnorm
import scipy.signal

#: BS.1770's absolute gate: a 400 ms block quieter than this is not counted, and a file none of whose blocks
#: reaches it is silent.
ABSOLUTE_GATE_LUFS = -70.0
#: A file whose sample peak stays below this is silent whatever its length (a 16-bit file's dither sits near
#: -90 dBFS; -60 dBFS peak is inaudible at any usual listening level).
SILENT_PEAK_DBFS = -60.0
#: Oversampling of the true peak (BS.1770-4 Annex 2).
OVERSAMPLE = 4
#: Samples per stretch the true peak interpolates or skips whole (see ``LoudnessMeter._interpolate``).
PEAK_STRETCH = 2048
#: Channel weights of BS.1770 (left, right, centre, left surround, right surround); later channels weigh 1.
CHANNEL_WEIGHTS = (1.0, 1.0, 1.0, 1.41, 1.41)

#: The K-weighting stages as pyloudnorm's ``DeMan`` filter class designs them: (filter type, (gain dB, Q,
#: centre Hz)) fitted by Brecht De Man to reproduce BS.1770's tabled 48 kHz coefficients exactly and
#: defined at any rate (pyloudnorm's default ``K-weighting`` class reads 0.04 LU low on a 997 Hz sine).
K_WEIGHTING = (("high_shelf_DeMan", (3.99984385397, 0.7071752369554193, 1681.9744509555319)),
               ("high_pass_DeMan", (0.0, 0.5003270373253953, 38.13547087613982)))

_GATE_S, _OVERLAP = 0.4, 0.75
_STEP = 1.0 - _OVERLAP  # of a gating block


@dataclass(frozen=True)
class LoudnessFacts:
    """What :class:`LoudnessMeter` measured: ``lufs`` (None: shorter than a gating block, or no block above the
    absolute gate), ``true_peak_dbtp`` and ``peak_dbfs`` (``-inf`` for digital silence), ``silent``."""

    lufs: float | None
    true_peak_dbtp: float
    peak_dbfs: float
    silent: bool


def _db(amplitude: float) -> float:
    return 20 * math.log10(amplitude) if amplitude > 0 else -math.inf


def oversampling_filter() -> np.ndarray:
    """The true peak's interpolation FIR at the oversampled rate (gain :data:`OVERSAMPLE`, see the module
    docstring)."""
    half = 10 * OVERSAMPLE
    return OVERSAMPLE * scipy.signal.firwin(2 * half + 1, 1.0 / OVERSAMPLE, window=("kaiser", 5.0))


class LoudnessMeter:
    """Feed it a file's decoded blocks in order (:meth:`feed`), then read :meth:`result`."""

    def __init__(self, sample_rate: int, channels: int):
        self.rate, self.channels = int(sample_rate), int(channels)
        stages = tuple(pyloudnorm.IIRfilter(*params, self.rate, kind) for kind, params in K_WEIGHTING)
        self._sos = np.array([np.concatenate([s.b, s.a]) for s in stages])
        self._gain = float(np.prod([s.passband_gain for s in stages]))
        self._sos_state = np.zeros((len(stages), self.channels, 2))
        taps = oversampling_filter()
        width = -(-len(taps) // OVERSAMPLE)  # input samples one interpolated value depends on
        self._phases = np.zeros((OVERSAMPLE, width))
        for p in range(OVERSAMPLE):
            self._phases[p, :len(taps[p::OVERSAMPLE])] = taps[p::OVERSAMPLE]
        #: no interpolated value exceeds this times the largest sample it is made of
        self._gain_bound = float(np.abs(self._phases).sum(axis=1).max())
        # y_p[i] = sum_k phases[p, k] x[i - k]: the window x[i - width + 1 .. i] times the phase reversed
        self._phases_reversed = np.ascontiguousarray(self._phases[:, ::-1].T)  # [width, OVERSAMPLE]
        self._history = np.zeros((self.channels, width - 1))  # the samples before the block
        self.frames = 0
        self._squares = np.zeros((64, self.channels))  # sums of squares per finished 100 ms step (grown)
        self._steps = 0  # finished steps
        self._partial = np.zeros(self.channels)  # of the step in progress
        self._peak = 0.0
        self._true_peak = 0.0

    def _boundary(self, k: np.ndarray) -> np.ndarray:
        """Samples where the 100 ms steps ``k`` start (as pyloudnorm bounds its blocks)."""
        return (_GATE_S * (k * _STEP) * self.rate).astype(np.int64)

    def feed(self, block: np.ndarray) -> None:
        """One decoded block, ``[n, channels]`` (or ``[n]`` for one channel)."""
        x = np.asarray(block, np.float64).reshape(len(block), -1)
        if x.shape[1] != self.channels or not len(x):
            if len(x):
                raise ValueError(f"a block of {x.shape[1]} channels for a meter of {self.channels}")
            return
        self._peak = max(self._peak, float(np.abs(x).max()))
        for c in range(self.channels):
            self._interpolate(x[:, c], c)
        weighted, self._sos_state = scipy.signal.sosfilt(self._sos, x.T, axis=1, zi=self._sos_state)
        squares = np.square(weighted * self._gain)  # [channels, n]
        start, end = self.frames, self.frames + len(x)
        ends = self._boundary(np.arange(self._steps + 1, self._steps + 2 + len(x) // max(1, int(0.1 * self.rate))))
        ends = ends[ends <= end]  # the steps this block finishes
        sums = np.concatenate([np.zeros((self.channels, 1)), np.cumsum(squares, axis=1)], axis=1)
        if len(ends):
            cut = np.concatenate([[0], ends - start])
            done = (sums[:, cut[1:]] - sums[:, cut[:-1]]).T  # [len(ends), channels]
            done[0] += self._partial
            if self._steps + len(ends) > len(self._squares):
                grown = np.zeros((2 * (self._steps + len(ends)), self.channels))
                grown[:self._steps] = self._squares[:self._steps]
                self._squares = grown
            self._squares[self._steps: self._steps + len(ends)] = done
            self._steps += len(ends)
            self._partial = sums[:, -1] - sums[:, cut[-1]]
        else:
            self._partial = self._partial + sums[:, -1]
        self.frames = end

    def _interpolate(self, samples: np.ndarray, c: int) -> None:
        """Raise the true peak by channel ``c``'s next ``samples``, interpolating only the stretches of
        :data:`PEAK_STRETCH` samples whose largest sample (and the ones before it they depend on) times the
        filter's largest gain could reach above the peaks found so far: the loud moments of a file; the rest
        cannot change the result."""
        context = self._history.shape[1]
        signal = np.concatenate([self._history[c], samples])
        self._history[c] = signal[len(signal) - context:]
        if not len(samples):
            return
        starts = np.arange(0, len(samples), PEAK_STRETCH)
        loudest = np.maximum.reduceat(np.abs(signal), starts + context)  # each stretch's own samples
        before = np.concatenate([[np.abs(signal[:context]).max(initial=0.0)], loudest[:-1]])
        floor = max(self._true_peak, self._peak)  # what the result will be at least (see result())
        for a in starts[np.maximum(loudest, before) * self._gain_bound >= floor]:
            windows = np.lib.stride_tricks.sliding_window_view(signal[a: a + PEAK_STRETCH + context], context + 1)
            self._true_peak = max(self._true_peak, float(np.abs(windows @ self._phases_reversed).max()))

    def loudness(self) -> float | None:
        """Integrated loudness of what was fed (see the module docstring)."""
        if self.frames < _GATE_S * self.rate:
            return None
        n = int(np.round((self.frames / self.rate - _GATE_S) / (_GATE_S * _STEP))) + 1  # pyloudnorm's count
        steps = np.vstack([self._squares[:self._steps], self._partial[None]])  # [steps, channels]
        if len(steps) < n + 3:
            steps = np.vstack([steps, np.zeros((n + 3 - len(steps), self.channels))])
        blocks = sum(steps[i: i + n] for i in range(4)) / (_GATE_S * self.rate)  # [n, channels]: mean squares
        weights = np.array([CHANNEL_WEIGHTS[c] if c < len(CHANNEL_WEIGHTS) else 1.0 for c in range(self.channels)])
        power = blocks @ weights
        with np.errstate(divide="ignore"):
            block_lufs = -0.691 + 10 * np.log10(power)
        above = block_lufs >= ABSOLUTE_GATE_LUFS
        if not above.any():
            return None
        relative = -0.691 + 10 * np.log10(blocks[above].mean(axis=0) @ weights) - 10
        kept = (block_lufs > ABSOLUTE_GATE_LUFS) & (block_lufs > relative)
        if not kept.any():
            return None
        return float(-0.691 + 10 * np.log10(blocks[kept].mean(axis=0) @ weights))

    def result(self) -> LoudnessFacts:
        """The measurements of everything fed so far."""
        lufs = self.loudness()
        peak = _db(self._peak)
        quiet_blocks = self.frames >= _GATE_S * self.rate and lufs is None
        # the FIR's delay leaves the last few samples' interpolation out: the samples themselves bound it below
        true_peak = _db(max(self._true_peak, self._peak))
        return LoudnessFacts(lufs, true_peak, peak, bool(quiet_blocks or peak < SILENT_PEAK_DBFS))
