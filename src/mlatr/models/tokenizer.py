"""A multilingual subword tokenizer trained on the manifest's captions with ``tokenizers``.

Design (no pretrained vocabulary can be downloaded, so the vocabulary is learnt from the captions):

* normaliser: NFKC then lowercase (full-width punctuation and letter case collapse);
* pre-tokeniser: every Han character (CJK ideographs, used by zho and jpn) is isolated, then the
  GPT-2 byte-level split (words, numbers, punctuation; a word carries its leading space). Japanese
  and Chinese need no spaces: Han characters are units, kana runs are words that BPE can split;
* model: byte-level BPE. Every string is encodable (no unknown token: unseen characters fall back to
  bytes) and decoding gives back the normalised text exactly;
* special tokens ``[PAD]`` (id 0) and ``[CLS]`` (id 1).

The whole tokenizer serialises to one JSON string (:meth:`CaptionTokenizer.to_json`), which the text
encoder stores in its ``config()`` so a checkpoint rebuilds with no other file. Read back from a stored
config (a user's file), it is checked first (:func:`check_tokenizer_json`): bounded size and nesting, a BPE
model of at most :data:`MAX_VOCAB` tokens, and no regular expression but the one above (a pattern such as
``(a|a)+$`` made every query panic inside the Rust tokenizer).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import torch
from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

from mlatr.errors import InputError, MlatrError, panic_as_error
from mlatr.json_input import parse_json

PAD, CLS = "[PAD]", "[CLS]"

#: CJK unified ideographs (with extension A and compatibility ideographs).
HAN_PATTERN = r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]"
#: Largest serialised tokenizer read back (mlatr's are about 100 kB for 4,000 tokens).
MAX_TOKENIZER_CHARS = 32 << 20
#: Largest vocabulary read back.
MAX_VOCAB = 1 << 20


def check_tokenizer_json(text: object) -> None:
    """Refuse a serialised tokenizer that is not one :meth:`CaptionTokenizer.train` writes: not a string, over
    :data:`MAX_TOKENIZER_CHARS`, not JSON (or nested too deeply), not a BPE model, a vocabulary over
    :data:`MAX_VOCAB`, or a regular expression other than :data:`HAN_PATTERN` anywhere (a hostile pattern backtracks
    without end and panics in Rust at every query). :class:`InputError` at field ``tokenizer``."""
    if not isinstance(text, str):
        raise InputError(f"expected the tokenizer's JSON text, found {type(text).__name__}", field="tokenizer")
    if len(text) > MAX_TOKENIZER_CHARS:
        raise InputError(f"{len(text):,} characters (at most {MAX_TOKENIZER_CHARS:,})", field="tokenizer")
    value = parse_json(text, field="tokenizer")
    model = value.get("model") if isinstance(value, dict) else None
    if not isinstance(model, dict) or model.get("type") != "BPE" or not isinstance(model.get("vocab"), dict):
        raise InputError("expected a BPE tokenizer with its vocabulary (what mlatr trains)", field="tokenizer")
    if len(model["vocab"]) > MAX_VOCAB:
        raise InputError(f"a vocabulary of {len(model['vocab']):,} tokens (at most {MAX_VOCAB:,})", field="tokenizer")
    stack = [value]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            pattern = node.get("Regex")
            if "Regex" in node and pattern != HAN_PATTERN:
                raise InputError(f"the regular expression {str(pattern)[:80]!r} is not one mlatr's tokenizer uses "
                                 "(a hostile pattern can backtrack without end)", field="tokenizer")
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)


class CaptionTokenizer:
    """Wraps a ``tokenizers.Tokenizer``: batch encoding to padded id tensors, JSON (de)serialisation."""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        self.pad_id = tokenizer.token_to_id(PAD)
        self.cls_id = tokenizer.token_to_id(CLS)
        if self.pad_id is None or self.cls_id is None:
            raise MlatrError(f"tokenizer lacks the special tokens {PAD} and {CLS}")

    @classmethod
    def train(cls, texts: Iterable[str], vocab_size: int = 4000, min_frequency: int = 2) -> CaptionTokenizer:
        """Learn a byte-level BPE vocabulary of at most ``vocab_size`` tokens from ``texts``."""

        tok = Tokenizer(models.BPE())
        tok.normalizer = normalizers.Sequence([normalizers.NFKC(), normalizers.Lowercase()])
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(HAN_PATTERN), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
        ])
        tok.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=min_frequency,
                                      special_tokens=[PAD, CLS], show_progress=False,
                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
        tok.train_from_iterator((t for t in texts if t), trainer)
        return cls(tok)

    @classmethod
    def from_json(cls, text: str) -> CaptionTokenizer:
        """The tokenizer :meth:`to_json` wrote, checked first (:func:`check_tokenizer_json`)."""
        check_tokenizer_json(text)
        with panic_as_error("reading the tokenizer"):
            try:
                tok = Tokenizer.from_str(text)
            except Exception as exc:  # the tokenizers library raises plain Exception for a bad tokenizer
                raise InputError(f"not a tokenizer ({str(exc).splitlines()[0][:200]})", field="tokenizer") from None
        return cls(tok)

    def to_json(self) -> str:
        return self.tokenizer.to_str()

    @property
    def vocab_size(self) -> int:
        return self.tokenizer.get_vocab_size()

    def normalize(self, text: str) -> str:
        """The text as the tokenizer sees it (NFKC, lowercase): what :meth:`decode` gives back."""
        return self.tokenizer.normalizer.normalize_str(text)

    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text).ids

    def decode(self, ids: Sequence[int]) -> str:
        return self.tokenizer.decode(list(ids), skip_special_tokens=True)

    def encode_batch(self, texts: Sequence[str], max_length: int, add_cls: bool = True
                     ) -> tuple[torch.Tensor, torch.Tensor]:
        """``texts`` -> ``(ids [B, L] long, mask [B, L] bool)``, right-padded with ``[PAD]``.

        Each row is ``[CLS]`` (when ``add_cls``) then the caption's tokens, truncated to
        ``max_length`` positions; ``L`` is the longest row. Every row has at least one valid position.
        """
        rows = []
        for enc in self.tokenizer.encode_batch(list(texts)):
            ids = ([self.cls_id] if add_cls else []) + enc.ids
            rows.append(ids[:max_length] or [self.pad_id])
        width = max(len(r) for r in rows)
        ids = torch.full((len(rows), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros(len(rows), width, dtype=torch.bool)
        for i, r in enumerate(rows):
            ids[i, : len(r)] = torch.tensor(r, dtype=torch.long)
            mask[i, : len(r)] = True
        return ids, mask
