"""Encoders (audio, text) behind a registry, projection heads and the dual encoder."""

from mlatr.models.outputs import EncoderOutput
from mlatr.models.registry import (
    audio_encoder_names,
    build_audio_encoder,
    build_text_encoder,
    register_audio_encoder,
    register_text_encoder,
    text_encoder_names,
)

__all__ = [
    "EncoderOutput",
    "audio_encoder_names",
    "build_audio_encoder",
    "build_text_encoder",
    "register_audio_encoder",
    "register_text_encoder",
    "text_encoder_names",
]
