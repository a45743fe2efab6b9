"""The one-step install with uv (pyproject.toml's ``aisfx`` extra and ``[tool.uv] override-dependencies``): every
run-time requirement of the aisfx wheel is overridden, and an override of a package mlatr itself requires is
exactly mlatr's own requirement (an override replaces every requirement on its package, mlatr's included: a looser
one would silently undo mlatr's own bound under uv)."""

import importlib.metadata
import re
import tomllib
from pathlib import Path

import pytest

PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"


def _name(requirement: str) -> str:
    return re.match(r"[A-Za-z0-9._-]+", requirement.strip()).group(0).lower().replace("_", "-")


def test_the_uv_overrides_cover_aisfx_pins_and_keep_mlatrs_own_bounds():
    try:
        pins = importlib.metadata.requires("aisfx")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("aisfx is not installed here (scripts/setup.sh installs it): its pins cannot be read")
    project = tomllib.loads(PYPROJECT.read_text(encoding="utf-8"))
    assert project["project"]["optional-dependencies"]["aisfx"] == ["aisfx==0.1.2"]
    assert importlib.metadata.version("aisfx") == "0.1.2"
    overrides = {_name(o): o for o in project["tool"]["uv"]["override-dependencies"]}
    runtime = {_name(p) for p in pins if "extra ==" not in p}
    assert runtime == {"argparse", "librosa", "numpy", "tqdm"} and runtime == set(overrides)
    own = {_name(d): d for d in project["project"]["dependencies"]}
    for name, override in overrides.items():
        if name in own:
            assert override == own[name], (override, own[name])
        else:  # not needed by mlatr: dropped by a marker no Python meets
            assert override.replace(" ", "") == f'{name};python_version<"3"', override
