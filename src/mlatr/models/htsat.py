"""HTSAT through ``transformers``' ``ClapAudioModel``, with CLAP's 48 kHz log-mel front end in torch.

The fine-grained paper (§2: "HT-SAT is adopted as the audio encoder ... For audio clips longer than 10
seconds, we resize the log Mel-spectrograms to a fixed scale. The encoder has an embedding size of 768
and extracts fine-grained representations for 8x downsampled frames") follows the CLAP setting.
mlatr's waveforms are 16 kHz; CLAP's HTSAT reads log-mel computed at 48 kHz by ``ClapFeatureExtractor``.
:class:`ClapLogMel` re-implements that feature extraction in torch (no librosa):

* resample 16 -> 48 kHz inside (windowed-sinc interpolation, :func:`mlatr.models.aisfx.sinc_resample_kernel`);
* clips up to 10 s are filled to 10 s (480 000 samples): ``repeatpad`` (the clip tiled
  ``floor(480000 / n)`` times, then zeros; CLAP's default) or ``pad`` (zeros);
* power STFT: periodic Hann window 1024, hop 480, centred with reflection; 64 mel filters on the Slaney
  scale with Slaney area normalisation between ``f_min`` 50 and ``f_max`` 14 000 Hz (the
  ``mel_filters_slaney`` of the feature extractor, used when ``truncation`` is not "fusion");
  ``10 log10(max(mel, 1e-10))`` (no top_db);
* the ``[frames, 64]`` log-mel of each clip is resized (bicubic, corners aligned) to the encoder's fixed
  input of ``spec_size * freq_ratio`` frames (1024): for a 10 s clip that is the interpolation the
  encoder would do itself (1001 -> 1024), for a longer clip it is the paper's "resize to a fixed scale".

Outputs: ``pooled`` = the encoder's pooler output (mean over its final feature map, the vector CLAP
projects), ``frames [B, 32, 768]`` = the final feature map averaged over its frequency rows: the
1024-frame input is folded into a 256x256 image (4 time segments stacked along frequency), cut into 4x4
patches (64 columns) and merged 3 times (8 columns, i.e. the 256-column image 8x down-sampled per
segment); unfolding the 4 segments gives 32 positions of 320 ms for 10 s. ``mask`` marks positions
that start inside the clip's real audio (all of them under ``repeatpad`` for clips shorter than 10 s).
"""

from __future__ import annotations

import math
import warnings
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from safetensors import SafetensorError
from safetensors.torch import load_file
from torch import nn
from torch.utils.checkpoint import checkpoint

from mlatr.errors import MlatrError
from mlatr.file_kinds import folder_file
from mlatr.json_input import read_json_file
from mlatr.models.aisfx import resample_waveform, sinc_resample_kernel
from mlatr.models.freezing import freeze_all_but_last
from mlatr.models.hf_text import HF_INSTALL_HINT, WEIGHT_FILES, check_options
from mlatr.models.outputs import EncoderOutput
from mlatr.models.registry import register_audio_encoder

CLAP_RATE = 48_000
CLIP_SECONDS = 10


def slaney_hz_to_mel(freq: np.ndarray) -> np.ndarray:
    """Slaney's mel scale: linear ``3 f / 200`` below 1 kHz, logarithmic above (step ``ln(6.4) / 27``)."""
    freq = np.asarray(freq, dtype=np.float64)
    logstep = math.log(6.4) / 27.0
    return np.where(freq < 1000.0, 3.0 * freq / 200.0, 15.0 + np.log(np.maximum(freq, 1e-12) / 1000.0) / logstep)


def slaney_mel_to_hz(mel: np.ndarray) -> np.ndarray:
    """Inverse of :func:`slaney_hz_to_mel`."""
    mel = np.asarray(mel, dtype=np.float64)
    logstep = math.log(6.4) / 27.0
    return np.where(mel < 15.0, 200.0 * mel / 3.0, 1000.0 * np.exp(logstep * (mel - 15.0)))


