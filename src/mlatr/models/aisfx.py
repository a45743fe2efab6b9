"""The aiSFX sound-effects CNN (``aisfx`` 0.1.2, CC-BY-4.0) re-implemented in mlatr, with its front end.

aiSFX (Ma et al., ISMIR 2022, "X-Sequential-CE") is a 9-layer CNN (4 double-conv blocks, 64-128-256-512
channels, after the DCASE cross-task baseline ``Cnn_9layers``) trained across nine sound-effects
libraries. The pip wheel ships its weights as ``aisfx/models/checkpoint.pth``; its own loader calls
``torch.load`` without ``weights_only`` (refused by torch >= 2.6 since the file pickles numpy scalars)
and the package pins librosa 0.9.2 / numpy 1.23. mlatr therefore

* finds the checkpoint without importing aisfx (``importlib.util.find_spec``) or takes a path,
* loads it with ``torch.load(weights_only=True)``, allow-listing only numpy's scalar / dtype
  reconstructors, and keeps the ``embedding_net`` weights (4.69 M parameters; the 1.5 M of per-library
  classifier heads are dropped),
* re-implements the package's librosa front end in torch (``aisfx.spectrogram.spectrogram_librosa``):
  audio at 44.1 kHz, peak-normalised to 1; power STFT (2048-sample periodic Hann window, hop 1024,
  centred, zero padding); 96 HTK-mel triangles from 0 to 22050 Hz with unit-L1 rows (librosa
  ``norm=1``); ``log10(1e4 * S + 1)``; divided by 9.4578 (the package's ``spec_norm='original'``
  min/max from the paper's Essentia spectrograms),
* cuts the ``[frames, 96]`` spectrogram into 100-frame blocks (~2.3 s) with a hop of 50 frames,
  dropping a trailing partial block, zero-padding a clip shorter than one block (the package's
  ``preprocessing.blocking``; its ``compute_hopSize`` asserts on clips under 51 frames, mlatr pads
  them instead so short clips work), and embeds every block to 512-d (mean over frequency, max over
  time inside the network).

``AisfxEncoder.forward(waveform [B, T] at ``sample_rate``, lengths [B] | None) -> EncoderOutput`` with
``frames [B, L, 512]`` one vector per block, ``mask [B, L]`` and ``pooled [B, 512]`` the mean of a
clip's block vectors. Input at another rate than 44.1 kHz (mlatr's 16 kHz) is resampled inside by a
Kaiser-windowed sinc interpolator (64 zero crossings, roll-off 0.9476, beta 14.77: the parameters of
resampy's ``kaiser_best``, which librosa 0.9.2 used when the package loaded a 16 kHz file).

Note on the reference: the package's librosa path returns librosa's ``[mels, frames]`` array and feeds
it to ``blocking`` as if it were ``[frames, mels]`` (the layout of its default Essentia path); mlatr
uses the ``[frames, mels]`` layout the network was trained on. ``tests/fixtures/README.md`` tells how
the equality fixture was produced with the package's own functions.
"""

from __future__ import annotations

import importlib.util
import math
import os
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from mlatr.errors import MlatrError
from mlatr.models.freezing import freeze_all_but_last
from mlatr.models.outputs import EncoderOutput
from mlatr.models.registry import register_audio_encoder

try:  # numpy's scalar reconstructor, allow-listed for torch.load (numpy >= 2 moved it)
    from numpy._core.multiarray import scalar as _numpy_scalar
except ImportError:  # numpy < 2
    from numpy.core.multiarray import scalar as _numpy_scalar

AISFX_SAMPLE_RATE = 44100
N_FFT = 2048
HOP = 1024
N_MELS = 96
F_MIN, F_MAX = 0.0, 22050.0
SPEC_MAX = 9.457798957824707  # aisfx preprocessing.spectrogram_normalize, spec_norm='original' (min 0)
BLOCK_FRAMES = 100
BLOCK_HOP = 50
EMBED_DIM = 512
#: Blocks per CNN call in inference: the activations stay bounded (a batch of 16 ten-second clips is 112
#: blocks, whose first activation alone would be 275 MB) at the same speed.
INFERENCE_BLOCKS = 16
POOLS = (2, 2, 2, 1)  # max pooling after each conv block
STAGES = len(POOLS)

