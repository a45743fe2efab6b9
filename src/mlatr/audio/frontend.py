"""Log-mel front end in torch (no torchaudio): batched, on the module's device, with frame masks.

The defaults are the CED front end that ATRI uses (ATRI §5.2: "64-dimensional Mel-spectrograms
derived from a 16 kHz signal"; CED: n_fft 512, window 512 (Hann), hop 160 = 10 ms, 0-8000 Hz,
power spectrogram, HTK mel scale, no filter normalisation, then amplitude-to-dB with ``top_db``).

Two deliberate differences from ``torchaudio.transforms.MelSpectrogram`` + ``AmplitudeToDB``:

* the centred STFT pads with zeros (``pad_mode="constant"``) instead of reflecting, so a clip's
  valid frames are the same whether or not it is padded in the batch;
* the ``top_db`` floor is taken per example over its valid frames (torchaudio takes one maximum
  over a whole 3-D batch), so one clip's level never depends on its batch mates or on padding.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from mlatr.errors import MlatrError


def hz_to_mel(freq: np.ndarray | float) -> np.ndarray:
    """HTK mel scale: ``m = 2595 log10(1 + f / 700)``."""
    return 2595.0 * np.log10(1.0 + np.asarray(freq, dtype=np.float64) / 700.0)


def mel_to_hz(mel: np.ndarray | float) -> np.ndarray:
    """Inverse of :func:`hz_to_mel`: ``f = 700 (10^(m / 2595) - 1)``."""
    return 700.0 * (10.0 ** (np.asarray(mel, dtype=np.float64) / 2595.0) - 1.0)


def mel_filterbank(n_mels: int = 64, n_fft: int = 512, sample_rate: int = 16_000,
                   f_min: float = 0.0, f_max: float = 8_000.0) -> torch.Tensor:
    """Triangular mel filters ``[n_fft // 2 + 1, n_mels]`` (HTK scale, peak 1, unnormalised).

    ``n_mels + 2`` edge frequencies are equally spaced on the mel scale between ``f_min`` and
    ``f_max``; filter ``m`` rises linearly (in Hz) from edge ``m`` to edge ``m + 1`` and falls to edge
    ``m + 2``, evaluated at the STFT bin frequencies ``k * sample_rate / n_fft``.
    """
    if not 0.0 <= f_min < f_max <= sample_rate / 2:
        raise MlatrError(f"need 0 <= f_min < f_max <= sample_rate / 2, got {f_min}, {f_max}")
    bin_freqs = np.linspace(0.0, sample_rate / 2, n_fft // 2 + 1)
    edges = mel_to_hz(np.linspace(hz_to_mel(f_min), hz_to_mel(f_max), n_mels + 2))
    lower, centre, upper = edges[:-2], edges[1:-1], edges[2:]
    rising = (bin_freqs[:, None] - lower[None, :]) / (centre - lower)[None, :]
    falling = (upper[None, :] - bin_freqs[:, None]) / (upper - centre)[None, :]
    fb = np.maximum(0.0, np.minimum(rising, falling))
    return torch.from_numpy(fb).to(torch.get_default_dtype())  # float32 unless a model is made in float64


def frame_counts(lengths: torch.Tensor, hop_length: int) -> torch.Tensor:
    """Frames of a centred STFT of a signal of ``lengths`` samples: ``1 + length // hop``."""
    return 1 + torch.div(lengths, hop_length, rounding_mode="floor")


def power_to_db(power: torch.Tensor, mask: torch.Tensor | None = None, top_db: float | None = 120.0,
                amin: float = 1e-10) -> torch.Tensor:
    """``10 log10(max(power, amin))`` for ``[B, n_mels, F]``, floored at ``max - top_db`` per example.

    The maximum runs over each example's valid frames (``mask [B, F]``, True = valid) so padding never
    sets the floor; frames outside the mask are set to that floor.
    """
    db = 10.0 * torch.log10(torch.clamp(power, min=amin))
    if top_db is None:
        return db
    if top_db < 0:
        raise MlatrError("top_db must be non-negative")
    if mask is None:
        peak = db.amax(dim=(1, 2), keepdim=True)
    else:
        fill = torch.finfo(db.dtype).min
        peak = db.masked_fill(~mask[:, None, :], fill).amax(dim=(1, 2), keepdim=True)
    floor = peak - top_db
    db = torch.maximum(db, floor)
    if mask is not None:
        db = torch.where(mask[:, None, :], db, floor)
    return db


class LogMel(nn.Module):
    """Waveform ``[B, T]`` at 16 kHz -> log-mel ``[B, n_mels, F]`` in dB and frame mask ``[B, F]``.

    ``F = 1 + T // hop_length`` (centred frames). With ``lengths [B]`` the mask marks the
    ``1 + length // hop_length`` frames of each example's own signal (True = valid); without, all
    frames are valid. The filterbank and window are buffers, so the module runs wherever it is moved.
    """

    def __init__(self, sample_rate: int = 16_000, n_mels: int = 64, n_fft: int = 512,
                 win_length: int = 512, hop_length: int = 160, f_min: float = 0.0,
                 f_max: float = 8_000.0, top_db: float | None = 120.0):
        super().__init__()
        if win_length > n_fft:
            raise MlatrError("win_length must not exceed n_fft")
        self.sample_rate, self.n_mels, self.n_fft = sample_rate, n_mels, n_fft
        self.win_length, self.hop_length, self.top_db = win_length, hop_length, top_db
        self.f_min, self.f_max = f_min, f_max
        # made on the CPU even where the model is built on the meta device (weights_problem): a meta hann_window
        # loads torch's symbolic shapes (sympy), seconds of every command that checks a stored model's shapes
        self.register_buffer("window", torch.hann_window(win_length, device="cpu"), persistent=False)
        self.register_buffer("filterbank", mel_filterbank(n_mels, n_fft, sample_rate, f_min, f_max),
                             persistent=False)

    def config(self) -> dict:
        return {"sample_rate": self.sample_rate, "n_mels": self.n_mels, "n_fft": self.n_fft,
                "win_length": self.win_length, "hop_length": self.hop_length, "f_min": self.f_min,
                "f_max": self.f_max, "top_db": self.top_db}

    def frame_mask(self, lengths: torch.Tensor | None, num_samples: int, batch: int) -> torch.Tensor:
        """``[B, F]`` bool mask of the frames computed from each example's valid samples."""
        num_frames = 1 + num_samples // self.hop_length
        device = self.window.device
        if lengths is None:
            return torch.ones(batch, num_frames, dtype=torch.bool, device=device)
        counts = frame_counts(lengths.to(device).long(), self.hop_length).clamp(max=num_frames)
        return torch.arange(num_frames, device=device)[None, :] < counts[:, None]

    def forward(self, waveform: torch.Tensor, lengths: torch.Tensor | None = None
                ) -> tuple[torch.Tensor, torch.Tensor]:
        if waveform.dim() == 1:
            waveform = waveform[None, :]
        if waveform.dim() != 2:
            raise MlatrError(f"waveform must be [B, T], got {tuple(waveform.shape)}")
        # the front end's own dtype (float32, or float64 for a model made in float64), never AMP's float16:
        # a float16 power spectrum overflows (|X|^2 reaches 512^2)
        waveform = waveform.to(device=self.window.device, dtype=self.filterbank.dtype)
        with torch.autocast(device_type=waveform.device.type, enabled=False):
            spec = torch.stft(waveform, n_fft=self.n_fft, hop_length=self.hop_length,
                              win_length=self.win_length, window=self.window, center=True,
                              pad_mode="constant", return_complex=True)
            power = spec.real.square() + spec.imag.square()  # [B, n_fft//2+1, F]
            mel = torch.einsum("bkf,km->bmf", power, self.filterbank)
            mask = self.frame_mask(lengths, waveform.shape[1], waveform.shape[0])
            return power_to_db(mel, mask, self.top_db), mask