def slaney_mel_filterbank(n_mels: int = 64, n_fft: int = 1024, sample_rate: int = CLAP_RATE,
                          f_min: float = 50.0, f_max: float = 14_000.0) -> torch.Tensor:
    """``[n_fft // 2 + 1, n_mels]`` triangular filters equally spaced on the Slaney mel scale, each scaled
    by ``2 / (f_upper - f_lower)`` (Slaney area normalisation), evaluated at the STFT bin frequencies."""
    bins = np.linspace(0.0, sample_rate / 2.0, n_fft // 2 + 1)
    edges = slaney_mel_to_hz(np.linspace(slaney_hz_to_mel(f_min), slaney_hz_to_mel(f_max), n_mels + 2))
    lower, centre, upper = edges[:-2], edges[1:-1], edges[2:]
    rising = (bins[:, None] - lower[None]) / (centre - lower)[None]
    falling = (upper[None] - bins[:, None]) / (upper - centre)[None]
    fb = np.maximum(0.0, np.minimum(rising, falling)) * (2.0 / (upper - lower))[None]
    return torch.from_numpy(fb.astype(np.float32))


def clap_log_mel(wave: torch.Tensor, window: torch.Tensor, hop_length: int, filterbank: torch.Tensor) -> torch.Tensor:
    """``[B, N]`` -> ``[B, frames, n_mels]``: power STFT (``window``'s length, centred with reflection) through
    ``filterbank [bins, n_mels]``, in dB ``10 log10(max(mel power, 1e-10))`` (``ClapFeatureExtractor``'s
    ``_np_extract_fbank_features``)."""
    n_fft = window.shape[0]
    spec = torch.stft(wave, n_fft, hop_length, n_fft, window, center=True, pad_mode="reflect", return_complex=True)
    power = spec.real.square() + spec.imag.square()  # [B, bins, frames]
    mel = torch.einsum("bkf,km->bfm", power, filterbank)
    return 10.0 * torch.log10(mel.clamp(min=1e-10))


class ClapLogMel(nn.Module):
    """Waveform ``[B, T]`` at ``input_rate`` (+ lengths) -> log-mel ``[B, 1, target_frames, n_mels]`` and
    the covered fraction ``[B]`` of the 10 s window (1.0 for clips of 10 s or more)."""

    def __init__(self, n_mels: int = 64, target_frames: int = 1024, input_rate: int = 16_000,
                 padding: str = "repeatpad", f_min: float = 50.0, f_max: float = 14_000.0,
                 n_fft: int = 1024, hop_length: int = 480, clip_seconds: float = CLIP_SECONDS):
        super().__init__()
        if padding not in ("repeatpad", "pad"):
            raise MlatrError(f"htsat: padding must be repeatpad or pad, got {padding!r}")
        self.n_mels, self.target_frames, self.input_rate = int(n_mels), int(target_frames), int(input_rate)
        self.padding, self.f_min, self.f_max = padding, float(f_min), float(f_max)
        self.n_fft, self.hop_length, self.clip_seconds = int(n_fft), int(hop_length), float(clip_seconds)
        self.register_buffer("window", torch.hann_window(self.n_fft, periodic=True, device="cpu"), persistent=False)
        self.register_buffer("filterbank", slaney_mel_filterbank(self.n_mels, self.n_fft, CLAP_RATE, self.f_min,
                                                                 self.f_max), persistent=False)
        kernel, self._width, self._orig, self._new = sinc_resample_kernel(self.input_rate, CLAP_RATE)
        self.register_buffer("resample_kernel", kernel, persistent=False)

    def config(self) -> dict[str, Any]:
        return {"padding": self.padding, "f_min": self.f_min, "f_max": self.f_max, "n_fft": self.n_fft,
                "hop_length": self.hop_length, "clip_seconds": self.clip_seconds, "input_rate": self.input_rate}

    def log_mel(self, wave48: torch.Tensor) -> torch.Tensor:
        """``[B, N]`` at 48 kHz -> ``[B, frames, n_mels]`` in dB: ``10 log10(max(mel power, 1e-10))``."""
        return clap_log_mel(wave48, self.window, self.hop_length, self.filterbank)

    def forward(self, waveform: torch.Tensor, lengths: torch.Tensor | None = None
                ) -> tuple[torch.Tensor, torch.Tensor]:
        if waveform.dim() == 1:
            waveform = waveform[None]
        waveform = waveform.to(self.window.device, torch.float32)
        b, t = waveform.shape
        if lengths is None:
            lengths = torch.full((b,), t, dtype=torch.long)
        with torch.autocast(device_type=waveform.device.type, enabled=False):
            wave48 = waveform
            if self.input_rate != CLAP_RATE:
                wave48 = resample_waveform(waveform, self.resample_kernel, self._width, self._orig, self._new)
            window = int(round(self.clip_seconds * CLAP_RATE))
            mels, covered = [None] * b, torch.ones(b)
            filled, filled_rows = [], []
            for i, n in enumerate(lengths.tolist()):
                n48 = max(1, min(wave48.shape[1], math.ceil(int(n) * CLAP_RATE / self.input_rate)))
                clip = wave48[i, :n48]
                if n48 >= window:  # long clip: log-mel of all of it, resized below
                    mels[i] = self.log_mel(clip[None])[0]
                    continue
                repeats = window // n48 if self.padding == "repeatpad" else 1
                clip = clip.repeat(repeats)
                covered[i] = clip.shape[0] / window
                filled.append(F.pad(clip, (0, window - clip.shape[0])))
                filled_rows.append(i)
            if filled:  # clips up to 10 s share one STFT
                for i, mel in zip(filled_rows, self.log_mel(torch.stack(filled)), strict=True):
                    mels[i] = mel
            out = torch.stack([F.interpolate(m[None, None], size=(self.target_frames, self.n_mels),
                                             mode="bicubic", align_corners=True)[0] for m in mels])
        return out, covered.to(out.device)


def _import_transformers():
    try:
        import transformers  # optional extra (mlatr[hf])
    except ImportError as exc:
        raise MlatrError(f"audio encoder 'htsat' needs transformers: {HF_INSTALL_HINT}") from exc
    return transformers


def _htsat_folder_error(path: Path, problem: str) -> MlatrError:
    return MlatrError(
        f"audio encoder 'htsat': {problem}. The folder {path} must hold a Hugging Face CLAP model (config.json of "
        f"model_type clap or clap_audio_model and {' or '.join(WEIGHT_FILES[:2])}). On a machine with internet "
        f"access: huggingface-cli download laion/clap-htsat-unfused --local-dir {path}, then copy the folder "
        "here and set model.audio.path to it")


#: Buffers a checkpoint may lack without harm (recomputed at construction / bookkeeping only).
_DERIVED_BUFFERS = ("relative_position_index", "num_batches_tracked")


def read_hf_weights(folder: Path, what: str = "audio encoder 'htsat'") -> dict[str, torch.Tensor]:
    """All tensors of a Hugging Face CLAP folder's safetensors: ``model.safetensors``, or the shards its
    ``model.safetensors.index.json`` names. Every file is read from inside the folder only and must be a
    regular file (:func:`~mlatr.file_kinds.folder_file`: a ``weight_map`` naming ``/etc/passwd`` or ``../x`` is
    refused, a FIFO never opened); pickled weights (``pytorch_model.bin``) are refused with the conversion to
    run; a damaged file is one :class:`MlatrError` naming it."""
    index = folder_file(folder, "model.safetensors.index.json", what)
    if index is not None:
        listing = read_json_file(index)
        weight_map = listing.get("weight_map") if isinstance(listing, dict) else None
        if not isinstance(weight_map, dict) or not all(isinstance(v, str) for v in weight_map.values()):
            raise MlatrError(f"{what}: {index}: weight_map: expected an object of tensor name -> file name")
        names = list(dict.fromkeys(weight_map.values()))
        bad = next((n for n in names if not n.endswith(".safetensors")), None)
        if bad is not None:
            raise MlatrError(f"{what}: {index}: weight_map names {bad!r}; mlatr reads .safetensors files only")
        files = [folder_file(folder, name, what, required=True) for name in names]
    else:
        single = folder_file(folder, "model.safetensors", what)
        if single is None:
            if any((folder / name).exists() for name in ("pytorch_model.bin", "pytorch_model.bin.index.json")):
                raise MlatrError(
                    f"{what}: {folder} holds pickled weights (pytorch_model.bin), which mlatr does not read "
                    "(unpickling runs code); convert them to safetensors first: python -c \"import transformers; "
                    f"transformers.ClapModel.from_pretrained('{folder}').save_pretrained('{folder}', "
                    "safe_serialization=True)\"")
            raise MlatrError(f"{what}: {folder} has no model.safetensors")
        files = [single]
    state: dict[str, torch.Tensor] = {}
    for file in files:
        try:
            state.update(load_file(str(file)))
        except (SafetensorError, OSError) as exc:
            raise MlatrError(f"{what}: {file}: cannot read the weights ({exc}: a truncated or damaged file?)") from None
    return state


def load_clap_audio_model(folder: Path):
    """``ClapAudioModel`` with the weights of a local CLAP folder; returns (model, report dict).

    A full CLAP model (``model_type`` clap, e.g. ``laion/clap-htsat-unfused``) keeps the audio tower under
    ``audio_model.`` and its config under ``audio_config``: ``ClapAudioModel.from_pretrained`` does not map
    those, so the keys are taken here; the text tower and projections are left out (``ignored``). A
    missing parameter is an error; unknown keys under the audio prefix are reported as ``unexpected``.
    """
    transformers = _import_transformers()
    try:
        config = read_json_file(folder / "config.json", "config.json")  # a list, 100,000 levels deep, a FIFO: refused
        state = read_hf_weights(folder)
    except MlatrError:  # the weights' own check, already saying what is wrong
        raise
    except (OSError, ValueError, KeyError, RuntimeError) as exc:
        raise _htsat_folder_error(folder, f"loading failed ({type(exc).__name__}: {exc})") from exc
    if not isinstance(config, dict):
        raise _htsat_folder_error(folder, "config.json is not a JSON object")
    kind = config.get("model_type")
    if kind == "clap":
        audio_config, prefix = config.get("audio_config") or {}, "audio_model."
    elif kind == "clap_audio_model":
        audio_config, prefix = config, ""
    else:
        raise _htsat_folder_error(folder, f"config.json has model_type {kind!r}, not a CLAP model")
    model = transformers.ClapAudioModel(transformers.ClapAudioConfig.from_dict(audio_config))
    own = model.state_dict()
    picked = {k[len(prefix):]: v for k, v in state.items() if k.startswith(prefix)}
    report = {"missing": sorted(k for k in own if k not in picked and not k.endswith(_DERIVED_BUFFERS)),
              "unexpected": sorted(k for k in picked if k not in own),
              "ignored": sorted(k for k in state if not k.startswith(prefix))}
    if report["missing"]:
        raise _htsat_folder_error(folder, f"the weights lack {len(report['missing'])} audio key(s) "
                                  f"({', '.join(report['missing'][:4])} ...)")
    model.load_state_dict({k: v for k, v in picked.items() if k in own}, strict=False)
    if report["unexpected"]:
        warnings.warn(f"{folder}: unexpected audio keys {', '.join(report['unexpected'][:8])}", stacklevel=2)
    return model, report


class HTSATAudioEncoder(nn.Module):
    """HTSAT (``ClapAudioModel``) on 16 kHz waveforms: ``forward(waveform, lengths) -> EncoderOutput``.

    Options: ``path`` (a local CLAP folder: ``laion/clap-htsat-unfused`` or a saved ``ClapAudioModel``) or
    ``config`` (a ``ClapAudioConfig`` dict: random weights, for training from scratch and tests);
    ``padding`` (repeatpad | pad), ``f_min``/``f_max``; ``freeze``, ``train_last_stages`` (only the last n
    Swin stages and the final norm train), ``gradient_checkpointing`` (per Swin stage).
    """

    def __init__(self, path: str | None = None, config: dict[str, Any] | None = None, padding: str = "repeatpad",
                 f_min: float = 50.0, f_max: float = 14_000.0, freeze: bool = False,
                 train_last_stages: int | None = None, gradient_checkpointing: bool = False):
        super().__init__()
        transformers = _import_transformers()
        self.path, self.freeze, self.train_last_stages = path, bool(freeze), train_last_stages
        self.gradient_checkpointing = bool(gradient_checkpointing)
        if path:
            folder = Path(path).expanduser()
            if not folder.is_dir():
                raise _htsat_folder_error(folder, "the folder does not exist")
            if not (folder / "config.json").is_file() or not any((folder / f).is_file() for f in WEIGHT_FILES):
                raise _htsat_folder_error(folder, "config.json or the weights are missing")
            self.model, self.load_report = load_clap_audio_model(folder)
        elif config is not None:
            self.model = transformers.ClapAudioModel(transformers.ClapAudioConfig(**config))
            self.load_report = None
        else:
            raise _htsat_folder_error(Path("DIR"), "give path (pretrained weights) or config (random weights)")
        cfg = self.model.config
        self.audio_config = {k: v for k, v in cfg.to_diff_dict().items() if k not in ("architectures",
                                                                                      "transformers_version")}
        encoder = self.model.audio_encoder
        target = int(cfg.spec_size * encoder.freq_ratio)
        self.frontend = ClapLogMel(n_mels=cfg.num_mel_bins, target_frames=target, padding=padding, f_min=f_min,
                                   f_max=f_max)
        self.output_dim = int(encoder.num_features)
        if self.gradient_checkpointing:
            for stage in encoder.layers:
                stage.gradient_checkpointing = True
                stage._gradient_checkpointing_func = partial(checkpoint, use_reentrant=False)
        self._apply_freezing()

    def config(self) -> dict[str, Any]:
        """Registry name and options; the architecture is kept as ``config`` so a checkpoint rebuilds the
        model without the original folder (weights come from the saved state dict)."""
        fe = self.frontend
        return {"name": "htsat", "config": self.audio_config, "padding": fe.padding, "f_min": fe.f_min,
                "f_max": fe.f_max, "freeze": self.freeze, "train_last_stages": self.train_last_stages,
                "gradient_checkpointing": self.gradient_checkpointing}

    def _apply_freezing(self) -> None:
        n = self.train_last_stages
        encoder = self.model.audio_encoder
        freeze_all_but_last(self.model, encoder.layers, n, self.freeze, finals=[encoder.norm] if n else [],
                            owner="htsat", option="train_last_stages")

    def train(self, mode: bool = True) -> HTSATAudioEncoder:
        super().train(mode)
        if self.freeze or self.train_last_stages is not None:
            self.model.audio_encoder.batch_norm.eval()  # a frozen input norm keeps its statistics
        return self

    def forward(self, waveform: torch.Tensor, lengths: torch.Tensor | None = None) -> EncoderOutput:
        features, covered = self.frontend(waveform, lengths)  # [B, 1, 1024, 64], [B]
        out = self.model(input_features=features)
        fmap = out.last_hidden_state  # [B, C, freq rows, time positions]
        frames = fmap.mean(dim=2).transpose(1, 2)  # [B, L, C]
        steps = frames.shape[1]
        starts = torch.arange(steps, device=frames.device, dtype=torch.float32) / steps
        mask = starts[None, :] < covered[:, None].to(frames.device)
        frames = frames * mask[..., None].to(frames.dtype)
        return EncoderOutput(pooled=out.pooler_output, frames=frames, mask=mask)


@register_audio_encoder("htsat")
def htsat(**options: Any) -> HTSATAudioEncoder:
    """HTSAT (CLAP's audio tower, 768-d) from a local ``laion/clap-htsat-unfused`` folder or a config."""
    check_options(HTSATAudioEncoder, options, "audio", "htsat")
    return HTSATAudioEncoder(**options)


#: A tiny ``ClapAudioConfig`` (16 mel bins, 64x64 image, three one-block stages, 32-d): the HTSAT tiny
#: twin of the fine-grained presets (``configs/tiny/htsat-bert.overrides``) and the tests.
TINY_CLAP_AUDIO_CONFIG: dict[str, Any] = {
    "spec_size": 64, "num_mel_bins": 16, "patch_size": 4, "patch_stride": 4, "window_size": 4,
    "depths": [1, 1, 1], "num_attention_heads": [1, 2, 2], "patch_embeds_hidden_size": 8, "hidden_size": 32,
    "projection_dim": 16, "enable_fusion": False,
}
