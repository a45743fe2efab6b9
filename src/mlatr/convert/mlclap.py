"""ML-CLAP's released checkpoint -> an mlatr checkpoint (ATRI §5.3: KCL and CACL start from ML-CLAP).

ML-CLAP (Yan et al. 2024, "Bridging language gaps in audio-text retrieval"; github.com/zyyan4/ml-clap,
``pretrain.pt`` on zenodo record 13358171) saves the ``state_dict`` of its ``MLCLAP`` module:

* ``audio_encoder.model.*``: CED-Base (``ced_base``, pooling ``cat`` = the mean over all patches) in the
  original CED key names: ``init_bn.1.*`` (a batch norm inside an ``nn.Sequential``), ``patch_embed.proj``,
  ``time_pos_embed`` / ``freq_pos_embed``, ``blocks.N.{norm1, attn.qkv, attn.proj, norm2, mlp.fc1,
  mlp.fc2}``, ``norm``; plus the torchaudio front end's fixed buffers (``front_end.0.spectrogram.window``,
  ``front_end.0.mel_scale.fb``) and the unused AudioSet classifier (``outputlayer.*``);
* ``text_encoder.model.*``: the SONAR text encoder as fairseq2 names it: ``encoder_frontend.embed``,
  ``encoder.layers.N.{self_attn_layer_norm, self_attn.{q,k,v,output}_proj, ffn_layer_norm,
  ffn.inner_proj, ffn.output_proj}``, ``layer_norm``; mean pooling over the tokens;
* ``audio_proj.{0,2}.*``, ``text_proj.{0,2}.*``: ``Linear(width, E) -> ReLU -> Linear(E, E)`` (E = 1024);
* ``temperature``: a learnt scalar tau (not its logarithm).

mlatr has each piece: :class:`~mlatr.models.ced.CEDAudioEncoder` (which reads the original CED names),
the ``sonar`` text encoder in its Hugging Face layout (``transformers``' ``M2M100Encoder``, the port
``cointegrated/SONAR_200_text_encoder``), and :class:`~mlatr.models.dual_encoder.DualEncoder`'s
``ProjectionHead`` (the same Linear-ReLU-Linear). The fairseq2 -> Hugging Face renames follow
``transformers``' SONAR conversion: ``output_proj`` -> ``out_proj``, ``ffn.inner_proj`` -> ``fc1``,
``ffn.output_proj`` -> ``fc2``, ``ffn_layer_norm`` -> ``final_layer_norm``; and fairseq2 puts its special
tokens in the order ``<pad> <unk> <s> </s>`` where the NLLB tokenizer has ``<s> <pad> </s> <unk>``, so the
first four rows of the embedding table are reordered. The Hugging Face folder (``sonar_path``) supplies
the tokenizer and the architecture; its weights are replaced by ML-CLAP's.

Every key is accounted for in a :class:`ConversionReport`: matched, set aside with the reason (the fixed
front-end buffers, which are compared with mlatr's own; the classifier; a saved sinusoidal table),
unexpected (a key of no known part), missing (a weight of the mlatr model nothing filled) and shape
mismatches. A conversion with unexpected or missing keys or a shape mismatch is refused unless
``allow_unmatched``.

What differs from ML-CLAP's own inference, by design of mlatr's encoders (docs/guide-audiocaps-clotho.md):
mlatr's log-mel pads the STFT with zeros instead of reflecting and takes the ``top_db`` floor per clip
(torchaudio: over the batch), and for clips longer than CED's 10.1 s window it averages only the chunks'
valid patches (ML-CLAP zero-pads the last chunk and averages every patch); ML-CLAP lower-cases captions
and strips punctuation before encoding (its ``text_preprocess``), mlatr encodes them as they are.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from mlatr.errors import MlatrError
from mlatr.file_state import file_sha256
from mlatr.inference.checkpoint import save_checkpoint
from mlatr.languages import DEFAULT_LANGUAGES
from mlatr.models.ced import CED_SIZES, PATCH, TARGET_LENGTH, normalise_ced_keys
from mlatr.models.dual_encoder import DualEncoder
from mlatr.models.registry import build_audio_encoder, build_text_encoder
from mlatr.training.config import config_from_dict

AUDIO_PREFIX = "audio_encoder.model."
TEXT_PREFIX = "text_encoder.model."
#: ML-CLAP projection prefixes -> mlatr's ProjectionHead (``net`` = Linear, ReLU, Linear).
PROJECTIONS = {"audio_proj.": "audio_projection.net.", "text_proj.": "text_projection.net."}
#: fairseq2 SONAR names -> transformers M2M100Encoder names, inside a layer.
SONAR_RENAMES = ((".self_attn.output_proj.", ".self_attn.out_proj."), (".ffn.inner_proj.", ".fc1."),
                 (".ffn.output_proj.", ".fc2."), (".ffn_layer_norm.", ".final_layer_norm."))
#: Row ``i`` of the Hugging Face embedding table is row ``HF_FROM_FAIRSEQ2[i]`` of fairseq2's, for the four
#: special tokens (fairseq2 ``<pad> <unk> <s> </s>``; NLLB ``<s> <pad> </s> <unk>``); the rest is aligned.
HF_FROM_FAIRSEQ2 = (2, 0, 3, 1)
#: A saved sinusoidal position table (fairseq2 computes it; transformers recomputes its own).
SONAR_FIXED_PREFIX = "encoder_frontend.pos_encoder."
#: ATRI §5.3: tau = 0.07 for every fine-tuning run.
ATRI_TEMPERATURE = 0.07


@dataclass
class ConversionReport:
    """Where every key of the ML-CLAP state dict went (see the module docstring)."""

    matched: int = 0
    ignored: dict[str, str] = field(default_factory=dict)  # key -> why it is not needed
    unexpected: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    shape_mismatch: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    mlclap_temperature: float | None = None

    @property
    def ok(self) -> bool:
        return not (self.unexpected or self.missing or self.shape_mismatch)

    def to_json(self) -> dict[str, Any]:
        return {"matched": self.matched, "ignored": self.ignored, "unexpected": self.unexpected,
                "missing": self.missing, "shape_mismatch": self.shape_mismatch, "notes": self.notes,
                "mlclap_temperature": self.mlclap_temperature}

    def describe(self) -> str:
        lines = [f"matched {self.matched} key(s)"]
        if self.ignored:
            lines.append(f"set aside {len(self.ignored)} key(s):")
            lines += [f"  {k}: {why}" for k, why in self.ignored.items()]
        for title, keys in (("unexpected (no known part)", self.unexpected),
                            ("missing (the mlatr model needs them)", self.missing),
                            ("shape mismatch", self.shape_mismatch)):
            if keys:
                lines.append(f"{title}: {len(keys)} key(s):")
                lines += [f"  {k}" for k in keys]
        lines += self.notes
        return "\n".join(lines)


def read_mlclap_state(path: str | os.PathLike) -> dict[str, torch.Tensor]:
    """The tensors of an ML-CLAP checkpoint (a bare state dict; ``{"model": ...}`` / ``{"state_dict": ...}``
    wrappers and a DistributedDataParallel ``module.`` prefix are undone)."""
    p = Path(path)
    if not p.is_file():
        raise MlatrError(f"ML-CLAP checkpoint {p} does not exist (on a machine with internet access: wget "
                         f"https://zenodo.org/records/13358171/files/pretrain.pt)")
    try:
        obj: Any = torch.load(p, map_location="cpu", weights_only=True)
    except Exception as exc:  # a damaged or foreign file
        raise MlatrError(f"{p}: not a loadable torch checkpoint ({type(exc).__name__}: {exc})") from exc
    for wrapper in ("model", "state_dict"):
        if isinstance(obj, dict) and isinstance(obj.get(wrapper), dict):
            obj = obj[wrapper]
    if not isinstance(obj, dict) or not obj or not all(isinstance(v, torch.Tensor) for v in obj.values()):
        raise MlatrError(f"{p}: not an ML-CLAP checkpoint (no state dict of tensors inside)")
    if all(k.startswith("module.") for k in obj):
        obj = {k[len("module."):]: v for k, v in obj.items()}
    if not any(k.startswith(AUDIO_PREFIX) for k in obj) or not any(k.startswith(TEXT_PREFIX) for k in obj):
        raise MlatrError(f"{p}: no {AUDIO_PREFIX}* / {TEXT_PREFIX}* keys: not ML-CLAP's MLCLAP state dict")
    return obj


def _split(state: dict[str, torch.Tensor], prefix: str) -> dict[str, torch.Tensor]:
    return {k[len(prefix):]: v for k, v in state.items() if k.startswith(prefix)}


def ced_options(audio: dict[str, torch.Tensor], num_heads: int | None = None) -> dict[str, Any]:
    """Registry name and options of the CED the audio weights (mlatr CED names, see
    :func:`~mlatr.models.ced.normalise_ced_keys`) fit: width from the patch convolution,
    depth from the blocks, heads from the published sizes (the state dict does not hold them), mel bins
    from the input norm, target length from the time positions."""
    try:
        dim = int(audio["patch_embed.proj.weight"].shape[0])
        n_mels = int(audio["init_bn.weight"].shape[0])
        time_positions = int(audio["time_pos_embed"].shape[-1])
    except KeyError as exc:
        raise MlatrError(f"ML-CLAP audio encoder: no {exc.args[0]!r} in the checkpoint (not a CED)") from exc
    depth = 1 + max((int(k.split(".")[1]) for k in audio if k.startswith("blocks.")), default=-1)
    size = next((name for name, (w, d, _) in CED_SIZES.items() if w == dim and d == depth), None)
    if num_heads is None:
        if size is None:
            raise MlatrError(f"ML-CLAP audio encoder: width {dim}, depth {depth} is no published CED size; give "
                             f"the number of attention heads (--audio-heads)")
        num_heads = CED_SIZES[size][2]
    target = TARGET_LENGTH if time_positions == TARGET_LENGTH // PATCH else time_positions * PATCH
    if size is not None and num_heads == CED_SIZES[size][2] and n_mels == 64 and target == TARGET_LENGTH:
        return {"name": f"ced-{size}"}
    return {"name": "ced", "dim": dim, "depth": depth, "num_heads": num_heads, "target_length": target,
            "frontend": {"n_mels": n_mels}}


def sonar_to_hf(text: dict[str, torch.Tensor], report: ConversionReport) -> dict[str, torch.Tensor]:
    """fairseq2 SONAR text-encoder names -> mlatr's ``sonar`` encoder (``model.`` + M2M100Encoder names)."""
    out: dict[str, torch.Tensor] = {}
    for key, value in text.items():
        name: str | None = None
        if key == "encoder_frontend.embed.weight":
            value = value.clone()
            value[: len(HF_FROM_FAIRSEQ2)] = text[key][list(HF_FROM_FAIRSEQ2)]
            name = "embed_tokens.weight"
        elif key.startswith("encoder.layers."):
            name = key[len("encoder."):]
            for old, new in SONAR_RENAMES:
                name = name.replace(old, new)
        elif key.startswith("layer_norm."):
            name = key
        elif key.startswith(SONAR_FIXED_PREFIX):
            report.ignored[TEXT_PREFIX + key] = "SONAR's fixed sinusoidal positions (transformers computes its own)"
            continue
        if name is None:
            report.unexpected.append(TEXT_PREFIX + key)
            continue
        out["text_encoder.model." + name] = value
    return out


