"""Pairing schemes: which captions are encoded (select) and which sets are contrasted (pairs)."""

import pytest
import torch

from dense_losses import mlclap_pairs
from mlatr.errors import MlatrError
from mlatr.losses import draw_languages
from mlatr.losses.schemes import CACLScheme, KCLScheme, MLCLAPScheme, build_scheme
from mlatr.models.outputs import EncoderOutput

LANGS = ["eng", "fra", "deu"]
ROWS = [
    ["a dog", "un chien", "ein Hund"],
    ["a bell", None, "eine Glocke"],
    ["rain", "la pluie", None],
]


def test_kcl_selects_every_present_caption_in_slot_order():
    sel = KCLScheme().select(ROWS, LANGS, torch.Generator().manual_seed(0))
    assert sel.texts == ["a dog", "un chien", "ein Hund", "a bell", "eine Glocke", "rain", "la pluie"]
    assert sel.langs == ["eng", "fra", "deu", "eng", "deu", "eng", "fra"]
    assert sel.index.tolist() == [[0, 1, 2], [3, -1, 4], [5, 6, -1]]
    assert sel.mask.tolist() == [[True] * 3, [True, False, True], [True, True, False]]


def test_gather_places_embeddings_and_zero_fills_missing():
    sel = KCLScheme().select(ROWS, LANGS, torch.Generator().manual_seed(0))
    emb = torch.arange(7, dtype=torch.float32).unsqueeze(1).repeat(1, 2)
    out = sel.gather(emb)
    assert out.shape == (3, 3, 2)
    assert out[:, :, 0].tolist() == [[0, 1, 2], [3, 0, 4], [5, 6, 0]]


def test_mlclap_draws_only_present_languages_and_covers_all_of_them():
    seen = {1: set(), 2: set()}
    g = torch.Generator().manual_seed(1)
    for _ in range(200):
        sel = MLCLAPScheme().select(ROWS, LANGS, g)
        assert sel.index.shape == (3, 1) and len(sel.texts) == 3
        assert sel.texts[1] in ("a bell", "eine Glocke")  # never the missing fra caption
        seen[1].add(sel.langs[1])
        seen[2].add(sel.langs[2])
    assert seen[1] == {"eng", "deu"} and seen[2] == {"eng", "fra"}


def test_mlclap_same_generator_state_same_choice():
    a = MLCLAPScheme().select(ROWS, LANGS, torch.Generator().manual_seed(5))
    b = MLCLAPScheme().select(ROWS, LANGS, torch.Generator().manual_seed(5))
    assert a.texts == b.texts


def test_cacl_english_then_one_other_language():
    g = torch.Generator().manual_seed(2)
    for _ in range(50):
        sel = CACLScheme().select(ROWS, LANGS, g)
        assert [sel.texts[i] for i in sel.index[:, 0].tolist()] == ["a dog", "a bell", "rain"]
        assert sel.slot_langs[1][1] == "deu" and sel.slot_langs[2][1] == "fra"
        assert sel.slot_langs[0][1] in ("fra", "deu")


def test_cacl_row_without_translation_has_empty_other_slot():
    sel = CACLScheme().select([["only english", None, None], ROWS[0]], LANGS, torch.Generator())
    assert sel.mask.tolist() == [[True, False], [True, True]]


def test_unknown_scheme_is_a_clear_error():
    with pytest.raises(MlatrError, match="objective.scheme must be one of mlclap, kcl, cacl, got 'kcll'"):
        build_scheme("kcll")
    with pytest.raises(MlatrError, match="no caption"):
        MLCLAPScheme().select([[None, None, None]], LANGS, torch.Generator())
    with pytest.raises(MlatrError, match="no English caption"):
        CACLScheme().select([[None, "x", None]], LANGS, torch.Generator())


def test_one_language_draw_rule_for_training_and_the_functional_loss():
    """The scheme (training: draw, then encode) and mlclap_pairs (every language already encoded) pick the
    same languages from the same generator state: one draw rule, draw_languages."""
    mask = torch.tensor([[t is not None for t in row] for row in ROWS])
    for seed in range(20):
        sel = MLCLAPScheme().select(ROWS, LANGS, torch.Generator().manual_seed(seed))
        drawn = draw_languages(mask, torch.Generator().manual_seed(seed))
        assert [LANGS.index(lang) for lang in sel.langs] == drawn.tolist()
        text = torch.arange(9, dtype=torch.float32).reshape(3, 3, 1).repeat(1, 1, 2)
        (pair,) = mlclap_pairs(torch.zeros(3, 2), text, mask, torch.Generator().manual_seed(seed))
        assert pair.target[:, 0].tolist() == [3 * i + k for i, k in enumerate(drawn.tolist())]
    with pytest.raises(ValueError, match="Generator"):
        draw_languages(mask)  # several candidates and no generator: randomness is never implicit


def test_pairs_gather_pooled_vectors_and_frames_alike():
    """A scheme's pairs from EncoderOutputs (what a matching head scores) hold the same rows as from tensors."""
    sel = KCLScheme().select(ROWS, LANGS, torch.Generator())
    flat = EncoderOutput(torch.randn(7, 4), torch.randn(7, 3, 4), torch.rand(7, 3) > 0.2)
    audio = EncoderOutput(torch.randn(3, 4), torch.randn(3, 5, 4), torch.ones(3, 5, dtype=torch.bool))
    slotted = sel.gather(flat)
    assert slotted.frames.shape == (3, 3, 3, 4) and slotted.mask.shape == (3, 3, 3)
    assert not slotted.mask[1, 1].any()  # the missing fra caption of clip 1
    rich = KCLScheme().pairs(audio, slotted, sel.mask)
    plain = KCLScheme().pairs(audio.pooled, sel.gather(flat.pooled), sel.mask)
    assert [p.name for p in rich] == [p.name for p in plain] == ["audio-text[0]", "audio-text[1]", "audio-text[2]"]
    for r, p in zip(rich, plain, strict=True):
        assert torch.equal(r.pooled().anchor, p.anchor) and torch.equal(r.pooled().target, p.target)
    fra = rich[1]  # clips 0 and 2 have a French caption: texts 1 and 6
    assert torch.equal(fra.target.frames, flat.frames[[1, 6]]) and torch.equal(fra.anchor.frames, audio.frames[[0, 2]])
    cacl = CACLScheme().select(ROWS, LANGS, torch.Generator().manual_seed(0))
    names = [p.name for p in CACLScheme().pairs(audio.pooled, cacl.gather(torch.randn(6, 4)), cacl.mask)]
    assert names == ["audio-eng", "audio-other", "eng-other"]


@pytest.mark.parametrize("name", ["mlclap", "cacl", "kcl"])
def test_encoded_columns_is_what_select_draws(name):
    """The distribution the planner reads (Scheme.encoded_columns) against select()'s own draws."""
    scheme = build_scheme(name)
    languages = ["eng", "fra", "deu", "spa"]
    row = ["a dog", None, "ein Hund", "un perro"]
    expected = {cols: w for w, cols in scheme.encoded_columns([t is not None for t in row])}
    assert sum(expected.values()) == pytest.approx(1.0)
    counts: dict = {}
    g = torch.Generator().manual_seed(0)
    for _ in range(3000):
        sel = scheme.select([row], languages, g)
        cols = tuple(languages.index(lang) for lang in sel.langs)
        counts[cols] = counts.get(cols, 0) + 1
    assert set(counts) == set(expected)
    for cols, w in expected.items():
        assert counts[cols] / 3000 == pytest.approx(w, abs=0.03)
