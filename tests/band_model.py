"""An audio tower whose embedding is known in closed form, for tests of what search does with embeddings.

:func:`bands`: the square roots of the shares of a signal's energy in 16 equal bands of 0-8 kHz (a unit
vector); :func:`band_tower` is it as ``DualEncoder.encode_audio`` (``monkeypatch.setattr(DualEncoder,
"encode_audio", band_tower)`` on a 16-dimensional toy model). A tone's embedding is its band; noise's is flat;
a gain change, a re-encode or a trim leaves it nearly where it was.
"""

from __future__ import annotations

import numpy as np
import torch

from mlatr.models.outputs import EncoderOutput

SR = 16000
BANDS = 16


def bands(x: np.ndarray) -> np.ndarray:
    """``[16]`` the square roots of the shares of ``x``'s energy in 16 equal bands of 0-8 kHz (unit norm)."""
    power = np.abs(np.fft.rfft(np.asarray(x, np.float64))) ** 2
    edges = np.linspace(0, len(power), BANDS + 1).astype(int)
    energy = np.asarray([power[a:b].sum() for a, b in zip(edges[:-1], edges[1:], strict=True)]) + 1e-12
    return np.sqrt(energy / energy.sum())


def band_tower(self, waveform: torch.Tensor, lengths: torch.Tensor | None = None) -> EncoderOutput:
    """The stand-in audio side: :func:`bands` of each clip's valid samples."""
    n = lengths.tolist() if lengths is not None else [waveform.shape[1]] * waveform.shape[0]
    out = np.stack([bands(w[:k].double().numpy()) for w, k in zip(waveform, n, strict=True)])
    return EncoderOutput(torch.from_numpy(out).to(waveform.dtype), None, None)