_INSTALL_HINT = ("the aisfx checkpoint ships in the aisfx 0.1.2 wheel: pip install --no-deps aisfx==0.1.2 "
                 "(mlatr reads only its checkpoint file), or give checkpoint=PATH to models/checkpoint.pth")


def find_aisfx_checkpoint(path: str | os.PathLike | None = None) -> Path:
    """Path of aiSFX's ``models/checkpoint.pth``: ``path`` when given, else inside the installed package.

    The package is located with ``importlib.util.find_spec`` (aisfx is never imported: its imports need
    librosa 0.9.2). Raises :class:`MlatrError` saying how to get the file when it is missing.
    """
    if path is not None:
        p = Path(path)
        if not p.is_file():
            raise MlatrError(f"audio encoder 'aisfx': checkpoint {p} does not exist; {_INSTALL_HINT}")
        return p
    try:
        spec = importlib.util.find_spec("aisfx")
    except (ImportError, ValueError):
        spec = None
    if spec is not None and spec.submodule_search_locations:
        for folder in spec.submodule_search_locations:
            p = Path(folder) / "models" / "checkpoint.pth"
            if p.is_file():
                return p
    raise MlatrError(f"audio encoder 'aisfx': no checkpoint found; {_INSTALL_HINT}")


def load_aisfx_state_dict(path: str | os.PathLike) -> dict[str, torch.Tensor]:
    """The CNN weights of an aiSFX checkpoint, keys without the ``embedding_net.`` prefix.

    The file pickles ``(state_dict, {dataset: (numpy.int64 index, classes)})``; it is read with
    ``torch.load(weights_only=True)`` allow-listing only numpy's scalar and dtype reconstructors.
    """
    allowed = [(_numpy_scalar, "numpy.core.multiarray.scalar"), (_numpy_scalar, "numpy._core.multiarray.scalar"),
               np.dtype, type(np.dtype("int64"))]
    try:
        with torch.serialization.safe_globals(allowed):
            obj = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # pickle / zip errors of a damaged or foreign file
        raise MlatrError(f"{path}: not a loadable aisfx checkpoint ({type(exc).__name__}: {exc})") from exc
    weights = obj[0] if isinstance(obj, tuple | list) else obj
    if not isinstance(weights, dict):
        raise MlatrError(f"{path}: not an aisfx checkpoint (no state dict inside)")
    prefix = "embedding_net."
    state = {k[len(prefix):]: v for k, v in weights.items() if k.startswith(prefix)}
    if not state:
        raise MlatrError(f"{path}: not an aisfx checkpoint (no 'embedding_net.' weights)")
    return state


