"""Pretrained multilingual text encoders through ``transformers``, loaded from a local folder.

Registry names and what each returns (``forward(texts, langs) -> EncoderOutput`` with ``pooled [B, D]``,
token ``frames [B, L, D]`` and ``mask [B, L]``, True at real tokens):

* ``sonar`` — the SONAR text encoder (Duquenne et al. 2023) in its Hugging Face layout
  (``cointegrated/SONAR_200_text_encoder``: ``transformers``' ``M2M100Encoder`` + the NLLB tokenizer),
  the text tower of ATRI (§5.2) and SupCLAP (§4.1.2). Each caption is tokenised with its own
  language code, ``[lang_code] tokens [</s>]`` (the NLLB tokenizer's non-legacy source format), so a
  batch may mix languages (ML-CLAP had to split batches by language). ``pooled`` is the mean of the
  token states over the valid tokens (the model card's ``encode_mean_pool``, no normalisation).
* ``labse`` — LaBSE (Feng et al. 2022; ATRI Appendix B), a ``BertModel``: ``pooled`` =
  L2-normalised pooler output (the [CLS] state through dense + tanh), as LaBSE's sentence embedding.
* ``xlmr`` — XLM-RoBERTa (``XLMRobertaModel``), ``pooled`` = mean over valid tokens.
* ``bert`` — BERT (``BertModel``), the text encoder of the fine-grained paper (§2, captions cut to 30
  tokens); ``pooled`` = the [CLS] state, ``frames`` the token states for the matching head.

Weights come from ``from_pretrained(path, local_files_only=True)``: nothing is downloaded. A missing
or wrong folder raises one :class:`MlatrError` listing the files expected there and the command that
fetches them on a machine with internet access. ``transformers`` is imported only when an encoder is
built (``pip install 'mlatr[hf]'``).

Training options: ``freeze`` (no parameter trains), ``train_last_layers`` (only the last n layers and
the final norm / pooler train), ``gradient_checkpointing`` (``transformers``' own, non-reentrant),
``attention``: ``transformers``' attention implementation, ``sdpa`` (fused ``scaled_dot_product_attention``,
``transformers``' default where the model supports it) or ``eager`` (the score matrix and its softmax as
tensors, kept for backward: more memory; ``null`` = ``transformers``' default).
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from mlatr.errors import MlatrError, panic_as_error
from mlatr.file_kinds import folder_file
from mlatr.json_input import read_json_file
from mlatr.languages import NLLB_CODES
from mlatr.models.freezing import freeze_all_but_last
from mlatr.models.layers import masked_mean
from mlatr.models.outputs import EncoderOutput
from mlatr.models.protocols import ANY_LANGUAGE, QueryLanguages, ordered_languages
from mlatr.models.registry import register_text_encoder

HF_INSTALL_HINT = "pip install 'mlatr[hf]'"

#: mlatr's ISO 639-3 codes -> NLLB / FLORES-200 language codes (SONAR's tokenizer).
ISO3_TO_NLLB: dict[str, str] = NLLB_CODES

#: ``attention`` values: ``transformers``' ``attn_implementation`` names an encoder may take.
ATTENTION_IMPLEMENTATIONS = ("sdpa", "eager")


@dataclass(frozen=True)
class HFSpec:
    """What one registry name loads: model class, pooling, config ``model_type`` and where to get it."""

    model_class: str
    model_types: tuple[str, ...]
    pooling: str  # mean | pooler-normalised | cls
    hub_id: str
    max_length: int
    language_codes: bool = False
    add_pooling_layer: bool | None = None


SPECS: dict[str, HFSpec] = {
    "sonar": HFSpec("M2M100Encoder", ("m2m_100",), "mean", "cointegrated/SONAR_200_text_encoder", 512,
                    language_codes=True),
    "labse": HFSpec("BertModel", ("bert",), "pooler-normalised", "setu4993/LaBSE", 128,
                    add_pooling_layer=True),
    "xlmr": HFSpec("XLMRobertaModel", ("xlm-roberta",), "mean", "FacebookAI/xlm-roberta-base", 128,
                   add_pooling_layer=False),
    "bert": HFSpec("BertModel", ("bert",), "cls", "google-bert/bert-base-uncased", 30,
                   add_pooling_layer=False),
}

WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin", "model.safetensors.index.json",
                "pytorch_model.bin.index.json")
TOKENIZER_FILES = ("tokenizer.json", "sentencepiece.bpe.model", "vocab.txt")
#: Every tokenizer file ``AutoTokenizer`` may read from a folder.
TOKENIZER_READS = (*TOKENIZER_FILES, "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json",
                   "merges.txt", "vocab.json", "spiece.model", "sentencepiece.model")
#: Largest tokenizer file read (a multilingual tokenizer.json is about 17 MB).
MAX_TOKENIZER_BYTES = 256 << 20


def check_options(target: Any, options: dict[str, Any], kind: str, name: str) -> None:
    """Raise :class:`MlatrError` naming the option when ``target(**options)`` would not bind (a typo in a
    config's ``model.audio`` / ``model.text`` must not surface as a bare ``TypeError``)."""

    try:
        inspect.signature(target).bind(**options)
    except TypeError as exc:
        known = [p for p in inspect.signature(target).parameters if p not in ("self", "name", "registry_name")]
        raise MlatrError(f"{kind} encoder {name!r}: {exc}; its options are: {', '.join(known)}") from None


def _expected(name: str, path: Path, problem: str) -> MlatrError:
    spec = SPECS[name]
    return MlatrError(
        f"text encoder {name!r}: {problem}. The folder {path} must hold a Hugging Face model: config.json "
        f"(model_type {' or '.join(spec.model_types)}), the weights ({' or '.join(WEIGHT_FILES[:2])}) and the "
        f"tokenizer (tokenizer_config.json with {' or '.join(TOKENIZER_FILES)}). On a machine with internet "
        f"access: huggingface-cli download {spec.hub_id} --local-dir {path} (or, in Python, "
        f"huggingface_hub.snapshot_download('{spec.hub_id}', local_dir='{path}')), then copy the folder here "
        f"and set model.text.path to it")


def check_model_folder(name: str, path: str | Path | None) -> Path:
    """The folder of a ``name`` model, checked: config.json of the right ``model_type``, weights and a
    tokenizer. Raises one :class:`MlatrError` listing the expected files and how to fetch them."""
    if not path:
        raise _expected(name, Path("DIR"), "no model folder given (option path)")
    folder = Path(path).expanduser()
    if not folder.is_dir():
        raise _expected(name, folder, "the folder does not exist")
    config = folder / "config.json"
    if not config.is_file():
        raise _expected(name, folder, "config.json is missing")
    try:  # a user's file: a list, a value nested 100,000 deep or a FIFO is refused (mlatr.json_input)
        found = read_json_file(config, "config.json")
    except MlatrError as exc:
        raise _expected(name, folder, f"config.json is unreadable ({exc})") from exc
    model_type = found.get("model_type") if isinstance(found, dict) else None
    if model_type not in SPECS[name].model_types:
        raise _expected(name, folder, f"config.json has model_type {model_type!r}, not a {name} model")
    if not any((folder / f).is_file() for f in WEIGHT_FILES):
        raise _expected(name, folder, "no weights file")
    if not any((folder / f).is_file() for f in TOKENIZER_FILES):
        raise _expected(name, folder, "no tokenizer files")
    return folder


def check_tokenizer_files(folder: Path, what: str) -> None:
    """Refuse a tokenizer file of ``folder`` (:data:`TOKENIZER_READS`) that is not a regular file inside it
    (:func:`~mlatr.file_kinds.folder_file`: a FIFO would hang the load, a link may lead anywhere), is larger than
    :data:`MAX_TOKENIZER_BYTES`, or, for JSON, is not UTF-8 JSON of bounded nesting: one :class:`MlatrError`
    naming ``what`` and the file, before the tokenizer library reads it."""
    for name in TOKENIZER_READS:
        path = folder_file(folder, name, what)
        if path is None:
            continue
        size = path.stat().st_size
        if size > MAX_TOKENIZER_BYTES:
            raise MlatrError(f"{what}: {path} holds {size:,} bytes (a tokenizer file holds at most "
                             f"{MAX_TOKENIZER_BYTES:,})")
        if name.endswith(".json"):
            read_json_file(path, field="tokenizer")


def load_tokenizer(folder: Path, what: str):
    """``AutoTokenizer.from_pretrained(folder)`` of checked files (:func:`check_tokenizer_files`), a panic in the
    Rust tokenizer turned into one error."""
    check_tokenizer_files(folder, what)
    transformers = _import_transformers()
    with panic_as_error(f"{what}: reading the tokenizer of {folder}"):
        return transformers.AutoTokenizer.from_pretrained(str(folder), local_files_only=True)


def _import_transformers():
    try:
        import transformers  # optional extra (mlatr[hf])
    except ImportError as exc:
        raise MlatrError(f"the Hugging Face text encoders need transformers: {HF_INSTALL_HINT}") from exc
    return transformers


def _model_class(name: str):
    transformers = _import_transformers()
    if SPECS[name].model_class == "M2M100Encoder":
        from transformers.models.m2m_100.modeling_m2m_100 import M2M100Encoder  # optional extra (mlatr[hf])

        return M2M100Encoder
    return getattr(transformers, SPECS[name].model_class)


def _layers(model: nn.Module) -> list[nn.Module]:
    """The transformer layers of a loaded model, in order (BERT/XLM-R ``encoder.layer``, M2M100 ``layers``)."""
    if hasattr(model, "encoder") and hasattr(model.encoder, "layer"):
        return list(model.encoder.layer)
    if hasattr(model, "layers"):
        return list(model.layers)
    raise MlatrError(f"cannot find the layers of {type(model).__name__}")


class HFTextEncoder(nn.Module):
    """A ``transformers`` text model + its tokenizer: ``forward(texts, langs) -> EncoderOutput``."""

    def __init__(self, name: str, path: str | None = None, max_length: int | None = None,
                 freeze: bool = False, train_last_layers: int | None = None,
                 gradient_checkpointing: bool = False, lang_codes: dict[str, str] | None = None,
                 default_lang: str = "eng", attention: str | None = None):
        super().__init__()
        if name not in SPECS:
            raise MlatrError(f"unknown Hugging Face text encoder {name!r}; known: {', '.join(SPECS)}")
        if attention is not None and attention not in ATTENTION_IMPLEMENTATIONS:
            raise MlatrError(f"text encoder {name!r}: attention must be one of "
                             f"{', '.join(ATTENTION_IMPLEMENTATIONS)} (or null), got {attention!r}")
        self.attention = attention
        self.name, self.spec = name, SPECS[name]
        self.path = str(path)
        self.max_length = int(max_length if max_length is not None else self.spec.max_length)
        self.freeze, self.train_last_layers = bool(freeze), train_last_layers
        self.gradient_checkpointing = bool(gradient_checkpointing)
        self.lang_codes = {**ISO3_TO_NLLB, **(lang_codes or {})}
        self.custom_lang_codes = dict(lang_codes or {})
        self.default_lang = default_lang
        self.tokenizer, self.model = self._load(path)
        self.output_dim = int(getattr(self.model.config, "d_model", None) or self.model.config.hidden_size)
        if self.spec.language_codes:
            self._check_codes()
        if self.gradient_checkpointing:
            no_reentrant = {"use_reentrant": False}
            if hasattr(self.model, "activation_checkpointing_enable"):  # transformers >= 5
                self.model.activation_checkpointing_enable(activation_checkpointing_kwargs=no_reentrant)
            else:
                self.model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=no_reentrant)
        self._apply_freezing()

    def query_languages(self) -> QueryLanguages:
        """Required (one of its language codes) for tokenizers that put a language code first (SONAR); else any."""
        if self.spec.language_codes:
            return QueryLanguages(required=True, known=ordered_languages(self.lang_codes))
        return ANY_LANGUAGE

    def _load(self, path: str | None) -> tuple[Any, nn.Module]:
        """The tokenizer and the model from the checked local folder ``path`` (the planner's subclass,
        :class:`mlatr.lab.planning.architectures.ArchitectureOnlyText`, builds them from the architecture)."""
        folder = check_model_folder(self.name, path)
        _import_transformers()
        kwargs: dict[str, Any] = {"local_files_only": True, "dtype": torch.float32}  # trainable in fp32
        if self.spec.add_pooling_layer is not None:
            kwargs["add_pooling_layer"] = self.spec.add_pooling_layer
        if self.attention is not None:
            kwargs["attn_implementation"] = self.attention
        try:
            tokenizer = load_tokenizer(folder, f"text encoder {self.name!r}")
            model = _model_class(self.name).from_pretrained(str(folder), **kwargs)
        except MlatrError:  # the files' own check, already saying what is wrong
            raise
        except (OSError, ValueError, KeyError) as exc:
            raise _expected(self.name, folder, f"loading failed ({type(exc).__name__}: {exc})") from exc
        return tokenizer, model

    def config(self) -> dict[str, Any]:
        """Registry name and options; rebuilding needs the same model folder (tokenizer and architecture),
        the trained weights then come from the saved state dict."""
        cfg: dict[str, Any] = {"name": self.name, "path": self.path, "max_length": self.max_length,
                               "freeze": self.freeze, "train_last_layers": self.train_last_layers,
                               "gradient_checkpointing": self.gradient_checkpointing}
        cfg["attention"] = self.attention
        if self.spec.language_codes:
            cfg.update({"lang_codes": self.custom_lang_codes, "default_lang": self.default_lang})
        return cfg

    def _check_codes(self) -> None:
        code_id = self.tokenizer.convert_tokens_to_ids("eng_Latn")
        if code_id is None or code_id == self.tokenizer.unk_token_id:
            raise _expected(self.name, Path(self.path), "its tokenizer has no NLLB language codes (eng_Latn, "
                            "fra_Latn, ...): it is not the SONAR / NLLB tokenizer")

    def _apply_freezing(self) -> None:
        n = self.train_last_layers
        finals = [getattr(self.model, attr) for attr in ("layer_norm", "pooler")  # M2M100's final norm, BERT's pooler
                  if getattr(self.model, attr, None) is not None] if n else []
        freeze_all_but_last(self.model, _layers(self.model), n, self.freeze, finals=finals,
                            owner=f"text encoder {self.name!r}", option="train_last_layers")

    # ---- tokenisation ----------------------------------------------------------------------------
    def language_code(self, lang: str | None) -> str:
        """NLLB code of an ISO 639-3 language (or an NLLB code given as is); ``None``/``und`` -> default."""
        if lang is None or lang == "und":
            lang = self.default_lang
        if "_" in lang:
            return lang
        if lang not in self.lang_codes:
            raise MlatrError(f"text encoder {self.name!r}: no NLLB language code for {lang!r}; known: "
                             f"{', '.join(sorted(self.lang_codes))} (add one with the option lang_codes: "
                             f"{{{lang}: xxx_Latn}})")
        return self.lang_codes[lang]

    def token_rows(self, texts: Sequence[str], langs: Sequence[str] | None) -> list[list[int]]:
        """Each caption's token ids as the model receives them, unpadded: special tokens (SONAR: the language
        code and ``</s>``; BERT: ``[CLS]`` / ``[SEP]``) included, truncated to ``max_length``."""
        texts = list(texts)
        if langs is not None and len(langs) != len(texts):
            raise MlatrError(f"text encoder {self.name!r}: {len(texts)} texts but {len(langs)} languages")
        if not self.spec.language_codes:
            return [list(r) for r in self.tokenizer(texts, truncation=True, max_length=self.max_length)["input_ids"]]
        langs = list(langs) if langs is not None else [None] * len(texts)
        pieces = self.tokenizer(texts, add_special_tokens=False)["input_ids"]
        eos = self.tokenizer.eos_token_id
        rows = []
        for lang, body in zip(langs, pieces, strict=True):
            code = self.language_code(lang)
            code_id = self.tokenizer.convert_tokens_to_ids(code)
            if code_id is None or code_id == self.tokenizer.unk_token_id:
                raise MlatrError(f"text encoder {self.name!r}: the tokenizer has no token {code!r}")
            rows.append([code_id, *body[: self.max_length - 2], eos])
        return rows

    def token_lengths(self, texts: Sequence[str], langs: Sequence[str] | None = None) -> list[int]:
        """Each caption's length in tokens as the model receives it (:meth:`token_rows`); a batch is padded
        to its longest (the planner's caption lengths, :mod:`mlatr.lab.planning.caption_lengths`)."""
        return [len(r) for r in self.token_rows(texts, langs)]

    def tokenize(self, texts: Sequence[str], langs: Sequence[str] | None) -> tuple[torch.Tensor, torch.Tensor]:
        """``texts`` -> ``input_ids [B, L]``, ``attention_mask [B, L]`` (long), right-padded to the longest
        row of :meth:`token_rows`, on the model's device."""
        rows = self.token_rows(texts, langs)
        width = max((len(r) for r in rows), default=0)
        ids = torch.full((len(rows), width), self.tokenizer.pad_token_id, dtype=torch.long)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        for i, row in enumerate(rows):
            ids[i, : len(row)] = torch.tensor(row, dtype=torch.long)
            mask[i, : len(row)] = 1
        device = next(self.model.parameters()).device
        return ids.to(device), mask.to(device)

    # ---- forward ---------------------------------------------------------------------------------
    def forward(self, texts: Sequence[str], langs: Sequence[str] | None = None) -> EncoderOutput:
        ids, attention = self.tokenize(texts, langs)
        out = self.model(input_ids=ids, attention_mask=attention)
        frames = out.last_hidden_state
        mask = attention.bool()
        if self.spec.pooling == "mean":
            pooled = masked_mean(frames, mask)
        elif self.spec.pooling == "cls":
            pooled = frames[:, 0]
        else:  # LaBSE: [CLS] -> dense + tanh (the BERT pooler) -> L2 normalisation
            pooled = torch.nn.functional.normalize(out.pooler_output, dim=-1)
        frames = frames * mask[..., None].to(frames.dtype)
        return EncoderOutput(pooled=pooled, frames=frames, mask=mask)


