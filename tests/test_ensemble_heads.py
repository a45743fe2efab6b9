"""A DualEncoder whose heads are an ensemble (``ensemble=N``): its embeddings are the normalised mean of the
members' unit embeddings, it is saved and loaded as one model, and a stored config's ensemble is range-checked."""

import json

import pytest
import torch
import torch.nn.functional as F

import mlatr
from clitools import run_cli
from mlatr.errors import InputError, MlatrError
from mlatr.inference.checkpoint import save_checkpoint
from mlatr.models import SmallCNNAudioEncoder, SmallTextEncoder
from mlatr.models.dual_encoder import DualEncoder
from mlatr.models.projection import MeanOfUnitHeads
from mlatr.stored_config import check_model_config
from test_models import CAPTIONS, TINY_AUDIO, TINY_TEXT, tokenizer  # noqa: F401 (a fixture)


def _members(tok, n=3, text_head="mlp"):
    torch.manual_seed(0)
    audio, text = SmallCNNAudioEncoder(**TINY_AUDIO), SmallTextEncoder(tok, **TINY_TEXT)
    dim = 8 if text_head == "mlp" else text.output_dim
    members = []
    for k in range(n):  # heads trained apart: here, initialised from different seeds over shared encoders
        torch.manual_seed(100 + k)
        members.append(DualEncoder(audio, text, embed_dim=dim, text_head=text_head).eval())
    return members


def _by_hand(members, wave, captions):
    """Each member's own unit embeddings, averaged and normalised again (what ranking uses)."""
    with torch.no_grad():
        a = torch.stack([m.encode_audio(wave).pooled for m in members]).mean(0)
        t = torch.stack([m.encode_text(captions).pooled for m in members]).mean(0)
    return F.normalize(a, dim=-1), F.normalize(t, dim=-1)


@pytest.mark.parametrize("text_head", ["mlp", "residual"])
def test_an_ensemble_embeds_as_the_mean_of_its_members_unit_embeddings(tokenizer, text_head):  # noqa: F811
    members = _members(tokenizer, text_head=text_head)
    joined = DualEncoder.ensemble_of(members).eval()
    wave = torch.randn(2, 12_000)
    a, t = _by_hand(members, wave, CAPTIONS["fra"])
    with torch.no_grad():
        torch.testing.assert_close(joined.encode_audio(wave).pooled, a, rtol=0, atol=1e-6)
        torch.testing.assert_close(joined.encode_text(CAPTIONS["fra"]).pooled, t, rtol=0, atol=1e-6)
        frames = joined.encode_audio(wave).frames  # frames go through the same averaged heads
        assert frames is not None and torch.allclose(frames.norm(dim=-1)[frames.norm(dim=-1) > 0], torch.ones(1))
    assert joined.config() == {**members[0].config(), "ensemble": 3}
    assert isinstance(joined.audio_projection, MeanOfUnitHeads) and len(joined.text_projection.members) == 3
    # not the same as any one member
    with torch.no_grad():
        assert not torch.allclose(members[0].encode_audio(wave).pooled, a, atol=1e-3)
    assert DualEncoder.ensemble_of(members[:1]) is members[0]


def test_a_saved_ensemble_loads_as_one_model_with_the_same_embeddings(tokenizer, tmp_path):  # noqa: F811
    members = _members(tokenizer)
    joined = DualEncoder.ensemble_of(members)
    cfg = json.loads(json.dumps(joined.config()))
    assert check_model_config("model.pt", cfg) is cfg
    assert sorted(k for k in joined.state_dict() if k.startswith("audio_projection.")) == sorted(
        f"audio_projection.members.{k}.net.{i}.{p}" for k in range(3) for i in (0, 2) for p in ("weight", "bias"))
    save_checkpoint(tmp_path / "model.pt", {"model_config": cfg, "model": joined.state_dict(), "train_config": {}})
    torch.manual_seed(999)  # a different init: equality must come from the saved weights
    loaded = mlatr.load(tmp_path / "model.pt", device="cpu")
    wave = torch.randn(2, 12_000)
    a, t = _by_hand(members, wave, CAPTIONS["eng"])
    with torch.no_grad():
        torch.testing.assert_close(loaded.model.encode_audio(wave).pooled, a, rtol=0, atol=1e-6)
        torch.testing.assert_close(loaded.model.encode_text(CAPTIONS["eng"]).pooled, t, rtol=0, atol=1e-6)


def test_members_must_share_one_config_and_a_stored_ensemble_is_range_checked(tokenizer):  # noqa: F811
    members = _members(tokenizer, n=2)
    other = DualEncoder(members[0].audio_encoder, members[0].text_encoder, embed_dim=4)
    with pytest.raises(MlatrError, match="one config"):
        DualEncoder.ensemble_of([members[0], other])
    with pytest.raises(MlatrError, match="one config"):  # no ensemble of ensembles
        DualEncoder.ensemble_of([DualEncoder.ensemble_of(members)] * 2)
    with pytest.raises(MlatrError, match="positive number"):
        DualEncoder(members[0].audio_encoder, members[0].text_encoder, ensemble=0)
    cfg = DualEncoder.ensemble_of(members).config()
    for bad in (0, 65, "3", True):
        with pytest.raises(InputError, match="model_config.ensemble"):
            check_model_config("model.pt", {**cfg, "ensemble": bad})


def test_an_exported_ensemble_folder_keeps_its_embeddings_and_its_card_says_so(tokenizer, tmp_path, capsys):  # noqa: F811
    members = _members(tokenizer, n=3)
    joined = DualEncoder.ensemble_of(members)
    save_checkpoint(tmp_path / "model.pt", {"model_config": joined.config(), "model": joined.state_dict(),
                                            "train_config": {}})
    assert run_cli(capsys, "export", "--model", tmp_path / "model.pt", "-o", tmp_path / "folder").code == 0
    card = (tmp_path / "folder" / "README.md").read_text(encoding="utf-8")
    assert "| head pairs | 3, trained apart; each side's unit outputs averaged |" in card
    loaded = mlatr.load(tmp_path / "folder", device="cpu")
    wave = torch.randn(1, 12_000)
    a, _ = _by_hand(members, wave, CAPTIONS["eng"])
    with torch.no_grad():
        torch.testing.assert_close(loaded.model.encode_audio(wave).pooled, a, rtol=0, atol=1e-6)