def htk_mel_filterbank(sample_rate: int = AISFX_SAMPLE_RATE, n_fft: int = N_FFT, n_mels: int = N_MELS,
                       f_min: float = F_MIN, f_max: float = F_MAX, rows_sum_to_one: bool = True) -> np.ndarray:
    """``[n_mels, n_fft // 2 + 1]`` triangular filters on the HTK mel scale, each row summing to 1 (or, with
    ``rows_sum_to_one=False``, peaking at 1: torchaudio's ``melscale_fbanks(norm=None, mel_scale="htk")``,
    the CLAP feature extractor's fusion filters).

    ``mel(f) = 2595 log10(1 + f / 700)``; ``n_mels + 2`` edges equally spaced in mel between f_min and
    f_max; triangle ``i`` rises from edge i to i+1 and falls to i+2 (librosa ``filters.mel(htk=True,
    norm=1)``, which the aisfx front end calls).
    """
    fft_freqs = np.linspace(0.0, sample_rate / 2.0, n_fft // 2 + 1)
    mel_lo, mel_hi = (2595.0 * np.log10(1.0 + np.array([f_min, f_max]) / 700.0))
    edges = 700.0 * (10.0 ** (np.linspace(mel_lo, mel_hi, n_mels + 2) / 2595.0) - 1.0)
    widths = np.diff(edges)
    ramps = edges[:, None] - fft_freqs[None, :]
    rising = -ramps[:-2] / widths[:-1, None]
    falling = ramps[2:] / widths[1:, None]
    weights = np.maximum(0.0, np.minimum(rising, falling))
    if not rows_sum_to_one:
        return weights.astype(np.float32)
    sums = weights.sum(axis=1, keepdims=True)
    return (weights / np.where(sums > 0, sums, 1.0)).astype(np.float32)


def sinc_resample_kernel(orig: int, new: int, zero_crossings: int = 50, rolloff: float = 0.9173473712608761,
                         beta: float = 12.9846) -> tuple[torch.Tensor, int, int, int]:
    """Polyphase windowed-sinc kernels for ``orig -> new`` Hz: (``[new', K]``, width, orig', new').

    Rates are reduced by their gcd. Output phase ``p`` sits ``p * orig' / new'`` input samples after the
    start of each block of ``orig'`` input samples; input sample ``j`` weighs
    ``h(t) = r s sinc(r s t) * kaiser(s t / zero_crossings)`` at distance ``t`` (input samples), with
    ``s = min(1, new / orig)`` and roll-off ``r`` (band-limited interpolation with resampy's
    ``kaiser_best`` filter: the window spans ``zero_crossings / s`` input samples each side).
    """
    g = math.gcd(orig, new)
    orig, new = orig // g, new // g
    scale = min(1.0, new / orig)
    width = math.ceil(zero_crossings / scale)
    j = torch.arange(-width, width + orig, dtype=torch.float64, device="cpu")
    x = (j[None, :] - torch.arange(new, dtype=torch.float64, device="cpu")[:, None] * orig / new) * scale
    inside = x.abs() <= zero_crossings
    arg = (1 - (x / zero_crossings).clamp(-1, 1) ** 2).sqrt()
    window = torch.special.i0(beta * arg) / torch.special.i0(torch.tensor(beta, dtype=torch.float64, device="cpu"))
    kernel = rolloff * scale * torch.sinc(rolloff * x) * window * inside
    return kernel.float(), width, orig, new


def resample_waveform(waveform: torch.Tensor, kernel: torch.Tensor, width: int, orig: int,
                      new: int) -> torch.Tensor:
    """``[B, T] -> [B, ceil(T * new / orig)]`` with kernels from :func:`sinc_resample_kernel`."""
    batch, length = waveform.shape
    x = F.pad(waveform[:, None, :], (width, width + orig))
    y = F.conv1d(x, kernel[:, None, :].to(waveform.dtype), stride=orig)  # [B, new, frames]
    y = y.transpose(1, 2).reshape(batch, -1)
    return y[:, : math.ceil(length * new / orig)]


class ConvBlock(nn.Module):
    """Two 3x3 convolutions (no bias) + batch norm + ReLU, then max pooling (aisfx ``ConvBlock``)."""

    def __init__(self, in_channels: int, out_channels: int):
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, out_channels, 3, padding=1, bias=False)
        self.conv2 = nn.Conv2d(out_channels, out_channels, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(out_channels)
        self.bn2 = nn.BatchNorm2d(out_channels)

    def forward(self, x: torch.Tensor, pool: int) -> torch.Tensor:
        x = F.relu(self.bn1(self.conv1(x)))
        x = F.relu(self.bn2(self.conv2(x)))
        return F.max_pool2d(x, pool) if pool > 1 else x


class AisfxCNN(nn.Module):
    """``[N, frames, 96] -> [N, 512]``: 4 conv blocks (pool 2, 2, 2, 1), mean over mel, max over time.

    Parameter names match aisfx's ``EmbeddingNet`` so its state dict loads as it is. The network is a
    sequence of :data:`STAGES` blocks: :meth:`run_blocks` runs a part of it (``stage`` s = the output of the
    first s blocks, ``[N, C_s, T_s, F_s]``; stage 0 is the spectrogram block ``[N, 1, 100, 96]``), so a
    frozen lower part can be computed once and cached (:mod:`mlatr.frozen_prefix`) while the upper
    blocks train (:class:`AisfxTail`).
    """

    def __init__(self, width: int = 64):
        super().__init__()
        self.conv_block1 = ConvBlock(1, width)
        self.conv_block2 = ConvBlock(width, width * 2)
        self.conv_block3 = ConvBlock(width * 2, width * 4)
        self.conv_block4 = ConvBlock(width * 4, width * 8)

    @property
    def blocks(self) -> list[ConvBlock]:
        return [self.conv_block1, self.conv_block2, self.conv_block3, self.conv_block4]

    def run_blocks(self, x: torch.Tensor, start: int = 0, stop: int = 4) -> torch.Tensor:
        """Blocks ``start .. stop - 1`` on a stage-``start`` input ``[N, C, T, F]`` -> stage ``stop``."""
        for k in range(start, stop):
            x = self.blocks[k](x, POOLS[k])
        return x

    @staticmethod
    def embed(x: torch.Tensor) -> torch.Tensor:
        """Stage-4 maps ``[N, 512, T, F]`` -> block embeddings ``[N, 512]`` (mean over mel, max over time)."""
        return x.mean(dim=3).amax(dim=2)

    def forward(self, spec: torch.Tensor) -> torch.Tensor:
        return self.embed(self.run_blocks(spec[:, None]))


class AisfxFrontEnd(nn.Module):
    """``waveform [B, T] at 44.1 kHz, lengths [B] -> (spec [B, F, 96], frames [B])`` (aisfx librosa path).

    Each clip is peak-normalised over its valid samples; frames past a clip's ``1 + length // 1024``
    are zero (the value of silence after ``log10(1e4 S + 1)``), as the package's zero padding gives.
    """

    def __init__(self):
        super().__init__()
        self.register_buffer("window", torch.hann_window(N_FFT, periodic=True, device="cpu"), persistent=False)
        self.register_buffer("mel", torch.from_numpy(htk_mel_filterbank()), persistent=False)

    def forward(self, waveform: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        valid = torch.arange(waveform.shape[1], device=waveform.device)[None, :] < lengths[:, None]
        x = torch.where(valid, waveform, torch.zeros((), dtype=waveform.dtype, device=waveform.device))
        peak = x.abs().amax(dim=1, keepdim=True)
        x = x / torch.where(peak > 0, peak, torch.ones_like(peak))
        stft = torch.stft(x, N_FFT, HOP, window=self.window, center=True, pad_mode="constant",
                          return_complex=True)  # [B, 1025, F]
        power = stft.real ** 2 + stft.imag ** 2
        mel = torch.einsum("mf,bft->btm", self.mel, power)
        spec = torch.log10(mel * 1e4 + 1.0) / SPEC_MAX
        frames = 1 + lengths // HOP
        keep = torch.arange(spec.shape[1], device=spec.device)[None, :] < frames[:, None]
        return spec * keep[:, :, None], frames


def block_counts(frames: torch.Tensor, block: int = BLOCK_FRAMES, hop: int = BLOCK_HOP) -> torch.Tensor:
    """Blocks per clip: ``floor((F - block) / hop) + 1`` whole blocks, at least 1 (aisfx ``blocking``)."""
    return torch.clamp(torch.div(frames - block, hop, rounding_mode="floor") + 1, min=1)


class AisfxEncoder(nn.Module):
    """aiSFX as an mlatr audio encoder: ``forward(waveform [B, T], lengths [B] | None) -> EncoderOutput``.

    ``frames [B, L, 512]`` are the block embeddings (one per ~2.3 s block, hop ~1.16 s), ``mask [B, L]``
    marks a clip's blocks and ``pooled [B, 512]`` is their mean. ``frozen`` keeps every weight fixed and
    batch norm in inference mode (the DualEncoder's projection trains on top, ATRI sec. 3.1);
    ``frozen=False`` fine-tunes the CNN; ``frozen=False, train_last_blocks=n`` fine-tunes only the last
    ``n`` of its 4 conv blocks (``n = 4``: all of them) with every batch norm kept in inference mode (the
    pretrained statistics), so that a block's output depends on that block's input alone and the frozen
    lower blocks' outputs can be cached (:mod:`mlatr.frozen_prefix`, :class:`AisfxTail`).
    """

    def __init__(self, sample_rate: int = 16000, checkpoint: str | None = None, frozen: bool = True,
                 pretrained: bool = True, block_hop: int = BLOCK_HOP, train_last_blocks: int | None = None):
        super().__init__()
        if sample_rate <= 0:
            raise MlatrError(f"audio encoder 'aisfx': sample_rate must be positive, not {sample_rate}")
        if not 1 <= block_hop <= BLOCK_FRAMES:
            raise MlatrError(f"audio encoder 'aisfx': block_hop must be in 1..{BLOCK_FRAMES}, "
                             f"not {block_hop}")
        self.sample_rate = int(sample_rate)
        self.checkpoint = checkpoint
        self.frozen = bool(frozen)
        self.pretrained = bool(pretrained)
        self.block_hop = int(block_hop)
        self.train_last_blocks = None if train_last_blocks is None else int(train_last_blocks)
        self.output_dim = EMBED_DIM
        #: what runs :meth:`runtime_part` in inference (None: torch); set by :mod:`mlatr.inference.runtime`
        self.block_runner = None
        self.frontend = AisfxFrontEnd()
        self.cnn = AisfxCNN()
        if self.sample_rate != AISFX_SAMPLE_RATE:
            kernel, self._width, self._orig, self._new = sinc_resample_kernel(self.sample_rate,
                                                                                AISFX_SAMPLE_RATE)
            self.register_buffer("resample_kernel", kernel, persistent=False)
        if pretrained:
            path = find_aisfx_checkpoint(checkpoint)
            self.cnn.load_state_dict(load_aisfx_state_dict(path))
        freeze_all_but_last(self.cnn, self.cnn.blocks, self.train_last_blocks, self.frozen,
                            owner="audio encoder 'aisfx'")
        if self.frozen or self.train_last_blocks is not None:
            self.cnn.eval()

    @property
    def first_trained_stage(self) -> int:
        """The stage the trained blocks start from: 4 when frozen, 0 when the whole CNN trains."""
        if self.frozen:
            return STAGES
        return STAGES - (self.train_last_blocks if self.train_last_blocks is not None else STAGES)

    def train(self, mode: bool = True) -> AisfxEncoder:
        super().train(mode)
        if self.frozen or self.train_last_blocks is not None:
            self.cnn.eval()
        return self

    def config(self) -> dict[str, Any]:
        extra = {} if self.train_last_blocks is None else {"train_last_blocks": self.train_last_blocks}
        return {"name": "aisfx", "sample_rate": self.sample_rate, "checkpoint": self.checkpoint,
                "frozen": self.frozen, "pretrained": self.pretrained, "block_hop": self.block_hop, **extra}

    def spectrogram(self, waveform: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``[B, T] at sample_rate -> (spec [B, F, 96], frames [B])`` at 44.1 kHz (resampled if needed)."""
        if self.sample_rate != AISFX_SAMPLE_RATE:
            waveform = resample_waveform(waveform, self.resample_kernel, self._width, self._orig, self._new)
            lengths = torch.div(lengths * self._new + self._orig - 1, self._orig, rounding_mode="floor")
        return self.frontend(waveform, lengths)

    def stage_blocks(self, waveform: torch.Tensor, lengths: torch.Tensor | None = None, stage: int = 0
                     ) -> tuple[torch.Tensor, torch.Tensor]:
        """Every block of every clip at ``stage`` (0 = the spectrogram block, s = after s conv blocks):
        ``(x [sum n, C, T, F], counts [B])``, a clip's blocks consecutive, in clip order."""
        if waveform.dim() != 2 or waveform.shape[1] == 0:
            raise MlatrError(f"audio encoder 'aisfx': waveform must be [B, T] with T > 0, "
                             f"got {tuple(waveform.shape)}")
        if not 0 <= stage <= STAGES:
            raise MlatrError(f"audio encoder 'aisfx': stage must be in 0..{STAGES}, got {stage}")
        if lengths is None:
            lengths = torch.full((waveform.shape[0],), waveform.shape[1], dtype=torch.long, device=waveform.device)
        lengths = lengths.to(waveform.device).long().clamp(min=1, max=waveform.shape[1])
        x, counts = self.length_grouped_blocks(waveform, lengths)
        return self.cnn.run_blocks(x, 0, stage), counts

    def length_grouped_blocks(self, waveform: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """:meth:`spectrogram_blocks` of a padded batch run over groups of clips of similar lengths (each group
        cut to its longest clip, no clip shorter than half of it), so the front end does not compute the longest
        clip's length for every clip; the same values, a clip's blocks consecutive, in clip order."""
        order = torch.argsort(lengths, descending=True, stable=True).tolist()
        groups = [[order[0]]]
        for b in order[1:]:
            if 2 * int(lengths[b]) < int(lengths[groups[-1][0]]):
                groups.append([b])
            else:
                groups[-1].append(b)
        if len(groups) == 1 and int(lengths[order[0]]) == waveform.shape[1]:
            return self.spectrogram_blocks(waveform, lengths)
        per_clip: dict[int, torch.Tensor] = {}
        counts = torch.zeros_like(lengths)
        for group in groups:
            rows = torch.tensor(group, device=waveform.device)
            x, n = self.spectrogram_blocks(waveform[rows, : int(lengths[group[0]])], lengths[rows])
            counts[rows] = n
            per_clip.update(zip(group, torch.split(x, n.tolist()), strict=True))
        return torch.cat([per_clip[b] for b in range(waveform.shape[0])]), counts

    def spectrogram_blocks(self, waveform: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The stage-0 blocks ``[sum n, 1, 100, 96]`` of clips ``[B, T]`` with ``lengths [B]`` and their counts."""
        spec, frames = self.spectrogram(waveform.float(), lengths)
        counts = block_counts(frames, BLOCK_FRAMES, self.block_hop)
        n_max = int(counts.max())
        need = (n_max - 1) * self.block_hop + BLOCK_FRAMES
        if spec.shape[1] < need:
            spec = F.pad(spec, (0, 0, 0, need - spec.shape[1]))
        blocks = spec.unfold(1, BLOCK_FRAMES, self.block_hop)[:, :n_max]  # [B, n, 96, 100]
        mask = torch.arange(n_max, device=spec.device)[None, :] < counts[:, None]
        return blocks[mask].transpose(1, 2)[:, None], counts  # [sum n, 1, 100, 96]

    def runtime_part(self) -> tuple[nn.Module, torch.Tensor]:
        """The part an optimised inference runtime may run instead of torch (:mod:`mlatr.inference.runtime`):
        the CNN from spectrogram blocks ``[N, 1, 100, 96]`` to block embeddings ``[N, 512]``, and an example
        input. :attr:`block_runner`, when set, runs it in :meth:`forward` without gradients."""
        return BlockEmbedder(self.cnn), torch.zeros(2, 1, BLOCK_FRAMES, N_MELS)

    def forward(self, waveform: torch.Tensor, lengths: torch.Tensor | None = None) -> EncoderOutput:
        start = self.first_trained_stage
        if not torch.is_grad_enabled():  # inference: the CNN (or an optimised runtime) a few blocks at a time
            x, counts = self.stage_blocks(waveform, lengths, 0)
            run = self.block_runner or BlockEmbedder(self.cnn)
            emb = torch.cat([run(x[i:i + INFERENCE_BLOCKS]) for i in range(0, x.shape[0], INFERENCE_BLOCKS)])
            return pool_blocks(emb, counts)
        with torch.set_grad_enabled(torch.is_grad_enabled() and start < STAGES):
            with torch.no_grad() if start > 0 else nullcontext():  # the frozen lower blocks keep no graph
                x, counts = self.stage_blocks(waveform, lengths, start)
            return upper_blocks(self.cnn, x, counts, start)


def upper_blocks(cnn: AisfxCNN, x: torch.Tensor, counts: torch.Tensor, start: int) -> EncoderOutput:
    """Blocks ``start ..`` of ``cnn`` on the stage-``start`` blocks ``x [sum n, C, T, F]`` of clips with
    ``counts [B]`` blocks each -> ``frames [B, L, 512]`` (block embeddings), ``mask [B, L]``, ``pooled [B, 512]``
    (the mean of a clip's block embeddings)."""
    return pool_blocks(cnn.embed(cnn.run_blocks(x, start, STAGES)), counts)  # [sum n, 512] block embeddings


def pool_blocks(emb: torch.Tensor, counts: torch.Tensor) -> EncoderOutput:
    """Block embeddings ``[sum n, 512]`` of clips with ``counts [B]`` blocks each -> ``frames [B, L, 512]``,
    ``mask [B, L]``, ``pooled [B, 512]`` (the mean of a clip's block embeddings)."""
    counts = counts.to(emb.device)
    batch, n_max = counts.shape[0], int(counts.max())
    mask = torch.arange(n_max, device=emb.device)[None, :] < counts[:, None]  # [B, L]
    out = emb.new_zeros(batch, n_max, EMBED_DIM)
    out[mask] = emb
    pooled = out.sum(dim=1) / counts[:, None].to(out.dtype)
    return EncoderOutput(pooled=pooled, frames=out, mask=mask)


class BlockEmbedder(nn.Module):
    """The whole CNN as one module: spectrogram blocks ``[N, 1, 100, 96]`` -> block embeddings ``[N, 512]`` (what
    an optimised runtime exports: :meth:`AisfxEncoder.runtime_part`)."""

    def __init__(self, cnn: AisfxCNN):
        super().__init__()
        self.cnn = cnn

    def forward(self, blocks: torch.Tensor) -> torch.Tensor:
        return self.cnn.embed(self.cnn.run_blocks(blocks, 0, STAGES))


class AisfxTail(nn.Module):
    """The upper part of an :class:`AisfxEncoder`: ``tail(x [sum n, C, T, F], counts [B]) -> EncoderOutput``
    from the stage-``start`` blocks of each clip (its lower blocks' outputs, cached or just computed) to the
    pooled clip embedding, with the encoder's own weights (which train when the encoder's do).

    ``AisfxTail(enc, s)(*enc.stage_blocks(wave, lengths, s))`` equals ``enc(wave, lengths)`` for any ``s``.
    """

    def __init__(self, encoder: AisfxEncoder, start: int):
        super().__init__()
        if not 0 <= start <= STAGES:
            raise MlatrError(f"audio encoder 'aisfx': a tail starts at a stage in 0..{STAGES}, got {start}")
        self.start = int(start)
        self.cnn = encoder.cnn  # shared, not copied: the encoder's weights

    def forward(self, x: torch.Tensor, counts: torch.Tensor) -> EncoderOutput:
        return upper_blocks(self.cnn, x, counts, self.start)


@register_audio_encoder("aisfx")
def aisfx(sample_rate: int = 16000, checkpoint: str | None = None, frozen: bool = True,
          pretrained: bool = True, block_hop: int = BLOCK_HOP, train_last_blocks: int | None = None) -> AisfxEncoder:
    """aiSFX CNN (512-d) with its own front end; weights from the aisfx 0.1.2 wheel's checkpoint."""
    return AisfxEncoder(sample_rate=sample_rate, checkpoint=checkpoint, frozen=frozen,
                        pretrained=pretrained, block_hop=block_hop, train_last_blocks=train_last_blocks)
