"""A fourth pairing scheme is one class in one place: defined here, it trains end to end.

``EnglishPlusFirst`` (a test scheme, not a paper's) encodes each clip's English caption and its caption in
the second configured language, and contrasts audio with both (two audio-text pairs) and the two captions
(a text-text pair). Nothing outside this file names it: the config, the objective, the trainer's data
requirements (English first; clips without English dropped) and SVR's choice of pairs follow its
declarations (:class:`mlatr.losses.schemes.Scheme`).
"""

from __future__ import annotations

import pytest
import torch

from mlatr.errors import MlatrError
from mlatr.losses import Pair, clip_loss, pair_loss, pairs_loss
from mlatr.losses._common import TEXT_TEXT, take_slot
from mlatr.losses.schemes import SCHEMES, Scheme, _build, register_scheme
from mlatr.models.outputs import EncoderOutput
from mlatr.training.config import load_config
from mlatr.training.objective import build_objective
from mlatr.training.trainer import Trainer
from toydata import make_toy_manifest, tiny_config


class EnglishPlusFirst(Scheme):
    name = "eng-plus-first"
    label = "English + first other language"
    anchor_language = "eng"
    text_text_pairs = True

    def select(self, rows, languages, generator):
        self.check_languages(languages)
        return _build([[(row[0], "eng"), (row[1], languages[1])] for row in rows], 2)

    def pairs(self, audio, text, mask):
        return [Pair(audio, take_slot(text, 0), "audio-eng"), Pair(audio, take_slot(text, 1), "audio-second"),
                Pair(take_slot(text, 0), take_slot(text, 1), "eng-second", TEXT_TEXT)]


@pytest.fixture
def registered():
    register_scheme(EnglishPlusFirst)
    yield EnglishPlusFirst
    del SCHEMES[EnglishPlusFirst.name]


def test_fourth_scheme_loss_is_the_mean_of_its_pairs(registered):
    cfg = load_config(None, ["objective.scheme=eng-plus-first", "data.languages=[eng,fra,deu]"])
    objective = build_objective(cfg.objective, 4, cfg.data.languages)
    rows = [[f"e{i}", f"f{i}", None] for i in range(4)]
    selection = objective.scheme.select(rows, cfg.data.languages, torch.Generator())
    assert selection.texts == ["e0", "f0", "e1", "f1", "e2", "f2", "e3", "f3"]
    g = torch.Generator().manual_seed(0)
    audio, text = torch.randn(4, 8, generator=g), torch.randn(8, 8, generator=g)
    out = objective(EncoderOutput(audio), EncoderOutput(text), selection, 0.1)
    eng, fra = text[0::2], text[1::2]
    # three pairs of 2N InfoNCE terms each: the mean of the three symmetric CLIP losses
    expected = (clip_loss(audio, eng, 0.1) + clip_loss(audio, fra, 0.1) + clip_loss(eng, fra, 0.1)) / 3
    assert float(out.terms["contrastive"]) == pytest.approx(float(expected), rel=1e-6)
    pairs = objective.scheme.pairs(audio, selection.gather(EncoderOutput(text)).pooled, selection.mask)
    assert [p.audio_text for p in pairs] == [True, True, False]
    assert float(pairs_loss(pairs, pair_loss("infonce", 0.1))) == pytest.approx(float(expected), rel=1e-6)


def test_fourth_scheme_declarations_drive_the_rules(registered):
    with pytest.raises(MlatrError, match="English \\+ first other language anchors on eng"):
        cfg = load_config(None, ["objective.scheme=eng-plus-first", "data.languages=[fra,eng]"])
        build_objective(cfg.objective, 4, cfg.data.languages)
    with pytest.raises(MlatrError, match="objective.cmsc does not combine with scheme eng-plus-first"):
        cfg = load_config(None, ["objective.scheme=eng-plus-first", "objective.matching={name: lgmm}",
                                 "objective.cmsc={}"])
        build_objective(cfg.objective, 4, cfg.data.languages)
    # SVR regularises the two audio-text pairs only
    cfg = load_config(None, ["objective.scheme=eng-plus-first", "objective.svr={radius: static}"])
    objective = build_objective(cfg.objective, 4, cfg.data.languages)
    audio, text = torch.randn(4, 8), torch.randn(4, 2, 8)
    pairs = objective.scheme.pairs(audio, text, torch.ones(4, 2, dtype=torch.bool))
    term, _ = objective.svr.over_pairs(pairs, 0.1)
    alone, _ = objective.svr.over_pairs(pairs[:2], 0.1)
    assert float(term.detach()) == float(alone.detach())


def test_fourth_scheme_trains(registered, tmp_path):
    manifest = make_toy_manifest(tmp_path / "toy", n_train=16, n_val=4, n_test=4)
    cfg = tiny_config(manifest, tmp_path / "run", "objective.scheme=eng-plus-first", epochs=1)
    summary = Trainer(cfg).fit()
    assert summary["steps"] == 2 and summary["texts_encoded"] == 16 * 2
