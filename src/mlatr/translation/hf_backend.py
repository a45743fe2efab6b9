"""Translation with a local sequence-to-sequence model folder through ``transformers`` (offline).

Three layouts, recognised from the folder (``config.json``'s ``model_type`` and the tokenizer):

* **NLLB** (``facebook/nllb-200-*``; ``model_type`` m2m_100, tokenizer with ``eng_Latn``-style tokens):
  source code as ``tokenizer.src_lang``, target code forced as the first generated token; codes from
  :data:`mlatr.languages.NLLB_CODES` (``fra`` -> ``fra_Latn``, ``zho`` -> ``zho_Hans``).
* **M2M100** (``facebook/m2m100_418M`` / ``1.2B``; tokenizer with ``__fr__``-style tokens): the same with
  ISO 639-1 codes (``fra`` -> ``fr``).
* **Marian** (``Helsinki-NLP/opus-mt-*``; ``model_type`` marian): a single-pair model translates the pair
  it was trained on (``source_lang`` / ``target_lang`` in ``tokenizer_config.json`` are checked when
  present); a multi-target model (vocabulary with ``>>spa<<`` / ``>>es<<`` tokens) gets the target's token
  prepended to every caption.

Everything loads with ``local_files_only=True``: nothing is downloaded. Decoding is beam search
(``num_beams``) of at most ``max_new_tokens`` tokens; an empty output is a failed caption. The cache key's
model is the folder's resolved path. ``transformers`` / ``torch`` are imported when the backend is built.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from mlatr.errors import MlatrError
from mlatr.json_input import read_json_file
from mlatr.languages import NLLB_CODES, iso639_1, normalize
from mlatr.translation.backend import TranslationBackend, clean_output, single_line
from mlatr.translation.hf_local import load_local

LAYOUTS = ("nllb", "m2m100", "marian")
_MARIAN_TOKEN = re.compile(r"^>>([a-z_]+)<<$")


def _fetch_hint(folder: Path) -> str:
    return (f"On a machine with internet access: huggingface-cli download facebook/nllb-200-distilled-600M "
            f"--local-dir {folder} (or facebook/m2m100_418M, or a Helsinki-NLP/opus-mt-en-XX pair), then copy "
            f"the folder here")


def read_model_type(folder: Path) -> str:
    """``model_type`` of ``folder/config.json``; raise :class:`MlatrError` (with the fetch hint) otherwise."""
    if not folder.is_dir():
        raise MlatrError(f"hf backend: model folder {folder} does not exist. {_fetch_hint(folder)}")
    config = folder / "config.json"
    if not config.is_file():
        raise MlatrError(f"hf backend: {config} is missing. {_fetch_hint(folder)}")
    try:  # a user's file: a list, a value nested 100,000 deep or a FIFO is refused (mlatr.json_input)
        found = read_json_file(config, "config.json")
    except MlatrError as exc:
        raise MlatrError(f"hf backend: {config} is unreadable ({exc}). {_fetch_hint(folder)}") from exc
    model_type = found.get("model_type") if isinstance(found, dict) else None
    if model_type not in ("m2m_100", "marian"):
        raise MlatrError(f"hf backend: {config} has model_type {model_type!r}; expected an NLLB / M2M100 "
                         f"(m2m_100) or Marian (marian) translation model")
    return model_type


def iso3(code: Any) -> str | None:
    """ISO 639-3 of a two- or three-letter code mlatr knows (``es`` / ``spa`` -> ``spa``), else None."""
    try:
        return normalize(code) if isinstance(code, str) else None
    except ValueError:
        return None


def marian_codes(vocab: dict[str, int]) -> dict[str, str]:
    """The target-language tokens of a multi-target Marian vocabulary: ISO 639-3 -> ``>>xx<<`` token."""
    out: dict[str, str] = {}
    for token in vocab:
        match = _MARIAN_TOKEN.match(token)
        lang = iso3(match.group(1)) if match else None
        if lang is not None:
            out.setdefault(lang, token)
    return out


class HFBackend(TranslationBackend):
    """A local NLLB / M2M100 / Marian model (see the module docstring)."""

    name = "hf"

    def __init__(self, path: str, batch_size: int = 16, num_beams: int = 4, max_new_tokens: int = 256,
                 device: str = "cpu"):
        folder = Path(path).expanduser()
        super().__init__(str(folder.resolve()), batch_size)
        model_type = read_model_type(folder)
        self.tokenizer, self.net = load_local(folder, "AutoModelForSeq2SeqLM", "hf backend", _fetch_hint(folder))
        self.net = self.net.to(device)
        self.device = device
        self.num_beams, self.max_new_tokens = int(num_beams), int(max_new_tokens)
        self.marian_targets: dict[str, str] = {}
        self.pair: tuple[str | None, str | None] = (None, None)
        if model_type == "marian":
            self.layout = "marian"
            self.marian_targets = marian_codes(self.tokenizer.get_vocab())
            self.pair = self._marian_pair(folder)
        elif self._has_token("eng_Latn"):
            self.layout = "nllb"
        elif hasattr(self.tokenizer, "get_lang_id"):
            self.layout = "m2m100"
        else:
            raise MlatrError(f"hf backend: {folder} is an m2m_100 model whose tokenizer has neither NLLB "
                             f"(eng_Latn) nor M2M100 (__en__) language tokens")

    def _has_token(self, token: str) -> bool:
        token_id = self.tokenizer.convert_tokens_to_ids(token)
        return token_id is not None and token_id != self.tokenizer.unk_token_id

    def language_token_id(self, lang: str) -> int:
        """The id of ``lang``'s language token (NLLB ``fra_Latn``, M2M100 ``__fr__``); MlatrError if none."""
        code = self.code(lang)
        if self.layout == "nllb" and self._has_token(code):
            return int(self.tokenizer.convert_tokens_to_ids(code))
        if self.layout == "m2m100":
            try:
                return int(self.tokenizer.get_lang_id(code))
            except KeyError:
                pass
        token = code if self.layout == "nllb" else f"__{code}__"
        raise MlatrError(f"hf backend: {self.model} has no language token {token}")

    @staticmethod
    def _marian_pair(folder: Path) -> tuple[str | None, str | None]:
        path = folder / "tokenizer_config.json"
        try:
            cfg = read_json_file(path, "tokenizer_config.json") if path.is_file() else None
        except MlatrError:
            return None, None
        if not isinstance(cfg, dict):
            return None, None
        return iso3(cfg.get("source_lang")), iso3(cfg.get("target_lang"))

    # ---- language codes --------------------------------------------------------------------------
    def code(self, lang: str) -> str:
        """The model's code of an ISO 639-3 language (NLLB ``fra_Latn``, M2M100 ``fr``)."""
        if self.layout == "nllb":
            code = NLLB_CODES.get(lang)
        else:
            code = iso639_1(lang)
        if code is None:
            raise MlatrError(f"hf backend: no {self.layout} language code for {lang!r}")
        return code

    def check_pair(self, source: str, target: str) -> None:
        pair = f"{source} -> {target}"
        if self.layout == "marian":
            src, tgt = self.pair
            if (src and src != source) or (tgt and tgt != target and not self.marian_targets):
                raise MlatrError(f"hf backend: the Marian model {self.model} translates {src} -> {tgt}, not {pair}")
            if self.marian_targets and target not in self.marian_targets:
                raise MlatrError(f"hf backend: the Marian model {self.model} has no target token for {target} "
                                 f"(it has: {', '.join(sorted(self.marian_targets))})")
            return
        for lang in (source, target):
            try:
                self.language_token_id(lang)
            except MlatrError as exc:
                raise MlatrError(f"{exc} (asked for {pair})") from None

    # ---- translation -----------------------------------------------------------------------------
    def translate_batch(self, texts: Sequence[str], source: str, target: str) -> list[str | None]:
        import torch  # torch only with the hf backend: the translation package stays free of it

        inputs = [single_line(t) for t in texts]
        generate: dict[str, Any] = {"num_beams": self.num_beams, "max_new_tokens": self.max_new_tokens}
        if self.layout == "marian":
            if self.marian_targets:
                inputs = [f"{self.marian_targets[target]} {t}" for t in inputs]
        else:
            self.tokenizer.src_lang = self.code(source)
            generate["forced_bos_token_id"] = self.language_token_id(target)
        batch = self.tokenizer(inputs, return_tensors="pt", padding=True, truncation=True, max_length=512)
        with torch.no_grad():
            out = self.net.generate(**{k: v.to(self.device) for k, v in batch.items()}, **generate)
        forced = generate.get("forced_bos_token_id")  # the target-language token is not text (M2M100 would
        rows = [[t for t in seq.tolist() if t != forced] for seq in out]  # decode it as "__es__")
        return [clean_output(t) for t in self.tokenizer.batch_decode(rows, skip_special_tokens=True)]
