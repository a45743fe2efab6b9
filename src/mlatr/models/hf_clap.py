"""A ``transformers`` ``ClapModel`` (LAION-CLAP: HTSAT audio + RoBERTa text) as mlatr's two encoders.

``mlatr import-checkpoint --from hf-clap DIR`` (:mod:`mlatr.convert.hf_clap`) turns a ClapModel folder into
an mlatr checkpoint whose :class:`~mlatr.models.dual_encoder.DualEncoder` gives the embeddings of
``ClapModel.get_audio_features`` / ``get_text_features`` (Wu et al. 2023, "Large-scale contrastive
language-audio pretraining", §2.2: each tower's output through a two-layer MLP, L2-normalised). The
encoders here are the towers; the DualEncoder's Linear-ReLU-Linear heads hold CLAP's projections
(``linear1`` / ``linear2``).

* ``hf-clap-audio`` (:class:`HFClapAudioEncoder`): ``ClapAudioModel`` (HTSAT) on waveforms at the rate the
  feature extractor expects (48 kHz: the imported checkpoint's ``data.sample_rate``), with
  :class:`ClapFeatures`, a torch copy of ``ClapFeatureExtractor`` for the folder's settings
  (``preprocessor_config.json``): ``truncation`` "fusion" (HTK mel filters without normalisation, the
  log-mel stacked 4 times; a clip longer than ``max_length_s`` gives the whole clip's log-mel shrunk to one
  window plus 3 windows from the front, middle and back thirds, ``is_longer`` True) or "rand_trunc"
  (Slaney mel filters, one channel; a longer clip is cut to one window); ``padding`` repeatpad / repeat /
  pad. Two deliberate differences, both because the extractor draws random numbers: a long clip's windows
  are the *middle* start of each third (fusion) and the *first* ``max_length_s`` (rand_trunc), where the
  extractor draws them at random; and a batch where no clip is long keeps every ``is_longer`` False,
  where the extractor sets one random clip's to True (which sends that clip through the fusion branch on
  copies of its own log-mel). mlatr's evaluation and index cut clips to 10 s windows before the encoder,
  so the first difference arises only for clips fed whole. Pooled = the pooler output (what CLAP
  projects); frames = the final feature map averaged over frequency, as :mod:`mlatr.models.htsat`.
* ``hf-clap-text`` (:class:`HFClapTextEncoder`): ``ClapTextModel`` (RoBERTa + the [CLS] dense-tanh pooler)
  with the folder's tokenizer (padding, truncation at the model's position limit); the language is not
  used (LAION-CLAP's text tower is English RoBERTa: other languages are encoded as they are).

Both keep their architecture as a config dict, so a checkpoint rebuilds them without the folder except the
text side's tokenizer, read from ``path`` (as the other Hugging Face text encoders).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from mlatr.errors import MlatrError
from mlatr.file_kinds import folder_file
from mlatr.json_input import read_json_file
from mlatr.models.aisfx import htk_mel_filterbank
from mlatr.models.hf_text import HF_INSTALL_HINT, check_options, load_tokenizer
from mlatr.models.htsat import clap_log_mel, slaney_mel_filterbank
from mlatr.models.outputs import EncoderOutput
from mlatr.models.registry import register_audio_encoder, register_text_encoder
from mlatr.stored_config import check_clap_features

#: ``ClapFeatureExtractor``'s defaults (a folder's ``preprocessor_config.json`` overrides them).
FEATURE_DEFAULTS: dict[str, Any] = {"feature_size": 64, "sampling_rate": 48_000, "hop_length": 480,
                                    "max_length_s": 10, "fft_window_size": 1024, "frequency_min": 0.0,
                                    "frequency_max": 14_000.0, "truncation": "fusion", "padding": "repeatpad"}
#: Channels of a fusion input: the whole clip's shrunk log-mel + front, middle and back windows.
FUSION_CHANNELS = 4


def _import_transformers():
    try:
        import transformers  # optional extra (mlatr[hf])
    except ImportError as exc:
        raise MlatrError(f"the hf-clap encoders need transformers: {HF_INSTALL_HINT}") from exc
    return transformers


def feature_settings(folder: str | Path | None = None, **overrides: Any) -> dict[str, Any]:
    """The feature extractor settings of a ClapModel folder (:data:`FEATURE_DEFAULTS` completed by its
    ``preprocessor_config.json`` when there is one, then by ``overrides``); refuses unknown modes."""
    settings = dict(FEATURE_DEFAULTS)
    found = folder_file(folder, "preprocessor_config.json", "hf-clap") if folder is not None else None
    if found is not None:  # read from inside the folder, typed and ranged before use
        stored = check_clap_features(found, read_json_file(found, "preprocessor_config"))
        settings.update({k: stored[k] for k in FEATURE_DEFAULTS if k in stored})
    settings.update(overrides)
    if settings["truncation"] not in ("fusion", "rand_trunc"):
        raise MlatrError(f"hf-clap: truncation must be fusion or rand_trunc, got {settings['truncation']!r}")
    if settings["padding"] not in ("repeatpad", "repeat", "pad"):
        raise MlatrError(f"hf-clap: padding must be repeatpad, repeat or pad, got {settings['padding']!r}")
    return settings


class ClapFeatures(nn.Module):
    """Waveforms ``[B, T]`` at ``sampling_rate`` (+ lengths) -> ``input_features [B, C, frames, n_mels]``,
    ``is_longer [B]`` and the covered fraction ``[B]`` of the window, as ``ClapFeatureExtractor`` computes
    them (see the module docstring for the two deterministic choices); ``C`` = 4 under fusion, else 1."""

    def __init__(self, **settings: Any):
        super().__init__()
        self.settings = feature_settings(**settings)
        s = self.settings
        self.fusion = s["truncation"] == "fusion"
        self.hop_length, self.n_mels = int(s["hop_length"]), int(s["feature_size"])
        self.window_samples = int(s["max_length_s"] * s["sampling_rate"])
        self.chunk_frames = self.window_samples // self.hop_length + 1
        n_fft, rate = int(s["fft_window_size"]), int(s["sampling_rate"])
        lo, hi = float(s["frequency_min"]), float(s["frequency_max"])
        bank = (torch.from_numpy(htk_mel_filterbank(rate, n_fft, self.n_mels, lo, hi, rows_sum_to_one=False)).T
                if self.fusion else slaney_mel_filterbank(self.n_mels, n_fft, rate, lo, hi))
        self.register_buffer("filterbank", bank.contiguous(), persistent=False)  # [bins, n_mels]
        self.register_buffer("window", torch.hann_window(n_fft, periodic=True, device="cpu"), persistent=False)

    def _log_mel(self, wave: torch.Tensor) -> torch.Tensor:
        return clap_log_mel(wave[None], self.window, self.hop_length, self.filterbank)[0]  # [frames, n_mels]

    def _fill(self, clip: torch.Tensor) -> torch.Tensor:
        """A clip shorter than the window, filled to it (repeatpad: whole copies then zeros; repeat: copies
        cut at the window; pad: zeros)."""
        n, padding = clip.shape[0], self.settings["padding"]
        if padding == "repeat":
            clip = clip.repeat(self.window_samples // n + 1)[: self.window_samples]
        elif padding == "repeatpad":
            clip = clip.repeat(self.window_samples // n)
        return F.pad(clip, (0, self.window_samples - clip.shape[0]))

    def _long_fusion(self, mel: torch.Tensor) -> torch.Tensor:
        """``[frames, n_mels]`` of a long clip -> ``[4, chunk_frames, n_mels]``: shrunk whole + 3 windows."""
        starts = np.array_split(np.arange(mel.shape[0] - self.chunk_frames + 1), 3)
        picks = [int(part[len(part) // 2]) if len(part) else 0 for part in starts]  # the middle of each third
        chunks = [mel[p: p + self.chunk_frames] for p in picks]
        shrunk = F.interpolate(mel[None, None], size=[self.chunk_frames, self.n_mels], mode="bilinear",
                               align_corners=False)[0, 0]
        return torch.stack([shrunk, *chunks])

    def forward(self, waveform: torch.Tensor, lengths: torch.Tensor | None = None
                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        if waveform.dim() == 1:
            waveform = waveform[None]
        waveform = waveform.to(self.window.device, torch.float32)
        if lengths is None:
            lengths = torch.full((waveform.shape[0],), waveform.shape[1], dtype=torch.long)
        feats, longer, covered = [], [], []
        with torch.autocast(device_type=waveform.device.type, enabled=False):
            for i, n in enumerate(lengths.tolist()):
                clip = waveform[i, : max(1, int(n))]
                is_long = False
                if clip.shape[0] > self.window_samples and not self.fusion:
                    clip = clip[: self.window_samples]  # the extractor draws the start at random
                if clip.shape[0] > self.window_samples:  # fusion over the whole clip
                    mel = self._log_mel(clip)
                    is_long = mel.shape[0] != self.chunk_frames
                    feat = self._long_fusion(mel) if is_long else mel[None].expand(FUSION_CHANNELS, -1, -1)
                    covered.append(1.0)
                else:
                    padding = self.settings["padding"]
                    kept = clip.shape[0] * (self.window_samples // clip.shape[0] if padding == "repeatpad" else 1)
                    covered.append(1.0 if padding == "repeat" else min(1.0, kept / self.window_samples))
                    mel = self._log_mel(self._fill(clip))
                    feat = mel[None].expand(FUSION_CHANNELS if self.fusion else 1, -1, -1)
                feats.append(feat)
                longer.append(is_long)
        device = waveform.device
        return (torch.stack(feats), torch.tensor(longer, device=device),
                torch.tensor(covered, device=device))


class HFClapAudioEncoder(nn.Module):
    """CLAP's audio tower (``ClapAudioModel``) on waveforms: ``forward(waveform, lengths) -> EncoderOutput``.

    Options: ``config`` (the ``ClapAudioConfig`` dict; weights come from the checkpoint) and ``features``
    (the feature extractor settings, :func:`feature_settings`); ``freeze``.
    """

    def __init__(self, config: dict[str, Any], features: dict[str, Any] | None = None, freeze: bool = False):
        super().__init__()
        transformers = _import_transformers()
        self.model = transformers.ClapAudioModel(transformers.ClapAudioConfig(**config))
        self.audio_config = dict(config)
        self.features = ClapFeatures(**(features or {}))
        if self.model.config.enable_fusion != self.features.fusion:
            raise MlatrError(f"hf-clap: the audio model has enable_fusion={self.model.config.enable_fusion} but the "
                             f"feature extractor's truncation is {self.features.settings['truncation']!r} (fusion "
                             "models read fusion features, the others rand_trunc)")
        self.output_dim = int(self.model.audio_encoder.num_features)
        self.freeze = bool(freeze)
        if self.freeze:
            self.model.requires_grad_(False)

    def config(self) -> dict[str, Any]:
        return {"name": "hf-clap-audio", "config": self.audio_config, "features": self.features.settings,
                "freeze": self.freeze}

    def forward(self, waveform: torch.Tensor, lengths: torch.Tensor | None = None) -> EncoderOutput:
        features, is_longer, covered = self.features(waveform, lengths)  # [B, C, frames, mels], [B], [B]
        out = self.model(input_features=features, is_longer=is_longer[:, None])
        frames = out.last_hidden_state.mean(dim=2).transpose(1, 2)  # [B, L, C]
        steps = frames.shape[1]
        starts = torch.arange(steps, device=frames.device, dtype=torch.float32) / steps
        mask = starts[None, :] < covered[:, None]
        frames = frames * mask[..., None].to(frames.dtype)
        return EncoderOutput(pooled=out.pooler_output, frames=frames, mask=mask)


class HFClapTextEncoder(nn.Module):
    """CLAP's text tower (``ClapTextModel``: RoBERTa + pooler) with the folder's tokenizer.

    Options: ``path`` (the ClapModel folder: its tokenizer), ``config`` (the ``ClapTextConfig`` dict; weights
    come from the checkpoint), ``max_length`` (tokens; default the model's position limit), ``freeze``.
    """

    def __init__(self, path: str, config: dict[str, Any], max_length: int | None = None, freeze: bool = False):
        super().__init__()
        transformers = _import_transformers()
        folder = Path(path).expanduser()
        try:
            self.tokenizer = load_tokenizer(folder, "text encoder 'hf-clap-text'")
        except MlatrError:  # the files' own check, already saying what is wrong
            raise
        except (OSError, ValueError, KeyError) as exc:
            raise MlatrError(f"text encoder 'hf-clap-text': no tokenizer in {folder} ({type(exc).__name__}: "
                             f"{exc}); the ClapModel folder (e.g. laion/clap-htsat-unfused) holds it") from exc
        self.path, self.text_config = str(path), dict(config)
        self.model = transformers.ClapTextModel(transformers.ClapTextConfig(**config))
        limit = int(self.model.config.max_position_embeddings) - 2  # RoBERTa's positions start after padding
        self.max_length = int(max_length) if max_length is not None else limit
        self.output_dim = int(self.model.config.hidden_size)
        self.freeze = bool(freeze)
        if self.freeze:
            self.model.requires_grad_(False)

    def config(self) -> dict[str, Any]:
        return {"name": "hf-clap-text", "path": self.path, "config": self.text_config, "max_length": self.max_length,
                "freeze": self.freeze}

    def forward(self, texts: Sequence[str], langs: Sequence[str] | None = None) -> EncoderOutput:
        enc = self.tokenizer(list(texts), padding=True, truncation=True, max_length=self.max_length,
                             return_tensors="pt")
        device = next(self.model.parameters()).device
        ids, attention = enc["input_ids"].to(device), enc["attention_mask"].to(device)
        out = self.model(input_ids=ids, attention_mask=attention)
        mask = attention.bool()
        frames = out.last_hidden_state * mask[..., None].to(out.last_hidden_state.dtype)
        return EncoderOutput(pooled=out.pooler_output, frames=frames, mask=mask)


@register_audio_encoder("hf-clap-audio")
def hf_clap_audio(**options: Any) -> HFClapAudioEncoder:
    """CLAP's HTSAT audio tower with its feature extraction (from ``mlatr import-checkpoint --from hf-clap``)."""
    check_options(HFClapAudioEncoder, options, "audio", "hf-clap-audio")
    return HFClapAudioEncoder(**options)


@register_text_encoder("hf-clap-text")
def hf_clap_text(**options: Any) -> HFClapTextEncoder:
    """CLAP's RoBERTa text tower (from ``mlatr import-checkpoint --from hf-clap``)."""
    check_options(HFClapTextEncoder, options, "text", "hf-clap-text")
    return HFClapTextEncoder(**options)


def temperature_of(logit_scale: torch.Tensor) -> float:
    """CLAP's ``logit_scale`` (``log(1 / tau)``) -> ``tau``."""
    return 1.0 / math.exp(float(logit_scale.reshape(-1)[0]))
