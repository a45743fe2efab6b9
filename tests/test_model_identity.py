"""Hostile round 3, models trusted by their config: an index and a model are matched by the SHA-256 of the
model's weights. Was: ``search`` / ``serve --model`` and ``Index.load(model=)`` accepted a model of the same
config and other weights (another seed or epoch), rankings silently wrong, exit 0."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

import mlatr
from clitools import assert_user_error, run_cli
from mlatr.errors import MlatrError
from mlatr.inference.checkpoint import read_checkpoint, save_checkpoint
from mlatr.inference.model_identity import OtherModelError, weights_sha256
from mlatr.search.index import Index


def _other_epoch(ckpt, out):
    """The same config with other weights: what another seed or epoch of the run gives."""
    state = read_checkpoint(ckpt)
    gen = torch.Generator().manual_seed(1)
    state["model"] = {k: v + 0.01 * torch.randn(v.shape, generator=gen) if v.is_floating_point() else v
                      for k, v in state["model"].items()}
    save_checkpoint(out, {k: v for k, v in state.items() if k != "format"})
    return out


def test_a_model_with_the_same_config_and_other_weights_is_refused_naming_both(served_toy, tmp_path, capsys):
    manifest, ckpt, index = served_toy
    other = _other_epoch(ckpt, tmp_path / "epoch2.pt")
    recorded = Index.load(index).meta["checkpoint"]
    theirs = mlatr.load(other, device="cpu").weights_sha256()
    r = run_cli(capsys, "search", index, "a low tone", "--model", other, "--json")
    assert_user_error(r, f"model {ckpt}", recorded["weights_sha256"][:12], str(other), theirs[:12],
                      "its weights differ", "--allow-other-model")
    r = run_cli(capsys, "serve", index, "--model", other, "--port", "0")
    assert_user_error(r, "its weights differ")
    with pytest.raises(OtherModelError, match="its weights differ"):
        Index.load(index, model=mlatr.load(other, device="cpu"))
    r = run_cli(capsys, "search", index, "a low tone", "--model", other, "--json", "--allow-other-model")
    assert r.code == 0, r.err
    assert json.loads(r.out)["results"]


def test_an_exported_model_folder_has_the_same_weights_and_is_accepted(served_toy, tmp_path, capsys):
    manifest, ckpt, index = served_toy
    folder = tmp_path / "model"
    assert run_cli(capsys, "export", "--model", ckpt, "-o", folder).code == 0
    assert mlatr.load(folder, device="cpu").weights_sha256() == mlatr.load(ckpt, device="cpu").weights_sha256()
    r = run_cli(capsys, "search", index, "a low tone", "--model", folder, "--json", "-k", "3")
    assert r.code == 0, r.err
    r0 = run_cli(capsys, "search", index, "a low tone", "--json", "-k", "3")
    assert json.loads(r.out)["results"] == json.loads(r0.out)["results"]


def test_an_index_from_before_weight_digests_compares_the_model_file(served_toy, tmp_path):
    manifest, ckpt, index = served_toy
    with np.load(index) as z:
        arrays = {k: z[k] for k in z.files}
    meta = json.loads(str(arrays["meta"]))
    del meta["checkpoint"]["weights_sha256"]
    arrays["meta"] = np.array(json.dumps(meta))
    old = tmp_path / "old.idx.npz"
    np.savez(old, **arrays)
    assert Index.load(old, model=mlatr.load(ckpt, device="cpu")).meta["checkpoint"]["sha256"]
    other = _other_epoch(ckpt, tmp_path / "epoch2.pt")
    with pytest.raises(MlatrError, match="its file differs"):
        Index.load(old, model=mlatr.load(other, device="cpu"))


def test_weights_sha256_sees_every_tensor_and_no_container():
    a = {"w": torch.ones(2, 3), "b": torch.zeros(3, dtype=torch.float16)}
    assert weights_sha256(a) == weights_sha256({"b": a["b"].clone(), "w": a["w"].clone().t().contiguous().t()})
    assert weights_sha256(a) != weights_sha256({**a, "w": torch.ones(3, 2)})  # same bytes, other shape
    # a half-precision tensor is taken as the float32 it is loaded into: the same values in float16 and bfloat16
    # are one digest, the values each rounds 0.1 to are two
    assert weights_sha256(a) == weights_sha256({**a, "b": torch.zeros(3, dtype=torch.bfloat16)})
    tenth = {dtype: {**a, "b": torch.full((3,), 0.1, dtype=dtype)} for dtype in (torch.float16, torch.bfloat16)}
    assert weights_sha256(tenth[torch.float16]) != weights_sha256(tenth[torch.bfloat16])
    assert weights_sha256(a) != weights_sha256({**a, "b": torch.zeros(3, dtype=torch.int64)})
    changed = a["w"].clone()
    changed[1, 2] = 1.0000001
    assert weights_sha256(a) != weights_sha256({**a, "w": changed})
