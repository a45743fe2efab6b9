"""CED audio transformers (tiny, mini, small, base) written in mlatr, loadable from the published weights.

CED (Dinkel et al., "CED: Consistent ensemble distillation for audio tagging", ICASSP 2024) is the
audio encoder of ATRI (§5.2: CED-Base, "64-dimensional Mel-spectrograms derived from a 16 kHz
signal") and SupCLAP (§4.1.2). The network:

* front end: 64-bin log-mel, n_fft 512, window 512, hop 160, 0-8000 Hz, amplitude to dB with
  ``top_db`` 120 (:class:`~mlatr.audio.frontend.LogMel`);
* ``init_bn``: a batch norm over the 64 mel bins of the input spectrogram;
* ``patch_embed.proj``: a 16x16 convolution with stride 16 (non-overlapping patches: 4 along
  frequency, ``T // 16`` along time, 248 for 10 s);
* separate positional embeddings: ``time_pos_embed [1, D, 1, 63]`` and ``freq_pos_embed [1, D, 4, 1]``
  added to the patch grid (63 time positions = ``target_length`` 1012 frames / 16);
* ``depth`` pre-norm ViT blocks (LayerNorm eps 1e-6, fused ``qkv``, GELU MLP of ratio 4), ``norm``;
* mean pooling over the patches.

Sizes (width/depth/heads, the CED paper's Table 1): tiny 192/12/3 (5.5 M), mini 256/12/4 (9.6 M),
small 384/12/6 (22 M), base 768/12/12 (86 M).

State-dict compatibility: the original repository (RicherMans/CED, Zenodo checkpoints
``audiotransformer_*_mAP_*.pt``) names the input norm ``init_bn.1.*`` (it sits in an
``nn.Sequential`` between two rearranges) and stores the front end's buffers
(``front_end.0.spectrogram.window``, ``front_end.0.mel_scale.fb``) and the AudioSet classifier
(``outputlayer.*``); the Hugging Face port (``mispeech/ced-*``) renames ``init_bn.1`` to ``init_bn``
and prefixes the encoder with ``encoder.``. :func:`normalise_ced_keys` maps both layouts to this
module's names (``init_bn.*``, no prefix); the front-end buffers and the classifier are recognised and
set aside (reported as ``ignored``), every other mismatch is reported as missing / unexpected.

mlatr differences, for batches of clips of different lengths (none when ``lengths`` is None and the
clip fills the batch): patches whose 16 frames are not all inside the clip are masked (keys in
attention, positions in pooling; the original drops a trailing partial patch in the same way), and the
batch norm's training statistics are taken over valid frames only. A clip therefore encodes the same
alone or padded in a batch (in eval mode).

Long inputs (ATRI feeds 10 s; CED's ``forward_spectrogram``): a spectrogram longer than
``target_length`` frames is split into chunks of ``target_length`` frames; each chunk is encoded on its
own, the pooled vectors are averaged over the chunks that hold part of the clip, and the frame
features of the chunks are concatenated along time.
"""

from __future__ import annotations

import math
import os
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from safetensors.torch import load_file
from torch import nn
from torch.utils.checkpoint import checkpoint as activation_checkpoint

from mlatr.audio.frontend import LogMel
from mlatr.errors import MlatrError
from mlatr.models.freezing import freeze_all_but_last
from mlatr.models.hf_text import check_options
from mlatr.models.outputs import EncoderOutput
from mlatr.models.registry import register_audio_encoder

#: (width, depth, heads) of the published sizes (CED paper, Table 1).
CED_SIZES: dict[str, tuple[int, int, int]] = {
    "tiny": (192, 12, 3),
    "mini": (256, 12, 4),
    "small": (384, 12, 6),
    "base": (768, 12, 12),
}
PATCH = 16
TARGET_LENGTH = 1012

#: Key prefixes of a CED checkpoint that this encoder does not use: the front end's fixed buffers and
#: the AudioSet classification head.
IGNORED_PREFIXES = ("front_end.", "outputlayer.")


#: ``attention`` values: the fused kernel, or the original's eager form (ML-CLAP's CED, ``models/ced``).
ATTENTIONS = ("sdpa", "eager")


