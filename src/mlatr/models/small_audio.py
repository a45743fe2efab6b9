"""A small audio encoder on log-mel: a masked strided CNN, then a small transformer over time.

It stands in for CED-Base (ATRI §5.2) where no pretrained weights can be had: the same front end
(64 log-mel bins at 10 ms hop) and the same kind of output — a pooled clip vector plus one vector per
time step (here 16 front-end frames = 160 ms, like CED's 16x16 patches along time).

Padding never changes a valid output: before every convolution the features at padded frames are
zeroed (which equals the convolution's own zero padding at a sequence end), the time mask is
downsampled with each stride-2 step (output ``j`` is valid when its centre input ``2j`` is), the
normalisation is per position (over channels only), attention ignores padded keys, and pooling is a
masked mean. A clip therefore encodes the same alone or padded in any batch.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from mlatr.audio.frontend import LogMel
from mlatr.models.layers import masked_mean, sinusoidal_positions
from mlatr.models.outputs import EncoderOutput
from mlatr.models.registry import register_audio_encoder


class ChannelNorm(nn.Module):
    """LayerNorm over the channels of ``[B, C, H, W]`` at each position (never mixes positions)."""

    def __init__(self, channels: int):
        super().__init__()
        self.norm = nn.LayerNorm(channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)


class MaskedConvStage(nn.Module):
    """Conv 3x3 stride 2 (frequency and time) -> ChannelNorm -> ReLU, with a time mask."""

    def __init__(self, in_channels: int, out_channels: int):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size=3, stride=2, padding=1)
        self.norm = ChannelNorm(out_channels)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x = x * mask[:, None, None, :].to(x.dtype)
        x = torch.relu(self.norm(self.conv(x)))
        mask = mask[:, ::2]  # output j is valid when input 2j is
        return x * mask[:, None, None, :].to(x.dtype), mask


class SmallCNNAudioEncoder(nn.Module):
    """Waveform ``[B, T]`` (16 kHz) + lengths ``[B]`` -> pooled ``[B, dim]``, frames, frame mask.

    Log-mel (:class:`~mlatr.audio.frontend.LogMel`) -> fixed dB scaling ``(x - db_mean) / db_std``
    -> ``len(channels)`` masked stride-2 conv stages -> flatten (channels x frequency) -> linear to
    ``dim`` -> ``num_layers`` transformer layers over time (sinusoidal positions, padded frames masked)
    -> masked mean pooling.

    The dB scaling defaults (-20, 20) put the synthetic benchmark's log-mel (mean about -12 dB, std
    about 22 dB for full-scale clips) near zero mean, unit spread; a learnt per-bin affine follows.
    Training note: the encoder starts with near-identical clip embeddings, and a learning rate that is
    too high or has no warmup can collapse both towers to one point (loss stuck at log B); the demo's
    AdamW 2e-3 with 20 warmup steps trains (measurements: docs/experiments.md, "Small encoders").
    """

    def __init__(self, channels: Sequence[int] = (16, 32, 64, 128), dim: int = 128, num_layers: int = 1,
                 num_heads: int = 4, ff_dim: int = 256, dropout: float = 0.1, db_mean: float = -20.0,
                 db_std: float = 20.0, frontend: dict | None = None):
        super().__init__()
        self.frontend = LogMel(**(frontend or {}))
        self.channels, self.dim, self.num_layers = [int(c) for c in channels], int(dim), int(num_layers)
        self.num_heads, self.ff_dim, self.dropout = int(num_heads), int(ff_dim), float(dropout)
        self.db_mean, self.db_std = float(db_mean), float(db_std)
        self.output_dim = self.dim
        self.bin_scale = nn.Parameter(torch.ones(self.frontend.n_mels))
        self.bin_shift = nn.Parameter(torch.zeros(self.frontend.n_mels))
        stages, in_ch, freq = [], 1, self.frontend.n_mels
        for out_ch in self.channels:
            stages.append(MaskedConvStage(in_ch, out_ch))
            in_ch, freq = out_ch, (freq + 1) // 2
        self.stages = nn.ModuleList(stages)
        self.to_frames = nn.Linear(in_ch * freq, self.dim)
        self.input_dropout = nn.Dropout(self.dropout)
        self.transformer = None
        if self.num_layers > 0:
            layer = nn.TransformerEncoderLayer(self.dim, self.num_heads, self.ff_dim, self.dropout,
                                               batch_first=True, norm_first=True)
            self.transformer = nn.TransformerEncoder(layer, self.num_layers, enable_nested_tensor=False)
        self.out_norm = nn.LayerNorm(self.dim)

    def config(self) -> dict:
        """Registry name and options that rebuild this encoder (``build_audio_encoder(**cfg)``)."""
        return {"name": "small-cnn", "channels": list(self.channels), "dim": self.dim,
                "num_layers": self.num_layers, "num_heads": self.num_heads, "ff_dim": self.ff_dim,
                "dropout": self.dropout, "db_mean": self.db_mean, "db_std": self.db_std,
                "frontend": self.frontend.config()}

    def forward(self, waveform: torch.Tensor, lengths: torch.Tensor | None = None) -> EncoderOutput:
        logmel, mask = self.frontend(waveform, lengths)  # [B, M, F], [B, F]
        x = (logmel - self.db_mean) / self.db_std
        x = x * self.bin_scale[None, :, None] + self.bin_shift[None, :, None]
        x = x.unsqueeze(1)  # [B, 1, M, F]
        for stage in self.stages:
            x, mask = stage(x, mask)
        b, c, f, t = x.shape
        frames = self.to_frames(x.reshape(b, c * f, t).transpose(1, 2))  # [B, T', dim]
        frames = frames + sinusoidal_positions(t, self.dim, frames.device)[None]
        frames = self.input_dropout(frames)
        if self.transformer is not None:
            frames = self.transformer(frames, src_key_padding_mask=~mask)
        frames = self.out_norm(frames) * mask[:, :, None].to(frames.dtype)
        return EncoderOutput(pooled=masked_mean(frames, mask), frames=frames, mask=mask)


@register_audio_encoder("small-cnn")
def small_cnn(**options) -> SmallCNNAudioEncoder:
    """The small masked CNN + transformer audio encoder (about 0.3 M parameters by default)."""
    return SmallCNNAudioEncoder(**options)
