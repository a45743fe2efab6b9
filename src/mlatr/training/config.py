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

Each field states its own rule next to it: its type (a ``Literal`` lists the allowed values) and, for a
range, a :func:`~mlatr.training.config_checks.checked` default; one generic validator
(:func:`~mlatr.training.config_checks.check_config_values`) applies them, and :func:`check_rules` holds the
rules that relate fields. What a pairing scheme needs (``objective.scheme``: a registered name, English
first for CACL) is declared by the scheme (:mod:`mlatr.losses.schemes`) and checked when the objective is
built. This module imports no torch.
"""

from __future__ import annotations

import dataclasses
import typing
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

import yaml

from mlatr.errors import InputError, MissingFileError, MlatrError
from mlatr.json_input import MAX_DEPTH, expanded_size, nesting_depth
from mlatr.languages import DEFAULT_LANGUAGES
from mlatr.stored_config import check_bounded
from mlatr.training.config_checks import check_config_values, checked

#: Most values a config file may hold with its YAML aliases expanded (a real one holds about a hundred).
MAX_YAML_VALUES = 100_000


def _positive(v) -> bool:
    return v > 0


def _non_negative(v) -> bool:
    return v >= 0


def _at_least_one(v) -> bool:
    return v >= 1


def _fraction(v) -> bool:
    return 0 <= v <= 1


@dataclass
class DataConfig:
    manifest: str = ""
    train_split: str = "train"
    val_split: str = "val"
    test_split: str = "test"
    languages: list[str] = field(default_factory=lambda: list(DEFAULT_LANGUAGES))
    sample_rate: int = checked(16000, _positive, "> 0")
    #: Training crop length in seconds (random crop); evaluation uses ``eval_max_seconds``.
    max_seconds: float = checked(6.0, _positive, "> 0 (seconds)")
    eval_max_seconds: float = checked(10.0, _positive, "> 0 (seconds)")
    #: Keep decoded waveforms in memory: true, false, or auto (when the decoded training + validation audio
    #: fits in ``cache_max_gb``; see :mod:`mlatr.data.pipeline.source_choice`).
    cache_audio: bool | str = checked("auto", lambda v: v in (True, False, "auto"), "true, false or auto")
    cache_max_gb: float = checked(4.0, _non_negative, ">= 0 (GB)")
    #: Skip unreadable audio and count it instead of stopping.
    skip_bad: bool = False
    #: Worker processes reading audio (0 = in the training process); auto = the CPUs of this process
    #: shared among the training processes of the machine, minus one, at most 8.
    workers: str | int = checked("auto", lambda v: v == "auto" or (isinstance(v, int) and v >= 0),
                                 "auto or an integer >= 0")
    #: Batches each worker prepares ahead.
    prefetch: int = checked(2, _at_least_one, ">= 1")
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
    embed_dim: int = checked(128, _at_least_one, ">= 1")
    temperature: float = checked(0.07, _positive, "> 0")
    learnable_temperature: bool = False
    #: Initialise the whole dual encoder from a checkpoint (ATRI §5.3: start from ML-CLAP).
    init_checkpoint: str | None = None


@dataclass
class SVRConfig:
    """SupCLAP support vector regularization (see :mod:`mlatr.losses.support_vectors`)."""

    radius: Literal["static", "dynamic"] = "dynamic"
    bidirectional: bool = True
    alpha: float = checked(1.0, _non_negative, ">= 0")
    #: Constraint weight (Appendix B); None = 0.01 for the dynamic radius, 0 for the static one.
    beta: float | None = checked(None, _non_negative, ">= 0, or null for the default")
    constraint: bool = True
    #: A research variant of SVR in place of SupCLAP as defined: the import path ``package.module:function``
    #: of a builder ``(svr section, base, batch_size) -> SVRRegularizer`` (the supclap experiment's earlier
    #: form: ``mlatr.lab.experiments.supclap_earlier:earlier_svr``). null: the paper's SVR.
    builder: str | None = checked(None, lambda v: v.count(":") == 1 and all(v.split(":")),
                                  "an import path package.module:function, or null for SupCLAP as defined")


@dataclass
class MatchingConfig:
    """Matching head (fine-grained paper §2.1)."""

    name: Literal["cosine", "lgmm", "max-mean", "max-max", "mean-mean", "mean-max"] = "lgmm"
    #: LGMM softmax temperature τ_w and LogSumExp factor λ (paper §3.2: 0.25 and 10); lgmm only.
    tau_w: float = checked(0.25, _positive, "> 0")
    lam: float = checked(10.0, _positive, "> 0")


@dataclass
class CMSCConfig:
    """Which terms of L = L_InterC + L_Jnt + L_IntraC (fine-grained paper eq. 11, Table 3) are on."""

    interc: bool = True
    jnt: bool = True
    intrac: bool = True
    #: Soft-label weight β of eq. 7-8 (paper: 0.3).
    beta: float = checked(0.3, _fraction, "in [0, 1]")
    #: How eq. 7-8 mix intra-modal similarity and binary label: probability (mix distributions) or logit
    #: (one softmax of the mixed scores); see :func:`mlatr.losses.cmsc.soft_labels`.
    mixture: Literal["probability", "logit"] = "probability"


@dataclass
class ObjectiveConfig:
    #: Pairing scheme, a registered :class:`~mlatr.losses.schemes.Scheme`: mlclap (one random language per
    #: clip), kcl (all K), cacl (English + one other). The scheme registry checks the name and the scheme
    #: its needs when the objective is built (:func:`mlatr.training.objective.build_objective`).
    scheme: str = "mlclap"
    #: Base contrastive objective.
    base: Literal["infonce", "siglip"] = "infonce"
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
    name: Literal["adam", "adamw"] = "adamw"
    lr: float = checked(1e-3, _positive, "> 0")
    weight_decay: float = checked(0.01, _non_negative, ">= 0")
    betas: tuple[float, float] = checked((0.9, 0.999), lambda v: len(v) == 2 and all(0 <= b < 1 for b in v),
                                         "two numbers in [0, 1)")
    #: Linear warmup steps, then cosine decay to ``min_lr_ratio * lr`` (schedule "cosine") or constant.
    warmup_steps: int = checked(50, _non_negative, ">= 0")
    schedule: Literal["cosine", "constant"] = "cosine"
    min_lr_ratio: float = checked(0.0, _fraction, "in [0, 1]")
    grad_clip: float | None = checked(1.0, _positive, "> 0, or null for no clipping")
    accumulate: int = checked(1, _at_least_one, ">= 1")
    #: Gradient caching (Gao et al. 2021): encode the batch without graphs in chunks of this many clips /
    #: captions, compute the loss on the cached embeddings, then replay each chunk with its embedding
    #: gradient. Same loss and gradients as the plain step, activation memory of one chunk. None = off.
    grad_cache_chunk: int | None = checked(None, _at_least_one, ">= 1, or null for no gradient caching")
    #: Mixed precision: "auto" uses bf16/fp16 autocast on CUDA only.
    amp: Literal["auto", "off"] = "auto"
    #: TF32 tensor cores for fp32 matrix products and convolutions on CUDA (``torch.backends.cuda.matmul`` and
    #: ``cudnn`` ``allow_tf32``): what the released ML-CLAP code sets (``infer.py``). false = PyTorch's defaults.
    tf32: bool = False


@dataclass
class TrainConfig:
    epochs: int = checked(10, _at_least_one, ">= 1")
    batch_size: int = checked(32, lambda v: v >= 2, ">= 2 (a contrastive batch needs negatives)")
    eval_batch_size: int = checked(64, _at_least_one, ">= 1")
    device: str = "auto"
    log_every: int = checked(10, _at_least_one, ">= 1")
    #: Evaluate on the validation split every N epochs and after the last one (best checkpoint by
    #: average R@1); 0 = never (best.pt is then the last epoch).
    eval_every: int = checked(1, _non_negative, ">= 0 (0: never)")
    progress: bool = True
    #: Loggers besides log.jsonl: [tensorboard, wandb] (:mod:`mlatr.training.trackers`).
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
    timeout_minutes: float = checked(60.0, _positive, "> 0 (minutes)")


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


#: The heads' optimizer unless told otherwise: AdamW at a constant learning rate, no warmup, no clipping.
HEAD_OPTIM = OptimConfig(lr=1e-3, weight_decay=1e-4, warmup_steps=0, schedule="constant", grad_clip=None)


@dataclass
class HeadTraining:
    """Settings of head training on cached features (:func:`mlatr.training.head_training.train_heads`): ``objective``
    and ``optim`` as in a training config's sections, checked by the same :func:`validate_config`
    (``optim.grad_cache_chunk`` and ``objective.matching`` / ``cmsc`` are refused: no encoder runs, and cached
    features are pooled; ``optim.amp`` has no effect on the CPU)."""

    epochs: int = checked(60, _at_least_one, ">= 1")
    batch_size: int = checked(64, lambda v: v >= 2, ">= 2 (a contrastive batch needs negatives)")
    seed: int = 0
    optim: OptimConfig = field(default_factory=lambda: replace(HEAD_OPTIM))
    objective: ObjectiveConfig = field(default_factory=ObjectiveConfig)
    #: Weight of the ``text_identity`` term (0 = off).
    identity_penalty: float = checked(0.0, _non_negative, ">= 0 (0: off)")
    #: Learning rate of the audio tail's parameters (aiSFX's trained blocks; None: ``optim.lr``).
    tail_lr: float | None = checked(None, _positive, "> 0, or null for optim.lr")
    #: Stop after this many validated epochs without a better score (None: run every epoch).
    patience: int | None = checked(None, _positive, ">= 1, or null to run every epoch")

    @classmethod
    def at(cls, lr: float, **fields: Any) -> HeadTraining:
        """Settings with :data:`HEAD_OPTIM` at learning rate ``lr`` (``fields``: the other settings)."""
        return cls(optim=replace(HEAD_OPTIM, lr=lr), **fields)


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


def _section(cls: type, name: str) -> type | None:
    """The config dataclass field ``name`` of ``cls`` holds (``SVRConfig | None`` -> ``SVRConfig``), or None."""
    kinds = [a for a in typing.get_args(_hints(cls)[name]) if a is not type(None)] or [_hints(cls)[name]]
    return kinds[0] if len(kinds) == 1 and dataclasses.is_dataclass(kinds[0]) else None


def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _build(cls: type, values: Any, where: str) -> Any:
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
        sub = _section(cls, key)
        path = f"{where}.{key}" if where else key
        if sub is None:
            kwargs[key] = _coerce(_hints(cls)[key], value, path)
        elif value is None and type(None) in typing.get_args(_hints(cls)[key]):
            kwargs[key] = None  # an optional section switched off
        else:
            kwargs[key] = _build(sub, value, path)
    obj = cls(**kwargs)
    if isinstance(obj, OptimConfig) and isinstance(obj.betas, list):
        obj.betas = tuple(obj.betas)  # YAML gives a list (another type is refused by validate_config)
    return obj


def _coerce(tp: Any, value: Any, path: str) -> Any:
    """YAML 1.1 reads ``1e-4`` as a string: turn strings into numbers for numeric fields."""
    kind = ([a for a in typing.get_args(tp) if a is not type(None)] or [tp])[0]
    if isinstance(value, str) and kind in (float, int):
        try:
            return float(value) if kind is float else int(value)
        except ValueError:
            raise MlatrError(f"config: {path}: expected a number, got {value!r}") from None
    if isinstance(value, int) and not isinstance(value, bool) and kind is float:
        return float(value)
    return value


def _flow_depth(text: str) -> int:
    """How deeply YAML ``text``'s ``[`` / ``{`` brackets nest outside quotes (an estimate: enough to refuse
    thousands of them before the parser spends seconds on them)."""
    depth = peak = 0
    quote = None
    for ch in text:
        if quote is not None:
            quote = None if ch == quote else quote
        elif ch in "\"'":
            quote = ch
        elif ch in "[{":
            depth += 1
            peak = max(peak, depth)
        elif ch in "]}":
            depth -= 1
    return peak


def parse_yaml(text: str | bytes, where: str) -> Any:
    """``yaml.safe_load(text)``, or :class:`InputError` at ``where`` (a file, an override) when it is not YAML,
    not UTF-8, or nested deeper than :data:`mlatr.json_input.MAX_DEPTH` (the parser recurses: a deep value
    would exhaust the stack)."""
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InputError(f"not UTF-8 text (byte {exc.start})", where) from None
    if _flow_depth(text) > MAX_DEPTH:  # PyYAML takes seconds on a few thousand nested brackets
        raise InputError(f"YAML nested too deeply (more than {MAX_DEPTH} levels)", where)
    try:
        value = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise InputError(f"invalid YAML: {exc}", where) from None
    except RecursionError:
        raise InputError(f"YAML nested too deeply (more than {MAX_DEPTH} levels)", where) from None
    if nesting_depth(value, MAX_DEPTH) > MAX_DEPTH:
        raise InputError(f"YAML nested too deeply (more than {MAX_DEPTH} levels), or a value contains itself", where)
    if expanded_size(value) > MAX_YAML_VALUES:
        raise InputError(f"YAML holds more than {MAX_YAML_VALUES:,} values once its aliases are expanded", where)
    return value


def parse_override(text: str) -> tuple[list[str], Any]:
    """``"optim.lr=1e-4"`` -> (["optim", "lr"], 1e-4); the value is parsed as YAML."""
    if "=" not in text:
        raise MlatrError(f"override {text!r}: expected key=value (e.g. train.epochs=3)")
    key, raw = text.split("=", 1)
    value = parse_yaml(raw, f"override {key.strip()}") if raw != "" else ""
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
    model = tree.get("model")
    if isinstance(model, dict):  # options without a name (model.text.num_layers=2) are the default encoder's
        for key in ("audio", "text"):
            if isinstance(model.get(key), dict) and "name" not in model[key]:
                model[key] = {**getattr(ModelConfig(), key), **model[key]}
    cfg = _build(Config, tree, "")
    validate_config(cfg)
    return cfg


def load_config(path: str | Path | None, overrides: list[str] = ()) -> Config:
    """Read a YAML config (or start from the defaults when ``path`` is None) and apply overrides."""
    tree: dict[str, Any] = {}
    if path is not None:
        p = Path(path)
        if not p.is_file():
            raise MissingFileError(p, "a training config")
        tree = parse_yaml(p.read_bytes(), str(p)) or {}
        if not isinstance(tree, dict):
            raise MlatrError(f"{p}: expected a mapping at the top level")
    return config_from_dict(tree, overrides)


def validate_config(cfg: Config | HeadTraining) -> None:
    """Every field's own rule (:func:`~mlatr.training.config_checks.check_config_values`), then the rules
    that relate fields (:func:`check_rules`). The scheme's own needs are checked by the scheme when the
    objective is built (:func:`mlatr.training.objective.build_objective`)."""
    check_config_values(cfg)
    check_rules(cfg)


def check_rules(cfg: Config | HeadTraining) -> None:
    """Raise :class:`MlatrError` for values that are each allowed but do not combine: in a training config,
    or in head training's settings (which run no encoder on pooled cached features)."""
    if isinstance(cfg, HeadTraining):
        if cfg.optim.grad_cache_chunk is not None:
            raise MlatrError("config: optim.grad_cache_chunk: head training encodes nothing (its features are "
                             "cached): leave it null")
        if cfg.objective.matching is not None or cfg.objective.cmsc is not None:
            raise MlatrError("config: objective.matching / objective.cmsc score frames and tokens; cached "
                             "features are pooled: head training takes neither")
    else:
        if not cfg.data.languages:
            raise MlatrError("config: data.languages is empty")
        for key in ("audio", "text"):
            if "name" not in getattr(cfg.model, key):
                raise MlatrError(f"config: model.{key} must be a mapping with a 'name' (registry name)")
            name = getattr(cfg.model, key)["name"]
            if not isinstance(name, str):  # the options' names are checked when the encoder is built (registry)
                raise MlatrError(f"config: model.{key}.name: expected an encoder name, got {name!r}"[:300])
            # sizes within the ranges a stored model's are held to, before anything is allocated
            check_bounded("config", getattr(cfg.model, key), f"model.{key}")
    o = cfg.objective
    if o.reweight and (o.base != "infonce" or o.svr is not None):
        raise MlatrError("config: objective.reweight (Simple Reweight, SupCLAP App. E.4) needs "
                         "objective.base=infonce and no objective.svr")
    if o.matching is None and o.cmsc is None:
        return
    if o.base != "infonce":
        raise MlatrError("config: objective.matching / objective.cmsc train with NT-Xent (the fine-grained "
                         f"paper's eq. 6): objective.base must be infonce, got {o.base!r}")
    if o.svr is not None:
        raise MlatrError("config: objective.svr does not combine with objective.matching / objective.cmsc "
                         "(SVR regularizes pooled pairs)")
    if o.reweight:
        raise MlatrError("config: objective.reweight does not combine with objective.matching / objective.cmsc")
    if o.cmsc is not None and not (o.cmsc.interc or o.cmsc.jnt or o.cmsc.intrac):
        raise MlatrError("config: objective.cmsc switches every term off (interc, jnt, intrac)")


def _deep_copy(tree: Any) -> Any:
    if isinstance(tree, dict):
        return {k: _deep_copy(v) for k, v in tree.items()}
    if isinstance(tree, list):
        return [_deep_copy(v) for v in tree]
    return tree
