"""A ``transformers`` ``ClapModel`` folder (LAION-CLAP and its fine-tunes) -> an mlatr checkpoint.

The folder holds ``config.json`` (``model_type`` clap: ``audio_config``, ``text_config``, ``projection_dim``),
the weights (``model.safetensors``, or shards listed by ``model.safetensors.index.json``; a pickled
``pytorch_model.bin`` is refused with the conversion to run), the RoBERTa tokenizer and, usually,
``preprocessor_config.json`` (the ``ClapFeatureExtractor`` settings). Every file is read from inside the folder
only and must be a regular file; ``config.json`` and ``preprocessor_config.json`` are typed and ranged
(:mod:`mlatr.stored_config`) and the weights' shapes checked against the model's on the ``meta`` device before
the model is built, so a hostile folder is one ``mlatr: error:`` line (exit 2). The key mapping::

    audio_model.*                   -> audio_encoder.model.*   (HTSAT: models.hf_clap.HFClapAudioEncoder)
    text_model.*                    -> text_encoder.model.*    (RoBERTa: models.hf_clap.HFClapTextEncoder)
    {audio,text}_projection.linear1 -> {audio,text}_projection.net.0   (Linear-ReLU-Linear, ProjectionHead)
    {audio,text}_projection.linear2 -> {audio,text}_projection.net.2
    logit_scale_a                   -> the fixed temperature tau = 1 / exp(logit_scale_a)

``logit_scale_t`` (CLAP's second scale) is reported and set aside. The stored training config says what
the model reads: 48 kHz audio (the feature extractor's rate), 10 s windows, every mlatr language (the text
tower encodes any caption; LAION-CLAP's RoBERTa was trained on English), so ``mlatr eval`` reports its
per-language recall and consistency beside an mlatr model's.
"""

from __future__ import annotations

import math
import os
import warnings
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import torch

from mlatr.errors import MlatrError, panic_as_error
from mlatr.file_kinds import folder_file
from mlatr.file_state import file_sha256
from mlatr.inference.checkpoint import save_checkpoint
from mlatr.json_input import read_json_file
from mlatr.languages import DEFAULT_LANGUAGES
from mlatr.models.dual_encoder import DualEncoder
from mlatr.models.hf_clap import HFClapAudioEncoder, HFClapTextEncoder, feature_settings, temperature_of
from mlatr.models.htsat import read_hf_weights
from mlatr.stored_config import check_clap_config
from mlatr.training.config import config_from_dict

#: ClapModel key prefixes -> mlatr DualEncoder prefixes.
RENAMES = (("audio_model.", "audio_encoder.model."), ("text_model.", "text_encoder.model."),
           ("audio_projection.linear1.", "audio_projection.net.0."),
           ("audio_projection.linear2.", "audio_projection.net.2."),
           ("text_projection.linear1.", "text_projection.net.0."),
           ("text_projection.linear2.", "text_projection.net.2."))
#: Keys that may be absent from a folder: recomputed buffers (position tables, batch-norm counters).
DERIVED = ("relative_position_index", "num_batches_tracked", "position_ids", "token_type_ids")


def _folder_error(folder: Path, problem: str) -> MlatrError:
    return MlatrError(f"hf-clap: {problem}. {folder} must be a transformers ClapModel folder (config.json of "
                      "model_type clap, model.safetensors, the tokenizer, preprocessor_config.json); "
                      f"on a machine with internet access: huggingface-cli download laion/clap-htsat-unfused "
                      f"--local-dir {folder}")


def read_clap_folder(folder: str | os.PathLike) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    """``(config.json as a dict, the weights)`` of a ClapModel folder, checked: every file read from inside the
    folder, regular files only (:func:`~mlatr.file_kinds.folder_file`), the config typed and ranged
    (:func:`~mlatr.stored_config.check_clap_config`), the weights safetensors only
    (:func:`~mlatr.models.htsat.read_hf_weights`)."""
    root = Path(folder).expanduser()
    if not root.is_dir():
        raise _folder_error(root, "the folder does not exist")
    path = folder_file(root, "config.json", "hf-clap", required=True)
    config = check_clap_config(path, read_json_file(path, "config"))
    return config, read_hf_weights(root, "hf-clap")


def _map_keys(state: dict[str, torch.Tensor]) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """``(mapped, ignored)``: the folder's tensors under mlatr's names (:data:`RENAMES`), and the keys set aside
    with the reason."""
    mapped: dict[str, torch.Tensor] = {}
    ignored: dict[str, str] = {}
    for key, value in state.items():
        rename = next(((old, new) for old, new in RENAMES if key.startswith(old)), None)
        if rename is not None:
            mapped[rename[1] + key[len(rename[0]):]] = value
        elif key.startswith("logit_scale_"):
            ignored[key] = f"temperature {temperature_of(value):.4f}" + (" (used)" if key == "logit_scale_a" else "")
        else:
            ignored[key] = "no known part"
    return mapped, ignored