class CEDAttention(nn.Module):
    """Multi-head self-attention with a fused ``qkv`` projection (ViT; CED's ``Attention``).

    ``attention="sdpa"``: ``F.scaled_dot_product_attention`` (on a GPU a fused kernel that keeps the output and
    a log-sum-exp per row for backward); ``"eager"``: the original's ``softmax((q k^T) * scale) v`` as
    tensors, which keeps the ``[B, heads, N, N]`` probabilities (and dropout's mask) for backward. The two
    compute the same function.
    """

    def __init__(self, dim: int, num_heads: int, attn_drop: float = 0.0, proj_drop: float = 0.0,
                 attention: str = "sdpa"):
        super().__init__()
        if dim % num_heads:
            raise MlatrError(f"CED: width {dim} is not divisible by {num_heads} heads")
        if attention not in ATTENTIONS:
            raise MlatrError(f"CED: attention must be one of {', '.join(ATTENTIONS)}, got {attention!r}")
        self.num_heads, self.attention = num_heads, attention
        self.qkv = nn.Linear(dim, dim * 3, bias=True)
        self.proj = nn.Linear(dim, dim)
        self.attn_drop = attn_drop
        self.proj_drop = nn.Dropout(proj_drop)

    def forward(self, x: torch.Tensor, key_mask: torch.Tensor | None = None) -> torch.Tensor:
        """``x [B, N, D]``, ``key_mask [B, N]`` (True = attend) -> ``[B, N, D]``;
        ``softmax(q k^T / sqrt(d_head)) v`` per head (Vaswani et al. 2017, eq. 1)."""
        b, n, d = x.shape
        qkv = self.qkv(x).reshape(b, n, 3, self.num_heads, d // self.num_heads).permute(2, 0, 3, 1, 4)
        attn_mask = None if key_mask is None else key_mask[:, None, None, :]
        dropout = self.attn_drop if self.training else 0.0
        if self.attention == "eager":
            q, k, v = qkv[0], qkv[1], qkv[2]                                     # [B, H, N, d_head]
            scores = (q @ k.transpose(-2, -1)) * (q.shape[-1] ** -0.5)           # [B, H, N, N]
            if attn_mask is not None:
                scores = scores.masked_fill(~attn_mask, float("-inf"))
            out = F.dropout(scores.softmax(dim=-1), dropout, self.training) @ v  # [B, H, N, d_head]
        else:
            out = F.scaled_dot_product_attention(qkv[0], qkv[1], qkv[2], attn_mask=attn_mask, dropout_p=dropout)
        return self.proj_drop(self.proj(out.transpose(1, 2).reshape(b, n, d)))


class CEDMlp(nn.Module):
    def __init__(self, dim: int, hidden: int, drop: float = 0.0):
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(hidden, dim)
        self.drop = nn.Dropout(drop)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.drop(self.fc2(self.drop(self.act(self.fc1(x)))))


class CEDBlock(nn.Module):
    """Pre-norm transformer block: ``x + attn(norm1(x))``, then ``x + mlp(norm2(x))``."""

    def __init__(self, dim: int, num_heads: int, mlp_ratio: float = 4.0, drop: float = 0.0,
                 attn_drop: float = 0.0, attention: str = "sdpa"):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim, eps=1e-6)
        self.attn = CEDAttention(dim, num_heads, attn_drop, drop, attention)
        self.norm2 = nn.LayerNorm(dim, eps=1e-6)
        self.mlp = CEDMlp(dim, int(dim * mlp_ratio), drop)

    def forward(self, x: torch.Tensor, key_mask: torch.Tensor | None = None) -> torch.Tensor:
        x = x + self.attn(self.norm1(x), key_mask)
        return x + self.mlp(self.norm2(x))


class CEDPatchEmbed(nn.Module):
    """``[B, 1, n_mels, T] -> [B, D, n_mels / 16, T // 16]`` by a 16x16 convolution of stride 16."""

    def __init__(self, dim: int, patch: int = PATCH):
        super().__init__()
        self.proj = nn.Conv2d(1, dim, kernel_size=patch, stride=patch)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(x)


