"""A config's dual encoder at full size without weights, tokenizer files or downloads.

The planner needs the real module classes at their real sizes, not their pretrained values. Each encoder
is built by its own class on the ``meta`` device (no memory, no initialisation cost) with the options of
the config, except those that point at pretrained files:

* ``ced-*``: the ``checkpoint`` option is dropped (the architecture comes from the size);
* ``htsat``: ``path`` is replaced by ``config: {}`` (``ClapAudioConfig``'s defaults are the HTSAT of
  ``laion/clap-htsat-unfused``), unless the config gives its own ``config``;
* ``sonar`` / ``bert`` / ``labse`` / ``xlmr``: :class:`ArchitectureOnlyText`, the real
  :class:`~mlatr.models.hf_text.HFTextEncoder` whose model is built from the published architecture
  (:data:`HF_ARCHITECTURES`) instead of ``from_pretrained``, with :class:`FixedLengthTokenizer`;
* ``small-transformer``: its tokenizer is trained on synthetic captions (it has no pretrained weights).

Captions: the planner has no data, so every caption is ``caption_tokens`` tokens long after tokenisation
(language code and ``</s>`` included for SONAR; a batch is padded to its longest caption, so this is the
batch's padded width). :func:`planning_captions` makes such captions for the small tokenizer.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from mlatr.errors import MlatrError
from mlatr.models.dual_encoder import DualEncoder
from mlatr.models.hf_text import SPECS, HFTextEncoder, _model_class
from mlatr.models.registry import build_audio_encoder, build_text_encoder, text_encoder_takes_corpus
from mlatr.training.config import Config

#: The published architectures of the Hugging Face text towers (their ``config.json`` values that size the
#: model; ``transformers`` config classes fill in the rest). SONAR's text encoder is NLLB-200's 1.3 B dense
#: encoder (``cointegrated/SONAR_200_text_encoder``, 766 M parameters); BERT / LaBSE / XLM-R are the base sizes.
#: Layer drop is 0 (M2M100Config's default of 0.05 would skip random layers in training).
HF_ARCHITECTURES: dict[str, tuple[str, dict[str, Any]]] = {
    "sonar": ("M2M100Config", {"vocab_size": 256206, "d_model": 1024, "encoder_layers": 24,
                               "encoder_attention_heads": 16, "encoder_ffn_dim": 8192, "max_position_embeddings": 1024,
                               "scale_embedding": True, "activation_function": "relu", "dropout": 0.1,
                               "attention_dropout": 0.1, "activation_dropout": 0.0, "encoder_layerdrop": 0.0,
                               "pad_token_id": 1, "bos_token_id": 0, "eos_token_id": 2, "decoder_layers": 1}),
    "bert": ("BertConfig", {"vocab_size": 30522, "hidden_size": 768, "num_hidden_layers": 12,
                            "num_attention_heads": 12, "intermediate_size": 3072, "max_position_embeddings": 512}),
    "labse": ("BertConfig", {"vocab_size": 501153, "hidden_size": 768, "num_hidden_layers": 12,
                             "num_attention_heads": 12, "intermediate_size": 3072, "max_position_embeddings": 512}),
    "xlmr": ("XLMRobertaConfig", {"vocab_size": 250002, "hidden_size": 768, "num_hidden_layers": 12,
                                  "num_attention_heads": 12, "intermediate_size": 3072,
                                  "max_position_embeddings": 514, "pad_token_id": 1}),
}

#: Token ids of :class:`FixedLengthTokenizer` (what the models' configs expect: pad 1, eos 2, unk 3).
_PAD, _EOS, _UNK, _WORD = 1, 2, 3, 5


class FixedLengthTokenizer:
    """A stand-in for a pretrained tokenizer: every caption becomes ``pieces`` tokens (the last of a batch one
    fewer, so that the batch is padded as real batches are), every language code one known special token.
    Enough of the ``transformers`` tokenizer interface for :class:`~mlatr.models.hf_text.HFTextEncoder`."""

    pad_token_id, eos_token_id, unk_token_id = _PAD, _EOS, _UNK

    def __init__(self, pieces: int, vocab_size: int):
        self.pieces, self.vocab_size = int(pieces), int(vocab_size)

    def __len__(self) -> int:
        return self.vocab_size

    def convert_tokens_to_ids(self, token: str) -> int:
        return 4  # a language code (any known special token)

    def __call__(self, texts: Sequence[str], add_special_tokens: bool = True, padding: bool = False,
                 truncation: bool = False, max_length: int | None = None, return_tensors: str | None = None):
        lengths = [self.pieces] * len(texts)
        if len(texts) > 1 and self.pieces > 1:
            lengths[-1] -= 1  # one shorter caption: the batch is padded, as real batches are
        rows = [([0] + [_WORD] * n + [_EOS]) if add_special_tokens else [_WORD] * n for n in lengths]
        if max_length is not None and truncation:
            rows = [r[:max_length] for r in rows]
        if return_tensors == "pt":
            ids = torch.tensor(rows, dtype=torch.long)
            return {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
        return {"input_ids": rows}


class ArchitectureOnlyText(HFTextEncoder):
    """:class:`~mlatr.models.hf_text.HFTextEncoder` with its published architecture and no weights: the same
    forward, pooling, freezing and checkpointing; the model comes from :data:`HF_ARCHITECTURES` and the
    tokenizer is a :class:`FixedLengthTokenizer` giving ``caption_tokens`` tokens per caption, or ``tokenizer``
    (a real one, to count a manifest's caption tokens: :mod:`mlatr.lab.planning.caption_lengths`). ``architecture``
    replaces published values (a smaller tower of the same class, for the CPU validation)."""

    def __init__(self, name: str, caption_tokens: int, architecture: dict[str, Any] | None = None,
                 tokenizer: Any = None, **options: Any):
        if name not in HF_ARCHITECTURES:
            raise MlatrError(f"planning: no published architecture of text encoder {name!r} "
                             f"(known: {', '.join(HF_ARCHITECTURES)})")
        self._caption_tokens = int(caption_tokens)
        self._tokenizer = tokenizer
        self._architecture = {**HF_ARCHITECTURES[name][1], **(architecture or {})}
        options.pop("path", None)
        super().__init__(name, path=f"({name} architecture, no weights)", **options)

    def _load(self, path: str | None) -> tuple[Any, torch.nn.Module]:
        import transformers  # optional extra: only a config with a Hugging Face text encoder gets here

        attention = {"attn_implementation": self.attention} if self.attention is not None else {}
        config = getattr(transformers, HF_ARCHITECTURES[self.name][0])(**self._architecture, **attention)
        kwargs = {"add_pooling_layer": SPECS[self.name].add_pooling_layer}
        model_class = _model_class(self.name)
        model = model_class(config, **kwargs) if kwargs["add_pooling_layer"] is not None else model_class(config)
        if self._tokenizer is not None:
            return self._tokenizer, model
        # two special tokens around the pieces: [language code] ... [</s>] (SONAR), [CLS] ... [SEP] (BERT)
        return FixedLengthTokenizer(max(1, self._caption_tokens - 2), config.vocab_size), model


def planning_captions(n: int, caption_tokens: int) -> list[str]:
    """``n`` captions of ``caption_tokens - 2`` words (one token each for a word-level tokenizer), the last
    one a word shorter so that a batch is padded, as real batches are."""
    words = max(2, caption_tokens - 2)
    return [" ".join(["sound"] * (words - (i == n - 1))) for i in range(n)]


def _audio_options(spec: dict[str, Any]) -> dict[str, Any]:
    opts = dict(spec)
    name = opts.pop("name")
    if name.startswith("ced"):
        opts.pop("checkpoint", None)
    elif name == "htsat" and opts.get("path"):
        opts.pop("path")
        opts.setdefault("config", {})
    return {"name": name, **opts}


def build_planned_model(cfg: Config, caption_tokens: int, text_architecture: dict[str, Any] | None = None
                        ) -> DualEncoder:
    """The config's :class:`DualEncoder` at full size (on the current default device: ``meta`` for a
    plan), pretrained files replaced as the module docstring says (``text_architecture``: see
    :class:`ArchitectureOnlyText`)."""
    audio_opts = _audio_options(cfg.model.audio)
    text_opts = dict(cfg.model.text)
    name = text_opts.pop("name")
    audio = build_audio_encoder(audio_opts.pop("name"), **audio_opts)
    if name in SPECS:
        text = ArchitectureOnlyText(name, caption_tokens, text_architecture, **text_opts)
    else:
        if text_encoder_takes_corpus(name) and "tokenizer" not in text_opts:
            text_opts["corpus"] = planning_captions(4, caption_tokens) + ["a dog barks", "rain falls"]
        text = build_text_encoder(name, **text_opts)
    return DualEncoder(audio, text, embed_dim=cfg.model.embed_dim, temperature=cfg.model.temperature,
                       learnable_temperature=cfg.model.learnable_temperature)
