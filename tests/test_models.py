import json
import math

import pytest
import torch
import torch.nn.functional as F

from mlatr.errors import MlatrError
from mlatr.models import (
    CaptionTokenizer,
    DualEncoder,
    ProjectionHead,
    SmallCNNAudioEncoder,
    SmallTextEncoder,
    audio_encoder_names,
    build_audio_encoder,
    build_text_encoder,
    text_encoder_names,
)
from mlatr.models.layers import masked_mean

CAPTIONS = {
    "eng": ["a dog barks followed by a siren", "a high bell rings twice", "rain falls while a man hums"],
    "fra": ["un chien aboie puis une sirène retentit", "une cloche aiguë sonne deux fois",
            "la pluie tombe pendant qu'un homme fredonne"],
    "jpn": ["犬が吠えて、サイレンが鳴る", "高い鐘が二回鳴る", "男性がハミングしている間に雨が降る"],
    "zho": ["狗叫，然后警笛响起", "高音的铃声响了两次", "一个男人哼歌时下着雨"],
}
CORPUS = [c for caps in CAPTIONS.values() for c in caps] * 3
TINY_AUDIO = {"channels": [4, 8, 8], "dim": 16, "num_layers": 1, "num_heads": 2, "ff_dim": 32}
TINY_TEXT = {"dim": 16, "num_layers": 1, "num_heads": 2, "ff_dim": 32, "max_length": 40}


@pytest.fixture(scope="module")
def tokenizer() -> CaptionTokenizer:
    return CaptionTokenizer.train(CORPUS, vocab_size=300, min_frequency=2)


def _model(tokenizer, **kw) -> DualEncoder:
    torch.manual_seed(0)
    audio = SmallCNNAudioEncoder(**TINY_AUDIO)
    text = SmallTextEncoder(tokenizer, **TINY_TEXT)
    return DualEncoder(audio, text, embed_dim=8, **kw)


def test_registry_lists_and_builds_the_small_encoders(tokenizer):
    assert "small-cnn" in audio_encoder_names() and "small-transformer" in text_encoder_names()
    assert isinstance(build_audio_encoder("small-cnn", **TINY_AUDIO), SmallCNNAudioEncoder)
    enc = build_text_encoder("small-transformer", corpus=CORPUS, vocab_size=300, **TINY_TEXT)
    assert enc.tokenizer.vocab_size <= 300
    with pytest.raises(MlatrError, match="tokenizer or a corpus"):
        build_text_encoder("small-transformer")
    default = build_audio_encoder("small-cnn")
    assert 1e5 < sum(p.numel() for p in default.parameters()) < 5e5


@pytest.mark.parametrize("lang", ["jpn", "zho", "fra"])
def test_tokenizer_round_trip_without_spaces(tokenizer, lang):
    for text in CAPTIONS[lang] + ["未见过的字と絵文字🎵"]:  # unseen characters fall back to bytes
        ids = tokenizer.encode(text)
        assert ids and tokenizer.pad_id not in ids
        assert tokenizer.decode(ids) == tokenizer.normalize(text)
    assert tokenizer.normalize("狗叫，然后") == "狗叫,然后"  # NFKC folds full-width punctuation


def test_tokenizer_isolates_han_characters_and_serialises(tokenizer):
    big = CaptionTokenizer.train(CORPUS, vocab_size=2000, min_frequency=2)
    enc = big.tokenizer.encode("警笛响起")
    assert enc.offsets == [(0, 1), (1, 2), (2, 3), (3, 4)]  # one token per Han character, never merged
    assert len(big.tokenizer.encode("サイレン").ids) < len("サイレン".encode())  # kana runs do merge
    assert len(tokenizer.tokenizer.encode("警笛").ids) == 6  # tiny vocabulary: byte fallback, 3 each
    again = CaptionTokenizer.from_json(json.loads(json.dumps(tokenizer.to_json())))
    for text in CORPUS[:12]:
        assert again.encode(text) == tokenizer.encode(text)
    assert len(big.encode("高い鐘")) == 3
    ids, mask = big.encode_batch(["高い鐘", "a dog barks followed by a siren"], max_length=6)
    assert ids.shape == (2, 6) and ids[:, 0].tolist() == [big.cls_id] * 2
    assert mask[0].tolist() == [True] * 4 + [False] * 2 and mask[1].all()  # row 1 truncated to 6
    assert (ids[0, 4:] == big.pad_id).all() and ids[0, 1:4].tolist() == big.encode("高い鐘")


def test_tokenizer_training_is_deterministic(tokenizer):
    assert CaptionTokenizer.train(CORPUS, vocab_size=300, min_frequency=2).to_json() == tokenizer.to_json()


def test_masked_mean_ignores_masked_positions():
    x = torch.tensor([[[1.0, 2.0], [3.0, 4.0], [100.0, 100.0]]])
    mask = torch.tensor([[True, True, False]])
    torch.testing.assert_close(masked_mean(x, mask), torch.tensor([[2.0, 3.0]]))


def test_padding_does_not_change_the_audio_embedding(tokenizer):
    model = _model(tokenizer).eval()
    clip = torch.randn(1, 27_123) * 0.1
    embeddings = []
    with torch.no_grad():
        for total in (27_123, 33_000, 48_000):
            wave = torch.zeros(2, total)
            wave[0, :27_123] = clip
            wave[1] = torch.randn(total)
            out = model.encode_audio(wave, torch.tensor([27_123, total]))
            embeddings.append(out.pooled[0])
            n_valid = int(out.mask[0].sum())
            assert not out.frames[0, n_valid:].any()  # padded frames are zero
    for e in embeddings[1:]:
        torch.testing.assert_close(e, embeddings[0], rtol=0, atol=1e-5)
    # and the masks matter: encoding the padded clip as if it were all signal changes it
    with torch.no_grad():
        unmasked = model.encode_audio(F.pad(clip, (0, 20_877)), None).pooled[0]
    assert (unmasked - embeddings[0]).abs().max() > 1e-3


