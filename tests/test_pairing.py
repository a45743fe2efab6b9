import torch

from mlatr.data.pairing import CACLPairing, KCLPairing, MLCLAPPairing, build_pairing

LANGS = ["eng", "fra", "deu"]
ROWS = [
    ["a dog", "un chien", "ein Hund"],
    ["a bell", None, "eine Glocke"],
    ["rain", "la pluie", None],
]


def test_kcl_selects_every_present_caption_in_slot_order():
    sel = KCLPairing().select(ROWS, LANGS, torch.Generator().manual_seed(0))
    assert sel.texts == ["a dog", "un chien", "ein Hund", "a bell", "eine Glocke", "rain", "la pluie"]
    assert sel.langs == ["eng", "fra", "deu", "eng", "deu", "eng", "fra"]
    assert sel.index.tolist() == [[0, 1, 2], [3, -1, 4], [5, 6, -1]]
    assert sel.mask.tolist() == [[True] * 3, [True, False, True], [True, True, False]]


def test_gather_places_embeddings_and_zero_fills_missing():
    sel = KCLPairing().select(ROWS, LANGS, torch.Generator().manual_seed(0))
    emb = torch.arange(7, dtype=torch.float32).unsqueeze(1).repeat(1, 2)
    out = sel.gather(emb)
    assert out.shape == (3, 3, 2)
    assert out[:, :, 0].tolist() == [[0, 1, 2], [3, 0, 4], [5, 6, 0]]


def test_mlclap_draws_only_present_languages_and_covers_all_of_them():
    seen = {1: set(), 2: set()}
    g = torch.Generator().manual_seed(1)
    for _ in range(200):
        sel = MLCLAPPairing().select(ROWS, LANGS, g)
        assert sel.index.shape == (3, 1) and len(sel.texts) == 3
        assert sel.texts[1] in ("a bell", "eine Glocke")  # never the missing fra caption
        seen[1].add(sel.langs[1])
        seen[2].add(sel.langs[2])
    assert seen[1] == {"eng", "deu"} and seen[2] == {"eng", "fra"}


def test_mlclap_same_generator_state_same_choice():
    a = MLCLAPPairing().select(ROWS, LANGS, torch.Generator().manual_seed(5))
    b = MLCLAPPairing().select(ROWS, LANGS, torch.Generator().manual_seed(5))
    assert a.texts == b.texts


def test_cacl_english_then_one_other_language():
    g = torch.Generator().manual_seed(2)
    for _ in range(50):
        sel = CACLPairing().select(ROWS, LANGS, g)
        assert [sel.texts[i] for i in sel.index[:, 0].tolist()] == ["a dog", "a bell", "rain"]
        assert sel.slot_langs[1][1] == "deu" and sel.slot_langs[2][1] == "fra"
        assert sel.slot_langs[0][1] in ("fra", "deu")


def test_cacl_row_without_translation_has_empty_other_slot():
    sel = CACLPairing().select([["only english", None, None], ROWS[0]], LANGS, torch.Generator())
    assert sel.mask.tolist() == [[True, False], [True, True]]


def test_unknown_scheme_is_a_clear_error():
    import pytest

    from mlatr.errors import MlatrError

    with pytest.raises(MlatrError, match="unknown pairing scheme 'kcll'"):
        build_pairing("kcll")
