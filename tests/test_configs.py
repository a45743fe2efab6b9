from pathlib import Path

import yaml

from mlatr.experiments.demo import SIZES, demo_config
from mlatr.training.config import load_config

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