def _factory(name: str):
    def build(path: str | None = None, **options: Any) -> HFTextEncoder:
        check_options(HFTextEncoder, {"name": name, "path": path, **options}, "text", name)
        return HFTextEncoder(name, path=path, **options)

    spec = SPECS[name]
    build.__doc__ = (f"{name}: {spec.model_class} from a local copy of {spec.hub_id} (pooling: {spec.pooling}).")
    return build


for _name in SPECS:
    register_text_encoder(_name)(_factory(_name))


#: Characters of the tiny tokenizers (the toy and synthetic captions' scripts; others map to <unk>).
_TINY_CHARS = ("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789àâäçéèêëíïîñóôöúùûüßœ'.,-"
               "犬猫がのはをにでるたいう声音鳥車水雨风狗猫鸟车水雨声音的在了")


def write_tiny_model(name: str, folder: str | Path, seed: int = 0, dim: int = 16, layers: int = 2) -> Path:
    """Save a tiny random-weight model of ``name``'s class and a character-level tokenizer of its kind
    to ``folder`` (for tests and smoke runs of the presets' tiny twins; nothing is downloaded).

    sonar: ``M2M100Encoder`` + an ``NllbTokenizer`` holding the NLLB language codes as special tokens;
    labse / bert: ``BertModel`` + a WordPiece ``BertTokenizer``; xlmr: ``XLMRobertaModel`` + a unigram
    ``XLMRobertaTokenizer``. No dropout, so a tiny model is deterministic in training mode too.
    """
    transformers = _import_transformers()
    if name not in SPECS:
        raise MlatrError(f"unknown Hugging Face text encoder {name!r}; known: {', '.join(SPECS)}")
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(seed)
    chars = list(dict.fromkeys(_TINY_CHARS + "▁"))
    common = {"dropout": 0.0, "attention_dropout": 0.0, "activation_dropout": 0.0}
    if name == "sonar":
        vocab = {s: i for i, s in enumerate(["<s>", "<pad>", "</s>", "<unk>"])}
        vocab.update({c: len(vocab) + i for i, c in enumerate(chars)})
        codes = list(dict.fromkeys(ISO3_TO_NLLB.values()))
        tokenizer = transformers.NllbTokenizer(vocab=vocab, merges=[], additional_special_tokens=codes)
        from transformers.models.m2m_100.modeling_m2m_100 import M2M100Encoder  # optional extra (mlatr[hf])

        model = M2M100Encoder(transformers.M2M100Config(
            vocab_size=len(tokenizer), d_model=dim, encoder_layers=layers, encoder_attention_heads=2,
            encoder_ffn_dim=2 * dim, decoder_layers=1, decoder_attention_heads=2, decoder_ffn_dim=2 * dim,
            max_position_embeddings=256, pad_token_id=1, bos_token_id=0, eos_token_id=2, scale_embedding=True,
            **common))
    elif name in ("labse", "bert"):
        vocab = {s: i for i, s in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"])}
        vocab.update({c: len(vocab) + i for i, c in enumerate(chars)})
        vocab.update({f"##{c}": len(vocab) + i for i, c in enumerate(chars)})
        tokenizer = transformers.BertTokenizer(vocab=vocab, do_lower_case=False)
        model = transformers.BertModel(transformers.BertConfig(
            vocab_size=len(vocab), hidden_size=dim, num_hidden_layers=layers, num_attention_heads=2,
            intermediate_size=2 * dim, max_position_embeddings=256, hidden_dropout_prob=0.0,
            attention_probs_dropout_prob=0.0))
    else:
        pieces = [("<s>", 0.0), ("<pad>", 0.0), ("</s>", 0.0), ("<unk>", 0.0)] + [(c, -1.0) for c in chars]
        tokenizer = transformers.XLMRobertaTokenizer(vocab=pieces)
        model = transformers.XLMRobertaModel(transformers.XLMRobertaConfig(
            vocab_size=len(pieces) + 1, hidden_size=dim, num_hidden_layers=layers, num_attention_heads=2,
            intermediate_size=2 * dim, max_position_embeddings=260, pad_token_id=1, hidden_dropout_prob=0.0,
            attention_probs_dropout_prob=0.0))
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out