def _check_front_end(ignored_audio: dict[str, torch.Tensor], model: DualEncoder, report: ConversionReport) -> None:
    """Compare ML-CLAP's saved mel filterbank and window with mlatr's log-mel (they are fixed functions)."""
    frontend = model.audio_encoder.frontend
    for key, mine in (("front_end.0.mel_scale.fb", frontend.filterbank), ("front_end.0.spectrogram.window",
                                                                         frontend.window)):
        theirs = ignored_audio.get(key)
        if theirs is None:
            continue
        if theirs.shape != mine.shape:
            report.notes.append(f"warning: {AUDIO_PREFIX}{key} has shape {tuple(theirs.shape)}, mlatr's front end "
                                f"{tuple(mine.shape)}: the log-mel differs from ML-CLAP's")
            continue
        diff = float((theirs.float() - mine.float()).abs().max())
        verdict = "matches" if diff < 1e-4 else "DIFFERS from"
        report.notes.append(f"front end: {key} {verdict} mlatr's (max |difference| {diff:.2e})")


def convert_mlclap_state(state: dict[str, torch.Tensor], sonar_path: str | os.PathLike, *,
                         audio_heads: int | None = None, temperature: float | None = ATRI_TEMPERATURE,
                         allow_unmatched: bool = False) -> tuple[DualEncoder, ConversionReport]:
    """Build the mlatr :class:`DualEncoder` holding ML-CLAP's weights, and the report.

    ``temperature``: the fixed tau of the converted model (ATRI §5.3 fine-tunes with 0.07); ``None`` keeps
    ML-CLAP's learnt tau as a learnable temperature.
    """
    report = ConversionReport()
    audio_raw = _split(state, AUDIO_PREFIX)
    audio, ignored_names = normalise_ced_keys(audio_raw)
    for key in ignored_names:
        why = "fixed front-end buffer (torchaudio)" if key.startswith("front_end.") else "AudioSet classifier (unused)"
        report.ignored[AUDIO_PREFIX + key] = why
    mapped = {"audio_encoder." + k: v for k, v in audio.items()}
    mapped.update(sonar_to_hf(_split(state, TEXT_PREFIX), report))
    for key, value in state.items():
        if key.startswith((AUDIO_PREFIX, TEXT_PREFIX)):
            continue
        prefix = next((p for p in PROJECTIONS if key.startswith(p)), None)
        if prefix is not None:
            mapped[PROJECTIONS[prefix] + key[len(prefix):]] = value
        elif key == "temperature":
            report.mlclap_temperature = float(value.reshape(-1)[0])
        else:
            report.unexpected.append(key)
    try:
        embed_dim = int(state["audio_proj.2.weight"].shape[0])
        hidden = int(state["audio_proj.0.weight"].shape[0])
    except KeyError as exc:
        raise MlatrError(f"ML-CLAP checkpoint: no {exc.args[0]!r} (the audio projection)") from exc

    audio_encoder = build_audio_encoder(**ced_options(audio, audio_heads))
    text_encoder = build_text_encoder("sonar", path=str(Path(sonar_path).resolve()))  # usable from any folder
    learnable = temperature is None
    tau = report.mlclap_temperature if learnable else float(temperature)
    if tau is None or not tau > 0:
        raise MlatrError("ML-CLAP checkpoint: no positive 'temperature' to keep; give a fixed temperature")
    model = DualEncoder(audio_encoder, text_encoder, embed_dim=embed_dim, projection_hidden=hidden,
                        temperature=tau, learnable_temperature=learnable, min_temperature=min(0.01, tau),
                        max_temperature=max(1.0, tau))
    own = model.state_dict()
    report.missing = sorted(k for k in own if k not in mapped and k != "log_temperature")
    report.unexpected += sorted(k for k in mapped if k not in own)
    report.shape_mismatch = [f"{k}: checkpoint {tuple(v.shape)}, model {tuple(own[k].shape)}"
                             for k, v in mapped.items() if k in own and v.shape != own[k].shape]
    report.matched = sum(1 for k, v in mapped.items() if k in own and v.shape == own[k].shape)
    mapped["log_temperature"] = torch.tensor(math.log(tau), dtype=torch.float32)
    _check_front_end({k: v for k, v in audio_raw.items() if k.startswith("front_end.")}, model, report)
    if report.mlclap_temperature is not None:
        report.notes.append(f"ML-CLAP's learnt temperature: {report.mlclap_temperature:.4f}; the converted model's: "
                            f"{tau:.4f} ({'learnable' if learnable else 'fixed, ATRI §5.3'})")
    if not report.ok and not allow_unmatched:
        raise MlatrError("the ML-CLAP checkpoint does not fit the mlatr model (pass --allow-unmatched to convert "
                         "anyway, keeping mlatr's own weights where none came):\n" + report.describe())
    model.load_state_dict({k: v for k, v in mapped.items() if k in own and v.shape == own[k].shape}, strict=False)
    return model.eval(), report


