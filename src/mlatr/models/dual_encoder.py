"""The dual encoder: an audio encoder and a text encoder projected into one unit-norm space.

ATRI §3.1 / §5.3 (ML-CLAP setup): audio ``a`` and text ``t`` are encoded, projected (Linear-ReLU-
Linear, :class:`~mlatr.models.projection.ProjectionHead`) and L2-normalised, so that
``sim(a, t) = <a, t>`` is a cosine and the contrastive logits are ``sim / tau`` (ATRI eq. 1) with
``tau = 0.07`` (ATRI §5.3) unless the temperature is learnt.

Learnable temperature: parameterised as ``log tau`` (as CLIP's logit scale) and clamped to
``[min_temperature, max_temperature]`` (default ``[0.01, 1.0]``; CLIP caps ``1/tau`` at 100) when read.

Text head (``text_head``): ``mlp`` (the ML-CLAP head above), or, over a frozen multilingual text encoder
whose cross-lingual alignment should survive training, ``identity`` (only the audio head learns, into the
text encoder's own space) or ``residual`` (``x + MLP(x)``, starting at the identity;
:class:`~mlatr.models.projection.ResidualHead`). Both need ``embed_dim`` = the text encoder's size.

Ensemble (``ensemble=N``, N > 1): each side's projection is N heads of that kind whose unit outputs are averaged
(:class:`~mlatr.models.projection.MeanOfUnitHeads`); :meth:`DualEncoder.ensemble_of` joins N models trained apart
(``mlatr demo-real --ensemble``). Not from the papers: measured on real sounds (docs/real-sounds.md).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from mlatr.errors import MlatrError, panic_as_error
from mlatr.models.outputs import EncoderOutput
from mlatr.models.projection import PROJECTION_HEADS, MeanOfUnitHeads, ProjectionHead
from mlatr.models.protocols import AudioEncoder, TextEncoder
from mlatr.models.registry import build_audio_encoder, build_text_encoder


def _project(head: ProjectionHead, out: EncoderOutput) -> EncoderOutput:
    """Project pooled and frame features with ``head``; L2-normalise each vector; zero padded frames."""
    pooled = F.normalize(head(out.pooled), dim=-1)
    frames = None
    if out.frames is not None:
        frames = F.normalize(head(out.frames), dim=-1)
        if out.mask is not None:
            frames = frames * out.mask[..., None].to(frames.dtype)
    return EncoderOutput(pooled=pooled, frames=frames, mask=out.mask)


class AudioTower(nn.Module):
    """An audio encoder and its projection head: ``waveform [B, T], lengths [B] -> EncoderOutput`` as
    :meth:`DualEncoder.encode_audio` gives it."""

    def __init__(self, audio_encoder: AudioEncoder, projection: nn.Module):
        super().__init__()
        self.audio_encoder, self.projection = audio_encoder, projection

    def forward(self, waveform: torch.Tensor, lengths: torch.Tensor | None = None) -> EncoderOutput:
        return _project(self.projection, self.audio_encoder(waveform, lengths))


class DualEncoder(nn.Module):
    """Audio and text encoders + one projection head per modality + the temperature."""

    def __init__(self, audio_encoder: AudioEncoder, text_encoder: TextEncoder, embed_dim: int = 128,
                 temperature: float = 0.07, learnable_temperature: bool = False,
                 projection_hidden: int | None = None, min_temperature: float = 0.01,
                 max_temperature: float = 1.0, text_head: str = "mlp", ensemble: int = 1):
        super().__init__()
        if not isinstance(ensemble, int) or ensemble < 1:
            raise MlatrError(f"ensemble must be a positive number of head pairs, got {ensemble!r}")
        if not 0 < min_temperature <= temperature <= max_temperature:
            raise MlatrError(f"temperature {temperature} must lie in [{min_temperature}, {max_temperature}]"
                             " and be positive")
        self.audio_encoder, self.text_encoder = audio_encoder, text_encoder
        self.embed_dim = int(embed_dim)
        self.projection_hidden = projection_hidden
        self.ensemble = ensemble

        def heads(kind: type[nn.Module], in_dim: int) -> nn.Module:
            made = [kind(in_dim, self.embed_dim, projection_hidden) for _ in range(ensemble)]
            return made[0] if ensemble == 1 else MeanOfUnitHeads(made)

        self.audio_projection = heads(ProjectionHead, audio_encoder.output_dim)
        if text_head not in PROJECTION_HEADS:
            raise MlatrError(f"text_head must be one of {', '.join(PROJECTION_HEADS)}, got {text_head!r}")
        if text_head != "mlp" and text_encoder.output_dim != self.embed_dim:
            raise MlatrError(f"text_head {text_head!r} keeps the text encoder's space: embed_dim must equal its "
                             f"output size {text_encoder.output_dim}, got {self.embed_dim}")
        self.text_head = text_head
        self.text_projection = heads(PROJECTION_HEADS[text_head], text_encoder.output_dim)
        self.initial_temperature = float(temperature)
        self.learnable_temperature = bool(learnable_temperature)
        self.min_temperature, self.max_temperature = float(min_temperature), float(max_temperature)
        log_t = torch.tensor(math.log(temperature), dtype=torch.get_default_dtype())
        if self.learnable_temperature:
            self.log_temperature = nn.Parameter(log_t)
        else:
            self.register_buffer("log_temperature", log_t)

    @property
    def temperature(self) -> torch.Tensor:
        """Scalar tensor ``tau``: fixed, or ``exp(log tau)`` clamped to the allowed range."""
        return self.log_temperature.exp().clamp(self.min_temperature, self.max_temperature)

    def encode_audio(self, waveform: torch.Tensor, lengths: torch.Tensor | None = None) -> EncoderOutput:
        """Waveform ``[B, T]`` at 16 kHz -> unit-norm ``pooled [B, d]``, ``frames [B, L, d]``, ``mask``."""
        return self.audio_tower()(waveform, lengths)

    def audio_tower(self) -> AudioTower:
        """The audio side alone (encoder and projection, the modules themselves, not copies): what worker
        processes encode with (it pickles without the text tower)."""
        return AudioTower(self.audio_encoder, self.audio_projection)

    def encode_text(self, texts: Sequence[str], langs: Sequence[str] | None = None) -> EncoderOutput:
        """Captions (+ ISO 639-3 languages) -> unit-norm ``pooled [B, d]``, token ``frames``, ``mask``. A panic in
        the text encoder's tokenizer (Rust) is a :class:`~mlatr.errors.MlatrError`, not a ``BaseException``."""
        with panic_as_error("encoding text"):
            return _project(self.text_projection, self.text_encoder(texts, langs))

    def forward(self, waveform: torch.Tensor | None, lengths: torch.Tensor | None, texts: Sequence[str] | None,
                langs: Sequence[str] | None = None) -> tuple[EncoderOutput | None, EncoderOutput | None]:
        """Both modalities at once (one call, as ``DistributedDataParallel`` wants), audio first; a side
        given as None is not encoded and comes back as None (gradient caching replays one side at a time)."""
        audio = None if waveform is None else self.encode_audio(waveform, lengths)
        text = None if texts is None else self.encode_text(texts, langs)
        return audio, text

    def config(self) -> dict:
        """JSON-able description that :meth:`from_config` rebuilds (weights come from ``state_dict``)."""
        extra = {"text_head": self.text_head} if self.text_head != "mlp" else {}
        if self.ensemble > 1:
            extra["ensemble"] = self.ensemble
        return {"audio_encoder": self.audio_encoder.config(), "text_encoder": self.text_encoder.config(),
                "embed_dim": self.embed_dim, "temperature": self.initial_temperature,
                "learnable_temperature": self.learnable_temperature,
                "projection_hidden": self.projection_hidden, "min_temperature": self.min_temperature,
                "max_temperature": self.max_temperature, **extra}

    @classmethod
    def ensemble_of(cls, models: Sequence[DualEncoder]) -> DualEncoder:
        """One model whose heads are the mean of ``models``' unit head outputs (their modules, not copies); the
        models share one config (encoders, sizes, head kind: trained apart from different seeds), and the
        first one's encoders and temperature are kept."""
        if not models:
            raise MlatrError("an ensemble needs at least one model")
        first = models[0]
        if len(models) == 1:
            return first
        if any(m.config() != first.config() for m in models) or first.ensemble != 1:
            raise MlatrError("an ensemble joins single-head models of one config (heads trained apart)")
        joined = cls(first.audio_encoder, first.text_encoder, embed_dim=first.embed_dim,
                     temperature=first.initial_temperature, learnable_temperature=first.learnable_temperature,
                     projection_hidden=first.projection_hidden, min_temperature=first.min_temperature,
                     max_temperature=first.max_temperature, text_head=first.text_head)
        joined.ensemble = len(models)
        joined.audio_projection = MeanOfUnitHeads([m.audio_projection for m in models])
        joined.text_projection = MeanOfUnitHeads([m.text_projection for m in models])
        joined.log_temperature.data.copy_(first.log_temperature.data)
        return joined

    @classmethod
    def from_config(cls, cfg: dict) -> DualEncoder:
        """Rebuild the (untrained) model from :meth:`config`; load a ``state_dict`` for the weights."""
        cfg = dict(cfg)
        try:
            audio = build_audio_encoder(**cfg.pop("audio_encoder"))
            text = build_text_encoder(**cfg.pop("text_encoder"))
        except KeyError as exc:
            raise MlatrError(f"model config lacks {exc.args[0]!r}") from exc
        return cls(audio, text, **cfg)