@dataclass
class LoadReport:
    """What loading a checkpoint did: keys the model needed but did not get, keys it did not know,
    keys recognised as not needed (front end, classifier) and the positional embeddings resized."""

    missing: list[str] = field(default_factory=list)
    unexpected: list[str] = field(default_factory=list)
    ignored: list[str] = field(default_factory=list)
    resized: dict[str, tuple[tuple[int, ...], tuple[int, ...]]] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.missing and not self.unexpected

    def describe(self) -> str:
        parts = []
        if self.missing:
            parts.append(f"missing {len(self.missing)} key(s): {', '.join(self.missing[:8])}"
                         + (" ..." if len(self.missing) > 8 else ""))
        if self.unexpected:
            parts.append(f"unexpected {len(self.unexpected)} key(s): {', '.join(self.unexpected[:8])}"
                         + (" ..." if len(self.unexpected) > 8 else ""))
        for k, (a, b) in self.resized.items():
            parts.append(f"resized {k} {a} -> {b}")
        return "; ".join(parts) or "all keys matched"


def normalise_ced_keys(state: dict[str, torch.Tensor]) -> tuple[dict[str, torch.Tensor], list[str]]:
    """Map a CED state dict (original repository, Hugging Face ``mispeech/ced-*``, or mlatr's own) to
    this module's key names; returns (state, ignored keys).

    Original: ``init_bn.1.*`` -> ``init_bn.*``; Hugging Face: ``encoder.`` prefix dropped; an mlatr
    dual-encoder state (``audio_encoder.`` prefix) is accepted too. Keys under ``front_end.`` and
    ``outputlayer.`` (fixed STFT/mel buffers, AudioSet classifier) are set aside as ignored.
    """
    out: dict[str, torch.Tensor] = {}
    ignored: list[str] = []
    has_audio_prefix = any(k.startswith("audio_encoder.") for k in state)
    for key, value in state.items():
        name = key
        if has_audio_prefix:
            if not name.startswith("audio_encoder."):
                ignored.append(key)
                continue
            name = name[len("audio_encoder."):]
        if name.startswith("encoder."):
            name = name[len("encoder."):]
        if name.startswith("init_bn.1."):
            name = "init_bn." + name[len("init_bn.1."):]
        if name.startswith(IGNORED_PREFIXES):
            ignored.append(key)
            continue
        out[name] = value
    return out, ignored