def _build(root: Path, config: dict[str, Any], tau: float, meta: bool) -> DualEncoder:
    """The DualEncoder of a checked ClapModel config (on the ``meta`` device: shapes only, nothing allocated);
    what the towers refuse is one error naming the folder."""
    audio_config = dict(config.get("audio_config") or {})
    text_config = dict(config.get("text_config") or {})
    projection_dim = int(config.get("projection_dim", 512))
    act = config.get("projection_hidden_act", "relu")
    if act != "relu":
        raise _folder_error(root, f"projection_hidden_act {act!r}: mlatr's projection head is Linear-ReLU-Linear")
    for side in (audio_config, text_config):
        side.update({"projection_dim": projection_dim, "projection_hidden_act": act})
    try:
        quiet = warnings.catch_warnings() if meta else nullcontext()
        with torch.device("meta" if meta else "cpu"), panic_as_error("hf-clap: building the model"), quiet:
            if meta:  # meta tensors take no copy of loaded weights, and say so: not the user's concern
                warnings.simplefilter("ignore")
            audio = HFClapAudioEncoder(config=audio_config, features=feature_settings(root))
            text = HFClapTextEncoder(path=str(root), config=text_config)
            return DualEncoder(audio, text, embed_dim=projection_dim, projection_hidden=projection_dim,
                               temperature=tau, min_temperature=min(0.01, tau), max_temperature=max(1.0, tau))
    except MlatrError:
        raise
    except (TypeError, ValueError, KeyError, AttributeError, IndexError, ZeroDivisionError, RuntimeError,
            NotImplementedError) as exc:  # the towers' own refusals of a config's values
        raise _folder_error(root, f"config.json does not build a ClapModel ({type(exc).__name__}: {exc})") from None


def clap_to_mlatr(folder: str | os.PathLike) -> tuple[DualEncoder, dict[str, Any]]:
    """The :class:`DualEncoder` holding a ClapModel folder's weights, and a report (key counts, set-aside keys,
    the two logit scales). Refuses a folder whose weights miss a key the model needs or do not fit, from the
    model's shapes on the ``meta`` device before the model is built."""
    root = Path(folder).expanduser().resolve()
    config, state = read_clap_folder(root)
    if "logit_scale_a" not in state:
        raise _folder_error(root, "the weights have no logit_scale_a (the audio-text temperature)")
    tau = temperature_of(state["logit_scale_a"])
    if not math.isfinite(tau) or tau <= 0:
        raise _folder_error(root, f"logit_scale_a gives the temperature {tau}, not a positive number")
    mapped, ignored = _map_keys(state)
    own = {k: tuple(v.shape) for k, v in _build(root, config, tau, meta=True).state_dict().items()}
    missing = sorted(k for k in own if k not in mapped and k != "log_temperature" and not k.endswith(DERIVED))
    mismatch = [f"{k}: folder {tuple(v.shape)}, model {own[k]}" for k, v in mapped.items()
                if k in own and tuple(v.shape) != own[k]]
    unknown = sorted(k for k, why in ignored.items() if why == "no known part")
    if missing or mismatch or unknown:
        raise _folder_error(root, f"the weights do not fit a ClapModel of this config.json (missing: "
                            f"{', '.join(missing[:5]) or 'none'}; shape mismatch: {', '.join(mismatch[:5]) or 'none'}; "
                            f"unknown: {', '.join(unknown[:5]) or 'none'})")
    model = _build(root, config, tau, meta=False)
    model.load_state_dict({k: v for k, v in mapped.items() if k in own}, strict=False)
    report = {"matched": sum(1 for k in mapped if k in own), "ignored": ignored,
              "features": model.audio_encoder.features.settings, "temperature": tau}
    return model.eval(), report


def clap_train_config(model: DualEncoder, languages: tuple[str, ...] = DEFAULT_LANGUAGES) -> dict[str, Any]:
    """The training config stored with the imported model: the feature extractor's rate and window as the
    data settings, every mlatr language, CLAP's own encoder options."""
    cfg = model.config()
    features = model.audio_encoder.features.settings
    seconds = float(features["max_length_s"])
    tree = {"out_dir": "runs/hf-clap-imported",
            "data": {"languages": list(languages), "sample_rate": int(features["sampling_rate"]),
                     "max_seconds": seconds, "eval_max_seconds": seconds},
            "model": {"audio": cfg["audio_encoder"], "text": cfg["text_encoder"], "embed_dim": cfg["embed_dim"],
                      "temperature": cfg["temperature"], "learnable_temperature": False},
            "objective": {"scheme": "mlclap", "base": "infonce"}}
    return config_from_dict(tree).to_dict()


def import_hf_clap(folder: str | os.PathLike, output: str | os.PathLike) -> dict[str, Any]:
    """Convert the ClapModel ``folder`` and write the mlatr checkpoint ``output`` (atomically); the report."""
    model, report = clap_to_mlatr(folder)
    weights = next(Path(folder) / f for f in ("model.safetensors", "model.safetensors.index.json")
                   if (Path(folder) / f).is_file())
    save_checkpoint(output, {"model_config": model.config(), "model": model.state_dict(),
                             "train_config": clap_train_config(model),
                             "source": {"from": "hf-clap", "folder": str(Path(folder).resolve()),
                                        "sha256": file_sha256(weights), "report": report}})
    return report
