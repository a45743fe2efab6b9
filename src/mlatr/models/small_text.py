"""A small multilingual transformer text encoder with its own trained tokenizer.

It stands in for SONAR-TE (ATRI §5.2: "the fixed-size text representation is derived by pooling the
token-level outputs from the encoder") where no pretrained weights can be had: one shared encoder
for every language, token outputs pooled into one vector.

Pooling: ``"mean"`` (default, as SONAR) averages the valid token outputs (``[CLS]`` included);
``"cls"`` takes the output at the ``[CLS]`` position. Padded tokens are masked out of attention and
pooling, so a caption encodes the same whatever its batch mates.

Language embedding (``languages=[...]``, off by default): a learnt vector per language added to every
token. It is off by default because it gives each language its own offset in the text space, which
is the kind of language-dependent shift the consistency metrics (ATRI eq. 14-16) penalise; turn it on
to study that. With it on, an unknown language code is an error.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import torch
from torch import nn

from mlatr.errors import MlatrError
from mlatr.models.layers import masked_mean
from mlatr.models.outputs import EncoderOutput
from mlatr.models.protocols import QueryLanguages
from mlatr.models.registry import register_text_encoder
from mlatr.models.tokenizer import CaptionTokenizer

POOLINGS = ("mean", "cls")


class SmallTextEncoder(nn.Module):
    """``texts`` (+ ``langs``) -> pooled ``[B, dim]``, token features ``[B, L, dim]``, mask ``[B, L]``."""

    def __init__(self, tokenizer: CaptionTokenizer | str, dim: int = 128, num_layers: int = 2,
                 num_heads: int = 4, ff_dim: int = 256, max_length: int = 64, pooling: str = "mean",
                 languages: Sequence[str] | None = None, dropout: float = 0.1,
                 token_init_std: float = 0.02, position_init_std: float = 0.02):
        super().__init__()
        if not isinstance(tokenizer, CaptionTokenizer):  # a stored config's JSON text: checked as it is read
            tokenizer = CaptionTokenizer.from_json(tokenizer)
        if pooling not in POOLINGS:
            raise MlatrError(f"text pooling must be one of {POOLINGS}, got {pooling!r}")
        self.tokenizer = tokenizer
        self.dim, self.num_layers, self.num_heads = int(dim), int(num_layers), int(num_heads)
        self.ff_dim, self.max_length, self.pooling = int(ff_dim), int(max_length), pooling
        self.languages = list(languages) if languages else None
        self.dropout = float(dropout)
        self.output_dim = self.dim
        self.token_embedding = nn.Embedding(tokenizer.vocab_size, self.dim, padding_idx=tokenizer.pad_id)
        self.position_embedding = nn.Embedding(self.max_length, self.dim)
        self.language_embedding = nn.Embedding(len(self.languages), self.dim) if self.languages else None
        # Initial scale of the token / position embeddings: BERT's N(0, 0.02) by default, which learned
        # faster than N(0, 1) on the synthetic benchmark (docs/experiments.md, "Small encoders").
        self.token_init_std, self.position_init_std = float(token_init_std), float(position_init_std)
        with torch.no_grad():
            self.token_embedding.weight.normal_(0.0, self.token_init_std)
            self.token_embedding.weight[tokenizer.pad_id].zero_()
            self.position_embedding.weight.normal_(0.0, self.position_init_std)
        self.input_dropout = nn.Dropout(self.dropout)
        layer = nn.TransformerEncoderLayer(self.dim, self.num_heads, self.ff_dim, self.dropout,
                                           batch_first=True, norm_first=True)
        self.transformer = nn.TransformerEncoder(layer, self.num_layers, enable_nested_tensor=False)
        self.out_norm = nn.LayerNorm(self.dim)

    @classmethod
    def from_corpus(cls, texts: Iterable[str], vocab_size: int = 3000, min_frequency: int = 2,
                    **options) -> SmallTextEncoder:
        """Train the tokenizer on ``texts`` (e.g. all training captions, every language), then build."""
        return cls(CaptionTokenizer.train(texts, vocab_size, min_frequency), **options)

    def query_languages(self) -> QueryLanguages:
        """Required and limited to the trained languages with a language embedding; any, unread, without."""
        langs = self.languages
        return QueryLanguages(required=bool(langs), known=tuple(langs) if langs else None)

    def config(self) -> dict:
        """Registry name and options, the tokenizer JSON included (``build_text_encoder(**cfg)``)."""
        return {"name": "small-transformer", "tokenizer": self.tokenizer.to_json(), "dim": self.dim,
                "num_layers": self.num_layers, "num_heads": self.num_heads, "ff_dim": self.ff_dim,
                "max_length": self.max_length, "pooling": self.pooling, "languages": self.languages,
                "dropout": self.dropout, "token_init_std": self.token_init_std,
                "position_init_std": self.position_init_std}

    def _language_ids(self, langs: Sequence[str] | None, batch: int, device) -> torch.Tensor:
        if langs is None or len(langs) != batch:
            raise MlatrError("this text encoder has a language embedding: give one language per text")
        index = {code: i for i, code in enumerate(self.languages)}
        unknown = sorted({code for code in langs if code not in index})
        if unknown:
            raise MlatrError(f"text encoder has no language embedding for {', '.join(unknown)} "
                             f"(trained for {', '.join(self.languages)})")
        return torch.tensor([index[c] for c in langs], dtype=torch.long, device=device)

    def token_lengths(self, texts: Sequence[str], langs: Sequence[str] | None = None) -> list[int]:
        """Each caption's length in tokens as :meth:`forward` encodes it (``[CLS]`` included, truncated to
        ``max_length``); a batch is padded to its longest (:mod:`mlatr.lab.planning.caption_lengths`)."""
        return self.tokenizer.encode_batch(list(texts), self.max_length)[1].sum(dim=1).tolist()

    def forward(self, texts: Sequence[str], langs: Sequence[str] | None = None) -> EncoderOutput:
        device = self.token_embedding.weight.device
        ids, mask = self.tokenizer.encode_batch(texts, self.max_length)
        ids, mask = ids.to(device), mask.to(device)
        positions = torch.arange(ids.shape[1], device=device)
        x = self.token_embedding(ids) + self.position_embedding(positions)[None]
        if self.language_embedding is not None:
            x = x + self.language_embedding(self._language_ids(langs, len(texts), device))[:, None, :]
        x = self.transformer(self.input_dropout(x), src_key_padding_mask=~mask)
        frames = self.out_norm(x) * mask[:, :, None].to(x.dtype)
        pooled = masked_mean(frames, mask) if self.pooling == "mean" else frames[:, 0]
        return EncoderOutput(pooled=pooled, frames=frames, mask=mask)


@register_text_encoder("small-transformer")
def small_transformer(tokenizer: str | CaptionTokenizer | None = None, corpus: Iterable[str] | None = None,
                      vocab_size: int = 3000, min_frequency: int = 2, **options) -> SmallTextEncoder:
    """Build from a serialised ``tokenizer`` (a checkpoint's config) or train one on ``corpus``."""
    if tokenizer is None:
        if corpus is None:
            raise MlatrError("small-transformer needs a trained tokenizer or a corpus of captions")
        return SmallTextEncoder.from_corpus(corpus, vocab_size, min_frequency, **options)
    return SmallTextEncoder(tokenizer, **options)
