"""freeze_all_but_last: the one freezing rule CED, HTSAT and the HF text encoders share."""

import pytest
from torch import nn

from mlatr.errors import MlatrError
from mlatr.models.freezing import freeze_all_but_last


def _model():
    return nn.ModuleDict({"stem": nn.Linear(2, 2), "blocks": nn.ModuleList([nn.Linear(2, 2) for _ in range(3)]),
                          "norm": nn.LayerNorm(2)})


def _trainable(m):
    return {name.split(".weight")[0] for name, p in m.named_parameters() if p.requires_grad and "weight" in name}


def test_last_blocks_and_finals_train_the_rest_is_frozen():
    m = _model()
    freeze_all_but_last(m, m["blocks"], 2, freeze=False, finals=[m["norm"]])
    assert _trainable(m) == {"blocks.1", "blocks.2", "norm"}
    m = _model()
    freeze_all_but_last(m, m["blocks"], 0, freeze=False, finals=[m["norm"]])  # n = 0: the finals only
    assert _trainable(m) == {"norm"}
    m = _model()
    freeze_all_but_last(m, m["blocks"], 0, freeze=False)
    assert _trainable(m) == set()


def test_freeze_freezes_everything_and_none_changes_nothing():
    m = _model()
    freeze_all_but_last(m, m["blocks"], 2, freeze=True, finals=[m["norm"]])
    assert _trainable(m) == set()
    m = _model()
    freeze_all_but_last(m, m["blocks"], None, freeze=False, finals=[m["norm"]])
    assert _trainable(m) == {"stem", "blocks.0", "blocks.1", "blocks.2", "norm"}


def test_out_of_range_names_owner_and_option():
    m = _model()
    with pytest.raises(MlatrError, match=r"htsat: train_last_stages must be in \[0, 3\], got 4"):
        freeze_all_but_last(m, m["blocks"], 4, freeze=True, owner="htsat", option="train_last_stages")
