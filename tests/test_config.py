"""Training configs: YAML and overrides, the field rules and the rules between fields (a training config and
head training's settings alike), the schedule, configs/demo.yaml."""

import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from mlatr.errors import MlatrError
from mlatr.lab.experiments.demo import SIZES, demo_config
from mlatr.training.config import HEAD_OPTIM, HeadTraining, MatchingConfig, load_config, validate_config
from mlatr.training.objective import build_objective
from mlatr.training.schedule import lr_factor


def test_yaml_and_overrides(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_text("seed: 3\noptim: {lr: 1e-4}\nobjective: {scheme: kcl}\n")
    cfg = load_config(p, ["train.epochs=2", "objective.svr={radius: static}", "data.languages=[eng,fra]"])
    assert cfg.seed == 3 and cfg.optim.lr == pytest.approx(1e-4) and isinstance(cfg.optim.lr, float)
    assert cfg.objective.scheme == "kcl" and cfg.objective.svr.radius == "static"
    assert cfg.objective.svr.beta is None and cfg.train.epochs == 2
    assert cfg.data.languages == ["eng", "fra"]


@pytest.mark.parametrize(
    "override, message",
    [
        ("optim.lrr=1", "unknown key optim.lrr"),
        ("objective.base=infonc", "objective.base: must be one of infonce, siglip, got 'infonc'"),
        ("optim.lr=fast", "optim.lr: expected a number"),
        ("epochs", "expected key=value"),
        ("model.text={name: small-transformer, num_layers: 100000}", r"config: model.text.num_layers: "),
        ("model.audio={name: small-cnn, n_fft: 1000000000000}", r"config: model.audio.n_fft: "),
        ("model.text.num_layers=100000", r"config: model.text.num_layers: "),
    ],
)
def test_bad_config_names_the_key(override, message):
    with pytest.raises(MlatrError, match=message):
        load_config(None, [override])


def test_scheme_rules_are_checked_when_the_objective_is_built():
    cfg = load_config(None, ["objective.scheme=kcll"])
    with pytest.raises(MlatrError, match="objective.scheme must be one of mlclap, kcl, cacl, got 'kcll'"):
        build_objective(cfg.objective, 4, cfg.data.languages)
    cfg = load_config(None, ["objective.scheme=cacl", "data.languages=[fra,eng]"])
    with pytest.raises(MlatrError, match="CACL anchors on eng: data.languages must start with eng"):
        build_objective(cfg.objective, 4, cfg.data.languages)


def test_config_loading_imports_no_torch():
    code = "import sys; from mlatr.training.config import load_config; load_config(None); print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_warmup_then_cosine():
    assert lr_factor(0, 100, 10) == pytest.approx(0.1)
    assert lr_factor(9, 100, 10) == pytest.approx(1.0)
    assert lr_factor(10, 100, 10) == pytest.approx(1.0)
    assert lr_factor(55, 100, 10) == pytest.approx(0.5)  # half-way through the cosine
    assert lr_factor(100, 100, 10) == pytest.approx(0.0)
    assert lr_factor(100, 100, 10, min_ratio=0.1) == pytest.approx(0.1)
    assert lr_factor(80, 100, 10, schedule="constant") == 1.0


def test_a_boolean_for_a_string_option_says_how_to_quote_it():
    """bash strips optim.amp='off' to optim.amp=off, which YAML reads as False: the error says how to quote."""
    with pytest.raises(MlatrError, match="optim.amp='off'"):
        load_config(None, ["optim.amp=off"])
    assert load_config(None, ["optim.amp='off'"]).optim.amp == "off"


ROOT = Path(__file__).resolve().parents[1]


def test_demo_yaml_is_what_the_demo_trains():
    tree = yaml.safe_load((ROOT / "configs" / "demo.yaml").read_text())
    expected = demo_config(tree["data"]["manifest"], "mlclap", SIZES["small"]["epochs"])
    assert load_config(ROOT / "configs" / "demo.yaml").to_dict() == load_config(None, _overrides(expected)).to_dict()


def _overrides(tree, prefix=""):
    out = ["seed=0", "out_dir=runs/demo"] if not prefix else []
    for k, v in tree.items():
        if isinstance(v, dict) and k not in ("audio", "text"):
            out += _overrides(v, f"{prefix}{k}.")
        else:
            out.append(f"{prefix}{k}={yaml.safe_dump(v, default_flow_style=True).strip()}")
    return out


@pytest.mark.parametrize("settings, says", [
    (HeadTraining(epochs=0), "config: epochs: must be >= 1, got 0"),
    (HeadTraining(batch_size=1), "config: batch_size: must be >= 2"),
    (HeadTraining(identity_penalty=-1.0), "config: identity_penalty: must be >= 0"),
    (HeadTraining.at(0.0), "config: optim.lr: must be > 0, got 0.0"),
    (HeadTraining(optim=replace(HEAD_OPTIM, grad_cache_chunk=4)), "optim.grad_cache_chunk: head training"),
    (HeadTraining(objective=replace(HeadTraining().objective, matching=MatchingConfig())), "objective.matching"),
    (HeadTraining(objective=replace(HeadTraining().objective, reweight=True, base="siglip")), "objective.reweight"),
])
def test_head_training_goes_through_the_training_config_rules(settings, says):
    with pytest.raises(MlatrError, match=says):
        validate_config(settings)
    validate_config(HeadTraining.at(1e-2, epochs=3, batch_size=4))  # the defaults pass


def test_encoder_options_without_a_name_are_the_default_encoders():
    """``-o model.text.num_layers=2`` (or a YAML ``model: {text: {num_layers: 2}}``) sets an option of the
    default text encoder, as the key says, instead of replacing the mapping and losing the encoder's name."""
    cfg = load_config(None, ["model.text.num_layers=2"])
    assert cfg.model.text == {"name": "small-transformer", "num_layers": 2}
    assert cfg.model.audio == {"name": "small-cnn"}
    named = load_config(None, ["model.text={name: e5-small}"])
    assert named.model.text == {"name": "e5-small"}  # a named encoder takes none of the default's options