def converted_train_config(model: DualEncoder, languages: tuple[str, ...] = DEFAULT_LANGUAGES) -> dict[str, Any]:
    """The training config stored with the converted model: the ATRI preset's data and optimiser settings
    (§5.3: 10 s clips, Adam 5e-6, tau 0.07) and the model's own encoder options, so ``mlatr eval``,
    ``mlatr index build`` and ``model.init_checkpoint`` find what they read."""
    cfg = model.config()
    tree = {"out_dir": "runs/mlclap-imported",
            "data": {"languages": list(languages), "max_seconds": 10.0, "eval_max_seconds": 10.0},
            "model": {"audio": cfg["audio_encoder"], "text": cfg["text_encoder"], "embed_dim": cfg["embed_dim"],
                      "temperature": cfg["temperature"], "learnable_temperature": cfg["learnable_temperature"]},
            "objective": {"scheme": "mlclap", "base": "infonce"},
            "optim": {"name": "adam", "lr": 5.0e-6, "weight_decay": 0.0, "warmup_steps": 0, "schedule": "constant",
                      "grad_clip": None},
            "train": {"epochs": 10, "batch_size": 24}}
    return config_from_dict(tree).to_dict()


def import_mlclap(path: str | os.PathLike, output: str | os.PathLike, sonar_path: str | os.PathLike, *,
                  audio_heads: int | None = None, temperature: float | None = ATRI_TEMPERATURE,
                  allow_unmatched: bool = False) -> ConversionReport:
    """Convert ``path`` (ML-CLAP's checkpoint) and write the mlatr checkpoint ``output`` (atomically)."""
    model, report = convert_mlclap_state(read_mlclap_state(path), sonar_path, audio_heads=audio_heads,
                                         temperature=temperature, allow_unmatched=allow_unmatched)
    save_checkpoint(output, {"model_config": model.config(), "model": model.state_dict(),
                             "train_config": converted_train_config(model),
                             "source": {"from": "mlclap", "file": str(path), "sha256": file_sha256(path),
                                        "report": report.to_json()}})
    return report