def to_original_ced_keys(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """This module's state dict in the original repository's key names (``init_bn.1.*``)."""
    return {("init_bn.1." + k[len("init_bn."):] if k.startswith("init_bn.") else k): v for k, v in state.items()}


def resize_time_pos_embed(embed: torch.Tensor, length: int) -> torch.Tensor:
    """``[1, D, 1, T0] -> [1, D, 1, length]``: truncated when shorter, linearly interpolated when longer
    (as CED's ``change_pos_embedding`` adapts a checkpoint to another ``target_length``)."""
    if embed.shape[-1] >= length:
        return embed[..., :length].clone()
    return F.interpolate(embed, size=(1, length), mode="bilinear", align_corners=False)


def resize_freq_pos_embed(embed: torch.Tensor, bins: int) -> torch.Tensor:
    """``[1, D, F0, 1] -> [1, D, bins, 1]``, as :func:`resize_time_pos_embed` along frequency."""
    if embed.shape[-2] >= bins:
        return embed[..., :bins, :].clone()
    return F.interpolate(embed, size=(bins, 1), mode="bilinear", align_corners=False)


def read_ced_checkpoint(path: str | os.PathLike) -> dict[str, torch.Tensor]:
    """Tensors of a CED checkpoint: a ``.pt``/``.bin`` (torch, ``weights_only``), a ``.safetensors``
    file, or a Hugging Face model folder holding ``model.safetensors`` / ``pytorch_model.bin``.
    A ``{"model": state}`` wrapper (mlatr / training checkpoints) is unwrapped."""
    p = Path(path)
    if p.is_dir():
        for name in ("model.safetensors", "pytorch_model.bin"):
            if (p / name).is_file():
                p = p / name
                break
        else:
            raise MlatrError(f"{p}: no model.safetensors or pytorch_model.bin in this folder (expected a CED "
                             "checkpoint: huggingface-cli download mispeech/ced-base --local-dir DIR, or an "
                             "original audiotransformer_*_mAP_*.pt from zenodo.org/record/8275347)")
    if not p.is_file():
        raise MlatrError(f"CED checkpoint {p} does not exist (get one on a machine with internet access: "
                         "huggingface-cli download mispeech/ced-base --local-dir DIR, or "
                         "https://zenodo.org/record/8275347 audiotransformer_base_mAP_4999.pt)")
    try:
        if p.suffix == ".safetensors":
            obj: Any = load_file(str(p))
        else:
            obj = torch.load(p, map_location="cpu", weights_only=True)
    except Exception as exc:  # a damaged or foreign file
        raise MlatrError(f"{p}: not a loadable CED checkpoint ({type(exc).__name__}: {exc})") from exc
    if isinstance(obj, dict) and "model" in obj and isinstance(obj["model"], dict):
        obj = obj["model"]
    if not isinstance(obj, dict) or not all(isinstance(v, torch.Tensor) for v in obj.values()):
        raise MlatrError(f"{p}: not a CED checkpoint (no state dict of tensors inside)")
    return obj


class CEDAudioEncoder(nn.Module):
    """Waveform ``[B, T]`` at 16 kHz (+ lengths) -> ``pooled [B, D]``, ``frames [B, L, D]``, ``mask [B, L]``.

    ``frames`` has one vector per 16-frame time patch (160 ms), the mean of its frequency patches;
    ``pooled`` the mean over the valid patches (CED's ``pooling='mean'``).

    Options: ``size`` (tiny | mini | small | base) or explicit ``dim``/``depth``/``num_heads``;
    ``checkpoint`` (path, loaded at construction; ``strict`` makes missing/unexpected keys an error,
    otherwise they are warned about and kept in :attr:`load_report`); ``freeze`` (no encoder parameter
    trains; the batch norm keeps its statistics), ``train_last_blocks`` (only the last n blocks and the
    final norm train), ``gradient_checkpointing`` (recompute block activations in backward); ``attention``
    (``sdpa`` or the original's ``eager`` form: :class:`CEDAttention`).
    """

    def __init__(self, size: str | None = "base", dim: int | None = None, depth: int | None = None,
                 num_heads: int | None = None, mlp_ratio: float = 4.0, target_length: int = TARGET_LENGTH,
                 dropout: float = 0.0, attn_dropout: float = 0.0, checkpoint: str | None = None,
                 strict: bool = False, freeze: bool = False, train_last_blocks: int | None = None,
                 gradient_checkpointing: bool = False, frontend: dict | None = None,
                 registry_name: str | None = None, attention: str = "sdpa"):
        super().__init__()
        pretrained = read_ced_checkpoint(checkpoint) if checkpoint else None  # fail before building
        if size is not None and size not in CED_SIZES:
            raise MlatrError(f"CED: unknown size {size!r}; choose one of {', '.join(CED_SIZES)}")
        if size is None and (dim is None or num_heads is None):
            raise MlatrError("CED: give a size (tiny, mini, small, base) or both dim and num_heads")
        base = CED_SIZES[size] if size is not None else (dim, 12, num_heads)
        self.size = size
        self.dim = int(dim if dim is not None else base[0])
        self.depth = int(depth if depth is not None else base[1])
        self.num_heads = int(num_heads if num_heads is not None else base[2])
        self.mlp_ratio, self.target_length = float(mlp_ratio), int(target_length)
        self.dropout, self.attn_dropout = float(dropout), float(attn_dropout)
        self.checkpoint_path, self.strict = checkpoint, bool(strict)
        self.freeze, self.train_last_blocks = bool(freeze), train_last_blocks
        self.gradient_checkpointing = bool(gradient_checkpointing)
        self.attention = attention
        self.registry_name = registry_name or (f"ced-{size}" if size is not None else "ced")
        self.frontend = LogMel(**(frontend or {}))
        n_mels = self.frontend.n_mels
        if n_mels % PATCH:
            raise MlatrError(f"CED: n_mels ({n_mels}) must be a multiple of the patch size {PATCH}")
        self.output_dim = self.dim
        self.init_bn = nn.BatchNorm2d(n_mels, momentum=0.01)
        self.patch_embed = CEDPatchEmbed(self.dim)
        self.time_pos_embed = nn.Parameter(torch.randn(1, self.dim, 1, self.target_length // PATCH) * 0.02)
        self.freq_pos_embed = nn.Parameter(torch.randn(1, self.dim, n_mels // PATCH, 1) * 0.02)
        self.pos_drop = nn.Dropout(self.dropout)
        self.blocks = nn.ModuleList([CEDBlock(self.dim, self.num_heads, self.mlp_ratio, self.dropout,
                                              self.attn_dropout, attention) for _ in range(self.depth)])
        self.norm = nn.LayerNorm(self.dim, eps=1e-6)
        self.apply(_init_weights)
        self.load_report: LoadReport | None = None
        if pretrained is not None:
            report = self.load_ced_state_dict(pretrained, strict=self.strict)
            if not report.ok:
                warnings.warn(f"{checkpoint}: {report.describe()}", stacklevel=2)
        self._apply_freezing()

    # ---- configuration ---------------------------------------------------------------------------
    def config(self) -> dict[str, Any]:
        """Registry name and options that rebuild this encoder. The checkpoint path is kept for the
        record but a rebuilt model takes its weights from the saved state dict, not from the path."""
        return {"name": self.registry_name, "size": self.size, "dim": self.dim, "depth": self.depth,
                "num_heads": self.num_heads, "mlp_ratio": self.mlp_ratio, "target_length": self.target_length,
                "dropout": self.dropout, "attn_dropout": self.attn_dropout, "freeze": self.freeze,
                "train_last_blocks": self.train_last_blocks,
                "gradient_checkpointing": self.gradient_checkpointing, "attention": self.attention,
                "frontend": self.frontend.config()}

    def _apply_freezing(self) -> None:
        freeze_all_but_last(self, self.blocks, self.train_last_blocks, self.freeze, finals=[self.norm], owner="CED",
                            option="train_last_blocks")

    def train(self, mode: bool = True) -> CEDAudioEncoder:
        """As ``nn.Module.train``; a frozen input norm (``freeze`` or ``train_last_blocks``) stays in
        eval mode so its running statistics are not updated."""
        super().train(mode)
        if self.freeze or self.train_last_blocks is not None:
            self.init_bn.eval()
        return self

    # ---- loading ---------------------------------------------------------------------------------
    def load_ced_state_dict(self, state: dict[str, torch.Tensor], strict: bool = False) -> LoadReport:
        """Load a CED state dict in any known layout (see :func:`normalise_ced_keys`); positional
        embeddings of another length are resized; returns a :class:`LoadReport`. With ``strict``, any
        missing or unexpected key raises :class:`MlatrError` (and nothing is loaded)."""
        state, ignored = normalise_ced_keys(state)
        report = LoadReport(ignored=ignored)
        own = self.state_dict()
        for key, fn, axis in (("time_pos_embed", resize_time_pos_embed, -1),
                              ("freq_pos_embed", resize_freq_pos_embed, -2)):
            if key in state and key in own and state[key].shape != own[key].shape:
                size = own[key].shape[axis]
                if state[key].dim() != 4 or state[key].shape[1] != own[key].shape[1]:
                    continue  # a width mismatch is reported below as a shape error
                report.resized[key] = (tuple(state[key].shape), tuple(own[key].shape))
                state[key] = fn(state[key], size)
        report.missing = sorted(k for k in own if k not in state)
        report.unexpected = sorted(k for k in state if k not in own)
        bad_shapes = [f"{k} {tuple(state[k].shape)} vs {tuple(own[k].shape)}" for k in state
                      if k in own and state[k].shape != own[k].shape]
        if bad_shapes:
            raise MlatrError(f"CED checkpoint does not fit {self.registry_name} (width {self.dim}, depth "
                             f"{self.depth}): shape mismatch {', '.join(bad_shapes[:4])}")
        if strict and not report.ok:
            raise MlatrError(f"CED checkpoint does not match {self.registry_name}: {report.describe()}")
        self.load_state_dict({k: v for k, v in state.items() if k in own}, strict=False)
        self.load_report = report
        return report

    def load_checkpoint(self, path: str | os.PathLike, strict: bool = False) -> LoadReport:
        """Read and load a checkpoint file or folder (:func:`read_ced_checkpoint`); warns on a mismatch."""
        report = self.load_ced_state_dict(read_ced_checkpoint(path), strict=strict)
        if not report.ok:
            warnings.warn(f"{path}: {report.describe()}", stacklevel=2)
        return report

    # ---- forward ---------------------------------------------------------------------------------
    def normalise_bins(self, logmel: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """Batch norm over mel bins of ``logmel [B, M, F]``; in training the batch statistics are taken
        over valid frames (``mask [B, F]``) only and update the running statistics (momentum 0.01)."""
        bn = self.init_bn
        if not (bn.training and self.training):
            return F.batch_norm(logmel, bn.running_mean, bn.running_var, bn.weight, bn.bias, False, 0.0, bn.eps)
        w = mask[:, None, :].to(logmel.dtype)
        count = w.sum().clamp(min=1.0)
        mean = (logmel * w).sum(dim=(0, 2)) / count
        var = (((logmel - mean[None, :, None]) ** 2) * w).sum(dim=(0, 2)) / count
        with torch.no_grad():
            unbiased = var * count / (count - 1).clamp(min=1.0)
            bn.running_mean.mul_(1 - bn.momentum).add_(bn.momentum * mean.detach())
            bn.running_var.mul_(1 - bn.momentum).add_(bn.momentum * unbiased.detach())
            bn.num_batches_tracked.add_(1)
        x = (logmel - mean[None, :, None]) / torch.sqrt(var[None, :, None] + bn.eps)
        return x * bn.weight[None, :, None] + bn.bias[None, :, None]

    def encode_chunks(self, spec: torch.Tensor, patch_mask: torch.Tensor) -> torch.Tensor:
        """Normalised spectrogram chunks ``[N, M, T]`` (T <= target_length, a multiple of 16) and the
        time-patch mask ``[N, T / 16]`` -> patch features ``[N, M / 16, T / 16, D]`` after ``norm``."""
        x = self.patch_embed(spec[:, None])  # [N, D, f, t]
        n, d, f, t = x.shape
        x = x + self.time_pos_embed[:, :, :, :t] + self.freq_pos_embed[:, :, :f, :]
        x = self.pos_drop(x.permute(0, 2, 3, 1).reshape(n, f * t, d))  # (f t) order, as CED
        key_mask = patch_mask[:, None, :].expand(n, f, t).reshape(n, f * t)
        key_mask = key_mask | ~key_mask.any(dim=1, keepdim=True)  # an empty chunk attends to all (discarded)
        for block in self.blocks:
            if self.gradient_checkpointing and self.training and torch.is_grad_enabled():
                x = activation_checkpoint(block, x, key_mask, use_reentrant=False)
            else:
                x = block(x, key_mask)
        return self.norm(x).reshape(n, f, t, d)

    def forward(self, waveform: torch.Tensor, lengths: torch.Tensor | None = None) -> EncoderOutput:
        logmel, frame_mask = self.frontend(waveform, lengths)  # [B, M, F], [B, F]
        x = self.normalise_bins(logmel, frame_mask)
        b, m, total = x.shape
        valid_frames = frame_mask.sum(dim=1)  # [B]
        x = x * frame_mask[:, None, :].to(x.dtype)  # padded frames are 0 after the norm, as CED pads
        if total > self.target_length:  # chunks of target_length frames, the last one zero-padded
            chunk, n_chunks = self.target_length, math.ceil(total / self.target_length)
        else:  # frames past the last whole patch are dropped, as by CED's stride-16 convolution
            chunk, n_chunks = max(PATCH, total - total % PATCH), 1
        padded = n_chunks * chunk
        if padded > total:
            x = F.pad(x, (0, padded - total))
        x = x[:, :, :padded]
        patches_per_chunk = chunk // PATCH
        patch_index = torch.arange(n_chunks * patches_per_chunk, device=x.device)
        chunk_start = (patch_index // patches_per_chunk) * chunk
        patch_end = chunk_start + (patch_index % patches_per_chunk + 1) * PATCH
        patch_mask = patch_end[None, :] <= valid_frames[:, None]  # [B, n_chunks * ppc]
        short = valid_frames < PATCH  # a clip under one patch keeps its (partly padded) first patch
        patch_mask[:, 0] |= short
        spec = x.reshape(b, m, n_chunks, chunk).permute(2, 0, 1, 3).reshape(n_chunks * b, m, chunk)
        pmask = patch_mask.reshape(b, n_chunks, patches_per_chunk).permute(1, 0, 2).reshape(n_chunks * b, -1)
        feats = self.encode_chunks(spec, pmask)  # [n_chunks * B, f, t, D]
        frames = feats.mean(dim=1).reshape(n_chunks, b, patches_per_chunk, self.dim)
        frames = frames.permute(1, 0, 2, 3).reshape(b, n_chunks * patches_per_chunk, self.dim)
        w = patch_mask.to(frames.dtype)
        frames = frames * w[..., None]
        # mean over each chunk's valid patches, then over the chunks that hold part of the clip
        per_chunk_w = w.reshape(b, n_chunks, patches_per_chunk)
        chunk_sum = frames.reshape(b, n_chunks, patches_per_chunk, self.dim).sum(dim=2)
        chunk_count = per_chunk_w.sum(dim=2)
        chunk_mean = chunk_sum / chunk_count.clamp(min=1.0)[..., None]
        has = (chunk_count > 0).to(frames.dtype)
        pooled = (chunk_mean * has[..., None]).sum(dim=1) / has.sum(dim=1).clamp(min=1.0)[:, None]
        return EncoderOutput(pooled=pooled, frames=frames, mask=patch_mask)


def _init_weights(module: nn.Module) -> None:
    """ViT initialisation (truncated normal std 0.02 for linear layers, unit LayerNorm)."""
    if isinstance(module, nn.Linear):
        nn.init.trunc_normal_(module.weight, std=0.02)
        if module.bias is not None:
            nn.init.zeros_(module.bias)
    elif isinstance(module, nn.LayerNorm):
        nn.init.ones_(module.weight)
        nn.init.zeros_(module.bias)


def ced_parameter_count(size: str, include_classifier: bool = False, n_mels: int = 64,
                        target_length: int = TARGET_LENGTH, classes: int = 527) -> int:
    """Parameters of a CED size, computed from the architecture (no model is built).

    Per block: ``qkv`` 3D^2 + 3D, ``proj`` D^2 + D, MLP 8D^2 + 5D, two LayerNorms 4D, i.e.
    ``12 D^2 + 13 D``; plus the patch convolution ``256 D + D``, the positional embeddings
    ``D (target_length / 16 + n_mels / 16)``, the final norm 2D and the input batch norm 2 n_mels;
    the original classifier adds ``LayerNorm(D) + Linear(D, 527)``.
    """
    d, depth, _ = CED_SIZES[size]
    total = depth * (12 * d * d + 13 * d) + PATCH * PATCH * d + d + d * (target_length // PATCH + n_mels // PATCH)
    total += 2 * d + 2 * n_mels
    if include_classifier:
        total += 2 * d + d * classes + classes
    return total


def _factory(size: str):
    def build(**options: Any) -> CEDAudioEncoder:
        options.pop("size", None)
        check_options(CEDAudioEncoder, options, "audio", f"ced-{size}")
        return CEDAudioEncoder(size=size, registry_name=f"ced-{size}", **options)

    build.__doc__ = f"CED-{size.capitalize()} ({'/'.join(map(str, CED_SIZES[size]))} width/depth/heads)."
    return build


for _size in CED_SIZES:
    register_audio_encoder(f"ced-{_size}")(_factory(_size))


@register_audio_encoder("ced")
def ced_custom(**options: Any) -> CEDAudioEncoder:
    """A CED of explicit width/depth/heads (``dim``, ``depth``, ``num_heads``; tests, tiny presets)."""
    options.pop("name", None)
    size = options.pop("size", None)
    check_options(CEDAudioEncoder, options, "audio", "ced")
    return CEDAudioEncoder(size=size, registry_name="ced", **options)
