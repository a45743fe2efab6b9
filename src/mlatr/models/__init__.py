"""Encoders (audio, text) behind a registry, projection heads and the dual encoder."""

from mlatr.models.dual_encoder import DualEncoder
from mlatr.models.outputs import EncoderOutput
from mlatr.models.projection import ProjectionHead
from mlatr.models.registry import (
    audio_encoder_names,
    build_audio_encoder,
    build_text_encoder,
    register_audio_encoder,
    register_text_encoder,
    text_encoder_names,
)
from mlatr.models.small_audio import SmallCNNAudioEncoder
from mlatr.models.small_text import SmallTextEncoder
from mlatr.models.tokenizer import CaptionTokenizer

__all__ = [
    "CaptionTokenizer",
    "DualEncoder",
    "EncoderOutput",
    "ProjectionHead",
    "SmallCNNAudioEncoder",
    "SmallTextEncoder",
    "audio_encoder_names",
    "build_audio_encoder",
    "build_text_encoder",
    "register_audio_encoder",
    "register_text_encoder",
    "text_encoder_names",
]
