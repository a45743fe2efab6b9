"""Training configuration: typed sections, YAML files and ``key=value`` overrides.

A config file mirrors these dataclasses::

    seed: 0
    out_dir: runs/kcl
    data: {manifest: data/synth/manifest.jsonl, languages: [eng, fra, deu]}
    model: {audio: {name: small-cnn}, text: {name: small-transformer}, embed_dim: 128}
    objective: {scheme: kcl, base: infonce}
    optim: {lr: 1.0e-3}
    train: {epochs: 10, batch_size: 32}

Overrides use dotted keys and YAML values: ``objective.scheme=cacl train.epochs=3``.
An unknown key is an error that names it (a typo must not silently fall back to a default).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from mlatr.errors import MlatrError
from mlatr.languages import DEFAULT_LANGUAGES
from mlatr.training.config_checks import check_config_values
from mlatr.training.objective import check_objective_config


@dataclass
class DataConfig:
    manifest: str = ""
    train_split: str = "train"
    val_split: str = "val"
    test_split: str = "test"
    languages: list[str] = field(default_factory=lambda: list(DEFAULT_LANGUAGES))
    sample_rate: int = 16000
    #: Training crop length in seconds (random crop); evaluation uses ``eval_max_seconds``.
    max_seconds: float = 6.0
    eval_max_seconds: float = 10.0
    #: Keep decoded waveforms in memory: true | false | auto (when the decoded training + validation audio
    #: fits in ``cache_max_gb``; AudioCaps' 49k clips at 16 kHz float32, about 31 GB, do not, and stream).
    cache_audio: bool | str = "auto"
    cache_max_gb: float = 4.0
    #: Skip unreadable audio and count it instead of stopping.
    skip_bad: bool = False
    #: Worker processes reading audio (0 = in the training process); auto = the CPUs of this process
    #: shared among the training processes of the machine, minus one, at most 8.
    workers: str | int = "auto"
    #: Batches each worker prepares ahead.
    prefetch: int = 2
    #: A decoded-audio store (``mlatr data prepare MANIFEST -o STORE``) to read the clips from instead of
    #: decoding the manifest's files; None = decode the files.
    store: str | None = None
    #: webdataset shards to train and validate from instead of a manifest (``DIR/shard-{000000..000099}.tar``,
    #: local or any fsspec URL; :mod:`mlatr.data.webdataset_shards`); the splits come from the samples' JSON.
    webdataset: str | None = None


@dataclass
class ModelConfig:
    #: Registry name and options of the audio encoder (``name`` plus keyword options).
    audio: dict[str, Any] = field(default_factory=lambda: {"name": "small-cnn"})
    #: Registry name and options of the text encoder.
    text: dict[str, Any] = field(default_factory=lambda: {"name": "small-transformer"})
    embed_dim: int = 128
    temperature: float = 0.07
    learnable_temperature: bool = False
    #: Initialise the whole dual encoder from a checkpoint (ATRI §5.3: start from ML-CLAP).
    init_checkpoint: str | None = None


@dataclass
class SVRConfig:
    """SupCLAP support vector regularization (see :mod:`mlatr.losses.svr`)."""

    radius: str = "dynamic"  # static | dynamic
    bidirectional: bool = True
    alpha: float = 1.0
    #: Constraint weight (Appendix B); None = 0.01 for the dynamic radius, 0 for the static one.
    beta: float | None = None
    constraint: bool = True
    #: How a support vector is scored: cosine (§3.1, renormalised) | dot (Appendix D's linearised form).
    similarity: str = "cosine"
    #: Dynamic radius predictor (§3.2): output identity (R real, the paper) | softplus (R > 0); input
    #: logits (cos/tau, the paper) | cosine; negatives in batch order or sorted; input detached or not.
    radius_output: str = "identity"
    radius_input: str = "logits"
    sort_negatives: bool = False
    detach_radius_input: bool = False


@dataclass
class MatchingConfig:
    """Matching head (fine-grained paper §2.1): cosine | lgmm | max-mean | max-max | mean-mean | mean-max."""

    name: str = "lgmm"
    #: LGMM softmax temperature τ_w and LogSumExp factor λ (paper §3.2: 0.25 and 10); lgmm only.
    tau_w: float = 0.25
    lam: float = 10.0


@dataclass
class CMSCConfig:
    """Which terms of L = L_InterC + L_Jnt + L_IntraC (fine-grained paper eq. 11, Table 3) are on."""

    interc: bool = True
    jnt: bool = True
    intrac: bool = True
    #: Soft-label weight β of eq. 7-8 (paper: 0.3).
    beta: float = 0.3
    #: How eq. 7-8 mix intra-modal similarity and binary label: probability (mix distributions, default)
    #: | logit (one softmax of the mixed scores); see :func:`mlatr.losses.cmsc.soft_labels`.
    mixture: str = "probability"


@dataclass
class ObjectiveConfig:
    #: Pairing scheme: mlclap (one random language per clip), kcl (all K), cacl (English + one other).
    scheme: str = "mlclap"
    #: Base contrastive objective: infonce | siglip.
    base: str = "infonce"
    #: Initial SigLIP bias (learnable), SupCLAP §2.1 / SigLIP's -10 with τ=0.1.
    siglip_bias: float = -10.0
    svr: SVRConfig | None = None
    #: SupCLAP's "Simple Reweight" baseline (App. E.4): a learnable weight on P+ of the audio-text
    #: pairs' InfoNCE (:class:`~mlatr.losses.simple_reweight.SimpleReweight`); InfoNCE only, no SVR.
    reweight: bool = False
    #: Fine-grained matching head scoring the audio-text pairs on frames/tokens (None = pooled cosine
    #: with the base loss above); see :mod:`mlatr.training.objective`.
    matching: MatchingConfig | None = None
    #: Cross-modal similarity consistency terms (fine-grained paper eq. 6-11; None = off).
    cmsc: CMSCConfig | None = None


@dataclass
class OptimConfig:
    name: str = "adamw"  # adam | adamw
    lr: float = 1e-3
    weight_decay: float = 0.01
    betas: tuple[float, float] = (0.9, 0.999)
    #: Linear warmup steps, then cosine decay to ``min_lr_ratio * lr`` (schedule "cosine") or constant.
    warmup_steps: int = 50
    schedule: str = "cosine"  # cosine | constant
    min_lr_ratio: float = 0.0
    grad_clip: float | None = 1.0
    accumulate: int = 1
    #: Gradient caching (Gao et al. 2021): encode the batch without graphs in chunks of this many clips /
    #: captions, compute the loss on the cached embeddings, then replay each chunk with its embedding
    #: gradient. Same loss and gradients as the plain step, activation memory of one chunk. None = off.
    grad_cache_chunk: int | None = None
    #: Mixed precision: "auto" uses bf16/fp16 autocast on CUDA only.
    amp: str = "auto"  # auto | off


@dataclass
class TrainConfig:
    epochs: int = 10
    batch_size: int = 32
    eval_batch_size: int = 64
    device: str = "auto"
    log_every: int = 10
    #: Evaluate on the validation split every N epochs and after the last one (best checkpoint by
    #: average R@1); 0 = never (best.pt is then the last epoch).
    eval_every: int = 1
    progress: bool = True
    #: Loggers besides log.jsonl: [tensorboard, wandb] (:mod:`mlatr.training.run_loggers`).
    log: list[str] = field(default_factory=list)
    tensorboard: bool = False  # the older spelling of log: [tensorboard]
    #: Step diagnostics to log (:mod:`mlatr.training.diagnostics`): e.g. [drift] (SupCLAP Figure 1).
    diagnostics: list[str] = field(default_factory=list)


@dataclass
class DistConfig:
    """Training with several processes (``torchrun``); ignored in a single process."""

    #: Each process scores only its own clips' rows against the global batch (open_clip's local loss):
    #: the same loss and gradients, ``1/world_size`` of the loss's compute and memory. Pooled InfoNCE /
    #: SigLIP and the matching heads' InterC; see :mod:`mlatr.training.distributed`.
    local_loss: bool = False
    #: DistributedDataParallel's option, for models with parameters some steps do not use.
    find_unused_parameters: bool = False
    #: How long a process waits for the others (validation runs on the first process only).
    timeout_minutes: float = 60.0


@dataclass
class Config:
    seed: int = 0
    out_dir: str = "runs/default"
    data: DataConfig = field(default_factory=DataConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    objective: ObjectiveConfig = field(default_factory=ObjectiveConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    dist: DistConfig = field(default_factory=DistConfig)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


#: Settings that choose how a run executes, not what it computes (the same batches and, up to
#: floating-point rounding, the same updates): a run may resume with other values of these.
EXECUTION_KEYS = (("data", "workers"), ("data", "prefetch"), ("data", "cache_audio"), ("data", "cache_max_gb"),
                  ("optim", "grad_cache_chunk"), ("train", "progress"), ("train", "log"),
                  ("train", "tensorboard"), ("dist",))


def resume_view(tree: dict[str, Any]) -> dict[str, Any]:
    """What must match for a run to resume: the config tree completed with today's defaults (a checkpoint
    written before a key existed holds its default), without :data:`EXECUTION_KEYS`."""
    def strip(t: dict[str, Any]) -> dict[str, Any]:
        out = _deep_copy(t)
        for path in EXECUTION_KEYS:
            node = out
            for part in path[:-1]:
                node = node.get(part) if isinstance(node, dict) else None
            if isinstance(node, dict):
                node.pop(path[-1], None)
        return out

    try:
        full = config_from_dict(strip(tree)).to_dict()
    except MlatrError:
        return strip(tree)  # not a config of this version: compared as it is
    return strip(full)


def _build(cls: type, values: Any, where: str) -> Any:
    if values is None and cls in (SVRConfig, MatchingConfig, CMSCConfig):
        return None
    if not isinstance(values, dict):
        raise MlatrError(f"config: {where or 'top level'}: expected a mapping, got {values!r}")
    fields = {f.name: f for f in dataclasses.fields(cls)}
    kwargs: dict[str, Any] = {}
    for key, value in values.items():
        if key not in fields:
            raise MlatrError(
                f"config: unknown key {where + '.' if where else ''}{key} "
                f"(known: {', '.join(sorted(fields))})"
            )
        sub = _SECTIONS.get((cls, key))
        path = f"{where}.{key}" if where else key
        kwargs[key] = _build(sub, value, path) if sub is not None else _coerce(fields[key], value, path)
    obj = cls(**kwargs)
    if isinstance(obj, OptimConfig):
        obj.betas = tuple(obj.betas)  # YAML gives a list
    return obj


_SECTIONS: dict[tuple[type, str], type] = {
    (Config, "data"): DataConfig,
    (Config, "model"): ModelConfig,
    (Config, "objective"): ObjectiveConfig,
    (Config, "optim"): OptimConfig,
    (Config, "train"): TrainConfig,
    (Config, "dist"): DistConfig,
    (ObjectiveConfig, "svr"): SVRConfig,
    (ObjectiveConfig, "matching"): MatchingConfig,
    (ObjectiveConfig, "cmsc"): CMSCConfig,
}


def _coerce(f: dataclasses.Field, value: Any, path: str) -> Any:
    """YAML 1.1 reads ``1e-4`` as a string: turn strings into numbers for numeric fields."""
    kind = str(f.type).split("|")[0].strip()
    if isinstance(value, str) and kind in ("float", "int"):
        try:
            return float(value) if kind == "float" else int(value)
        except ValueError:
            raise MlatrError(f"config: {path}: expected a number, got {value!r}") from None
    if isinstance(value, int) and not isinstance(value, bool) and kind == "float":
        return float(value)
    return value


def parse_override(text: str) -> tuple[list[str], Any]:
    """``"optim.lr=1e-4"`` -> (["optim", "lr"], 1e-4); the value is parsed as YAML."""
    if "=" not in text:
        raise MlatrError(f"override {text!r}: expected key=value (e.g. train.epochs=3)")
    key, raw = text.split("=", 1)
    value = yaml.safe_load(raw) if raw != "" else ""
    return key.strip().split("."), value


def _set_path(tree: dict[str, Any], path: list[str], value: Any) -> None:
    node = tree
    for part in path[:-1]:
        nxt = node.get(part)
        if nxt is None:
            nxt = node[part] = {}
        elif not isinstance(nxt, dict):
            raise MlatrError(f"override {'.'.join(path)}: {part} is not a section")
        node = nxt
    node[path[-1]] = value


def config_from_dict(tree: dict[str, Any], overrides: list[str] = ()) -> Config:
    tree = _deep_copy(tree)
    for text in overrides:
        path, value = parse_override(text)
        _set_path(tree, path, value)
    cfg = _build(Config, tree, "")
    validate_config(cfg)
    return cfg


def load_config(path: str | Path | None, overrides: list[str] = ()) -> Config:
    """Read a YAML config (or start from the defaults when ``path`` is None) and apply overrides."""
    tree: dict[str, Any] = {}
    if path is not None:
        p = Path(path)
        if not p.is_file():
            raise MlatrError(f"config file not found: {p}")
        try:
            tree = yaml.safe_load(p.read_text(encoding="utf-8")) or {}
        except yaml.YAMLError as exc:
            raise MlatrError(f"{p}: invalid YAML: {exc}") from exc
        if not isinstance(tree, dict):
            raise MlatrError(f"{p}: expected a mapping at the top level")
    return config_from_dict(tree, overrides)


def validate_config(cfg: Config) -> None:
    check_config_values(cfg)
    check_objective_config(cfg.objective)
    if cfg.optim.name not in ("adam", "adamw"):
        raise MlatrError(f"config: optim.name must be adam or adamw, got {cfg.optim.name!r}")
    if cfg.optim.schedule not in ("cosine", "constant"):
        raise MlatrError(f"config: optim.schedule must be cosine or constant, got {cfg.optim.schedule!r}")
    if not cfg.data.languages:
        raise MlatrError("config: data.languages is empty")
    if cfg.objective.scheme == "cacl" and cfg.data.languages[0] != "eng":
        raise MlatrError("config: CACL anchors on English: data.languages must start with eng")
    for key in ("audio", "text"):
        spec = getattr(cfg.model, key)
        if not isinstance(spec, dict) or "name" not in spec:
            raise MlatrError(f"config: model.{key} must be a mapping with a 'name' (registry name)")


def _deep_copy(tree: Any) -> Any:
    if isinstance(tree, dict):
        return {k: _deep_copy(v) for k, v in tree.items()}
    if isinstance(tree, list):
        return [_deep_copy(v) for v in tree]
    return tree
