import subprocess
import sys

import pytest

from mlatr.errors import MlatrError
from mlatr.training.config import load_config
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