def test_padding_does_not_change_the_text_embedding(tokenizer):
    model = _model(tokenizer).eval()
    text = CAPTIONS["jpn"][1]
    with torch.no_grad():
        alone = model.encode_text([text], ["jpn"]).pooled[0]
        batched = model.encode_text([text, CAPTIONS["fra"][2] * 2], ["jpn", "fra"])
    assert batched.mask[0].sum() < batched.mask.shape[1]  # the first caption really was padded
    torch.testing.assert_close(batched.pooled[0], alone, rtol=0, atol=1e-5)


def test_outputs_are_unit_norm_and_projected(tokenizer):
    model = _model(tokenizer)
    a = model.encode_audio(torch.randn(3, 16_000), torch.tensor([16_000, 9_000, 4_000]))
    t = model.encode_text(CAPTIONS["eng"], ["eng"] * 3)
    for out in (a, t):
        assert out.pooled.shape == (3, 8) and out.frames.shape[-1] == 8
        torch.testing.assert_close(out.pooled.norm(dim=-1), torch.ones(3))
        torch.testing.assert_close(out.frames.norm(dim=-1)[out.mask], torch.ones(int(out.mask.sum())))
    assert a.mask.sum(dim=1).tolist() == [13, 8, 4]  # 101, 57, 26 frames, 3 stride-2 stages (ceil)


def test_projection_head_is_linear_relu_linear():
    head = ProjectionHead(4, 3, hidden_dim=5)
    x = torch.randn(2, 4)
    lin1, lin2 = head.net[0], head.net[2]
    torch.testing.assert_close(head(x), lin2(torch.relu(lin1(x))))
    assert head(torch.randn(2, 7, 4)).shape == (2, 7, 3)


def test_config_round_trip_rebuilds_an_identical_model(tokenizer):
    model = _model(tokenizer, learnable_temperature=True).eval()
    cfg = json.loads(json.dumps(model.config()))  # must be JSON-able
    assert cfg["text_encoder"]["tokenizer"] and cfg["audio_encoder"]["name"] == "small-cnn"
    torch.manual_seed(123)  # a different init, so equality comes from the state_dict
    rebuilt = DualEncoder.from_config(cfg).eval()
    wave = torch.randn(2, 12_000)
    assert not torch.allclose(rebuilt.encode_audio(wave).pooled, model.encode_audio(wave).pooled)
    rebuilt.load_state_dict(model.state_dict())
    with torch.no_grad():
        torch.testing.assert_close(rebuilt.encode_audio(wave).pooled, model.encode_audio(wave).pooled,
                                   rtol=0, atol=0)
        torch.testing.assert_close(rebuilt.encode_text(CAPTIONS["zho"]).pooled,
                                   model.encode_text(CAPTIONS["zho"]).pooled, rtol=0, atol=0)


def test_gradient_flows_to_both_encoders_and_the_temperature(tokenizer):
    model = _model(tokenizer, learnable_temperature=True)
    a = model.encode_audio(torch.randn(3, 16_000) * 0.1)
    t = model.encode_text(CAPTIONS["eng"], ["eng"] * 3)
    logits = a.pooled @ t.pooled.T / model.temperature
    loss = (F.cross_entropy(logits, torch.arange(3)) + F.cross_entropy(logits.T, torch.arange(3))) / 2
    loss.backward()
    for name in ("audio_encoder.stages.0.conv.weight", "audio_encoder.transformer.layers.0.linear1.weight",
                 "text_encoder.token_embedding.weight", "text_encoder.transformer.layers.0.linear2.weight",
                 "audio_projection.net.0.weight", "text_projection.net.2.weight", "log_temperature"):
        grad = dict(model.named_parameters())[name].grad
        assert grad is not None and grad.abs().sum() > 0, name


def test_temperature_fixed_or_learnable_and_clamped(tokenizer):
    fixed = _model(tokenizer)
    assert float(fixed.temperature) == pytest.approx(0.07)
    assert "log_temperature" not in dict(fixed.named_parameters())
    learnable = _model(tokenizer, learnable_temperature=True)
    assert "log_temperature" in dict(learnable.named_parameters())
    with torch.no_grad():
        learnable.log_temperature.fill_(math.log(1e-4))
    assert learnable.temperature.item() == pytest.approx(0.01)
    with pytest.raises(MlatrError):
        _model(tokenizer, temperature=0.0)


def test_language_embedding_is_optional(tokenizer):
    torch.manual_seed(0)
    plain = SmallTextEncoder(tokenizer, **TINY_TEXT).eval()
    out_a = plain(["高い鐘が二回鳴る"], ["jpn"]).pooled
    torch.testing.assert_close(out_a, plain(["高い鐘が二回鳴る"], ["zho"]).pooled)  # langs ignored
    tagged = SmallTextEncoder(tokenizer, languages=["eng", "jpn"], **TINY_TEXT).eval()
    assert not torch.allclose(tagged(["高い鐘"], ["jpn"]).pooled, tagged(["高い鐘"], ["eng"]).pooled)
    with pytest.raises(MlatrError, match="zho"):
        tagged(["高い鐘"], ["zho"])
    cls_enc = SmallTextEncoder(tokenizer, pooling="cls", **TINY_TEXT).eval()
    out = cls_enc(["a dog barks"])
    torch.testing.assert_close(out.pooled, out.frames[:, 0])
