"""Hugging Face text encoders (sonar, labse, xlmr, bert) with tiny random-weight models saved to local
folders, plus the SONAR size and clean imports without transformers."""

import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F

from mlatr.errors import MlatrError
from mlatr.models.registry import build_audio_encoder, build_text_encoder

transformers = pytest.importorskip("transformers")

CODES = ["eng_Latn", "fra_Latn", "deu_Latn", "spa_Latn", "nld_Latn", "cat_Latn", "jpn_Jpan", "zho_Hans"]
CHARS = "abcdefghijklmnopqrstuvwxyzàéèçñüöäß▁犬猫がのは"


def _char_vocab(specials: list[str]) -> dict[str, int]:
    vocab = {s: i for i, s in enumerate(specials)}
    for c in CHARS:
        vocab.setdefault(c, len(vocab))
    return vocab


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("hf")
    torch.manual_seed(0)
    # SONAR layout: M2M100Encoder + NLLB tokenizer with the language codes as special tokens
    nllb = transformers.NllbTokenizer(vocab=_char_vocab(["<s>", "<pad>", "</s>", "<unk>"]), merges=[],
                                      additional_special_tokens=CODES)
    from transformers.models.m2m_100.modeling_m2m_100 import M2M100Encoder

    m2m = M2M100Encoder(transformers.M2M100Config(
        vocab_size=len(nllb), d_model=16, encoder_layers=2, encoder_attention_heads=2, encoder_ffn_dim=32,
        decoder_layers=1, decoder_attention_heads=2, decoder_ffn_dim=32, max_position_embeddings=64,
        pad_token_id=1, bos_token_id=0, eos_token_id=2, scale_embedding=True, dropout=0.0,
        attention_dropout=0.0, activation_dropout=0.0))
    m2m.save_pretrained(root / "sonar")
    nllb.save_pretrained(root / "sonar")
    # BERT / LaBSE layout
    bert_vocab = _char_vocab(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"])
    bert_tok = transformers.BertTokenizer(vocab=bert_vocab)
    bert_cfg = transformers.BertConfig(vocab_size=len(bert_vocab), hidden_size=16, num_hidden_layers=2,
                                       num_attention_heads=2, intermediate_size=32, max_position_embeddings=64,
                                       hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    transformers.BertModel(bert_cfg).save_pretrained(root / "bert")
    bert_tok.save_pretrained(root / "bert")
    # XLM-R layout (unigram vocabulary)
    pieces = [("<s>", 0.0), ("<pad>", 0.0), ("</s>", 0.0), ("<unk>", 0.0)] + [(c, -1.0) for c in CHARS]
    xtok = transformers.XLMRobertaTokenizer(vocab=pieces)
    xcfg = transformers.XLMRobertaConfig(vocab_size=len(pieces) + 1, hidden_size=16, num_hidden_layers=2,
                                         num_attention_heads=2, intermediate_size=32, max_position_embeddings=70,
                                         pad_token_id=1, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    transformers.XLMRobertaModel(xcfg).save_pretrained(root / "xlmr")
    xtok.save_pretrained(root / "xlmr")
    return {"sonar": root / "sonar", "bert": root / "bert", "labse": root / "bert", "xlmr": root / "xlmr",
            "nllb": nllb}


TEXTS = ["a dog barks", "un chien aboie", "ein hund bellt lange", "犬が吠える"]
LANGS = ["eng", "fra", "deu", "jpn"]


def test_sonar_mixed_language_batch_matches_the_nllb_tokenizer(folders):
    enc = build_text_encoder("sonar", path=str(folders["sonar"])).eval()
    ids, mask = enc.tokenize(TEXTS, LANGS)
    nllb = folders["nllb"]
    for i, (text, lang) in enumerate(zip(TEXTS, LANGS, strict=True)):
        nllb.src_lang = {"eng": "eng_Latn", "fra": "fra_Latn", "deu": "deu_Latn", "jpn": "jpn_Jpan"}[lang]
        expected = nllb(text)["input_ids"]  # [lang code] tokens [</s>]
        assert ids[i, : int(mask[i].sum())].tolist() == expected
        assert (ids[i, int(mask[i].sum()):] == nllb.pad_token_id).all()
    with torch.no_grad():
        out = enc(TEXTS, LANGS)
        assert out.pooled.shape == (4, 16) and enc.output_dim == 16
        states = enc.model(input_ids=ids, attention_mask=mask).last_hidden_state
        manual = (states * mask[..., None]).sum(1) / mask.sum(1, keepdim=True)
        assert torch.allclose(out.pooled, manual, atol=1e-6)
        for i in range(4):  # each caption alone (no padding) gives the same vector as in the mixed batch
            alone = enc([TEXTS[i]], [LANGS[i]])
            assert torch.allclose(alone.pooled[0], out.pooled[i], atol=1e-5)
            assert torch.allclose(alone.frames[0], out.frames[i, : alone.frames.shape[1]], atol=1e-5)
        # the language code changes the embedding of the same words
        assert not torch.allclose(enc(["un chien"], ["fra"]).pooled, enc(["un chien"], ["cat"]).pooled)


def test_sonar_language_codes(folders):
    enc = build_text_encoder("sonar", path=str(folders["sonar"]), max_length=6)
    nllb = folders["nllb"]
    ids, _ = enc.tokenize(["bon dia a tothom", "hi"], ["cat", None])
    assert ids[0, 0] == nllb.convert_tokens_to_ids("cat_Latn") and ids[0].tolist()[-1] == nllb.eos_token_id
    assert ids.shape[1] == 6  # cut to max_length, the end token kept
    assert ids[1, 0] == nllb.convert_tokens_to_ids("eng_Latn")  # unknown language -> default_lang
    assert enc.language_code("zho") == "zho_Hans" and enc.language_code("spa_Latn") == "spa_Latn"
    with pytest.raises(MlatrError, match="no NLLB language code for 'xyz'"):
        enc.tokenize(["x"], ["xyz"])
    custom = build_text_encoder("sonar", path=str(folders["sonar"]), lang_codes={"xyz": "nld_Latn"})
    assert custom.tokenize(["x"], ["xyz"])[0][0, 0] == nllb.convert_tokens_to_ids("nld_Latn")
    assert custom.config()["lang_codes"] == {"xyz": "nld_Latn"}


def test_labse_pooling_is_the_normalised_pooler(folders):
    enc = build_text_encoder("labse", path=str(folders["labse"])).eval()
    with torch.no_grad():
        out = enc(TEXTS[:3], LANGS[:3])
        cls = out.frames[:, 0]
        dense = enc.model.pooler.dense
        expected = torch.tanh(cls @ dense.weight.T + dense.bias)
        expected = expected / expected.norm(dim=-1, keepdim=True)
    assert torch.allclose(out.pooled, expected, atol=1e-6)
    assert torch.allclose(out.pooled.norm(dim=-1), torch.ones(3))


def test_bert_cls_and_token_features(folders):
    enc = build_text_encoder("bert", path=str(folders["bert"])).eval()
    assert enc.max_length == 30  # the fine-grained paper's caption length
    long = "a " * 40 + "dog"
    with torch.no_grad():
        out = enc(["a dog barks", long], ["eng", "eng"])
    assert out.frames.shape[1] == 30 and out.mask[1].all()
    n = int(out.mask[0].sum())
    # WordPiece over a character vocabulary without "##" pieces: [CLS] a [UNK] [UNK] [SEP]
    assert n == 5 and enc.tokenizer.convert_ids_to_tokens(enc.tokenize(["a dog barks"], None)[0][0].tolist()) == [
        "[CLS]", "a", "[UNK]", "[UNK]", "[SEP]"]
    assert torch.equal(out.pooled, out.frames[:, 0])
    assert (out.frames[0, n:] == 0).all()
    assert getattr(enc.model, "pooler", None) is None  # no unused pooler parameters


def test_xlmr_mean_pooling_is_padding_invariant(folders):
    enc = build_text_encoder("xlmr", path=str(folders["xlmr"])).eval()
    with torch.no_grad():
        out = enc(TEXTS[:3], LANGS[:3])
        for i in range(3):
            alone = enc([TEXTS[i]], [LANGS[i]]).pooled[0]
            assert torch.allclose(alone, out.pooled[i], atol=1e-5)
        valid = out.frames[0][out.mask[0]]
        assert torch.allclose(out.pooled[0], valid.mean(dim=0), atol=1e-6)


def test_missing_or_wrong_folder_gives_one_clear_error(folders, tmp_path):
    with pytest.raises(MlatrError) as info:
        build_text_encoder("sonar", path=str(tmp_path / "nowhere"))
    msg = str(info.value)
    assert "does not exist" in msg and "config.json" in msg and "model.safetensors" in msg
    assert "huggingface-cli download cointegrated/SONAR_200_text_encoder" in msg
    with pytest.raises(MlatrError, match="model_type 'bert', not a sonar model"):
        build_text_encoder("sonar", path=str(folders["bert"]))
    with pytest.raises(MlatrError, match="no model folder given"):
        build_text_encoder("labse")
    (tmp_path / "partial").mkdir()
    (tmp_path / "partial" / "config.json").write_text('{"model_type": "bert"}')
    with pytest.raises(MlatrError, match="no weights file.*setu4993/LaBSE"):
        build_text_encoder("labse", path=str(tmp_path / "partial"))


def test_freezing_and_gradient_checkpointing(folders):
    frozen = build_text_encoder("bert", path=str(folders["bert"]), freeze=True)
    assert not any(p.requires_grad for p in frozen.parameters())
    last = build_text_encoder("sonar", path=str(folders["sonar"]), train_last_layers=1)
    names = {n for n, p in last.named_parameters() if p.requires_grad}
    assert names and all(n.startswith(("model.layers.1.", "model.layer_norm.")) for n in names)
    with pytest.raises(MlatrError, match="train_last_layers"):
        build_text_encoder("sonar", path=str(folders["sonar"]), train_last_layers=5)
    grads = []
    for ckpt in (False, True):
        enc = build_text_encoder("sonar", path=str(folders["sonar"]), gradient_checkpointing=ckpt).train()
        assert any(getattr(m, "gradient_checkpointing", False) for m in enc.model.modules()) == ckpt
        enc(TEXTS, LANGS).pooled.square().sum().backward()
        grads.append(torch.cat([p.grad.flatten() for p in enc.parameters() if p.grad is not None]))
    assert torch.allclose(grads[0], grads[1], atol=1e-6)


def test_config_rebuilds(folders):
    enc = build_text_encoder("sonar", path=str(folders["sonar"]), max_length=40)
    cfg = enc.config()
    assert cfg["name"] == "sonar" and cfg["max_length"] == 40
    again = build_text_encoder(**cfg)
    again.load_state_dict(enc.state_dict())
    with torch.no_grad():
        assert torch.equal(again.eval()(TEXTS, LANGS).pooled, enc.eval()(TEXTS, LANGS).pooled)


def test_sonar_size():
    """SONAR text encoder as ported to transformers (cointegrated/SONAR_200_text_encoder: M2M100Encoder,
    NLLB-200 vocabulary 256206, d_model 1024, 24 layers, 16 heads, FFN 8192 as NLLB-1.3B; positions are
    sinusoidal buffers): 766,091,264 parameters."""
    from transformers.models.m2m_100.modeling_m2m_100 import M2M100Encoder

    cfg = transformers.M2M100Config(vocab_size=256206, d_model=1024, encoder_layers=24, encoder_attention_heads=16,
                                    encoder_ffn_dim=8192, max_position_embeddings=1024, pad_token_id=1,
                                    scale_embedding=True)
    with torch.device("meta"):
        model = M2M100Encoder(cfg)
    d, ffn, vocab, layers = 1024, 8192, 256206, 24
    per_layer = 4 * (d * d + d) + (d * ffn + ffn) + (ffn * d + d) + 2 * 2 * d
    expected = vocab * d + layers * per_layer + 2 * d
    assert sum(p.numel() for p in model.parameters()) == expected == 766_091_264


def test_modules_import_without_transformers():
    code = (
        "import sys; sys.modules['transformers'] = None\n"
        "import mlatr.models.hf_text, mlatr.models.ced, mlatr.models.htsat\n"
        "from mlatr.errors import MlatrError\n"
        "from mlatr.models.hf_text import _import_transformers\n"
        "try:\n    _import_transformers()\nexcept MlatrError as e:\n    print(e)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "pip install 'mlatr[hf]'" in out.stdout


# ---- HTSAT (ClapAudioModel) -------------------------------------------------------------------------
AUDIO_CFG = {"spec_size": 64, "num_mel_bins": 16, "patch_size": 4, "patch_stride": 4, "window_size": 4,
             "depths": [1, 1, 1], "num_attention_heads": [1, 2, 2], "patch_embeds_hidden_size": 8,
             "hidden_size": 32, "projection_dim": 16, "enable_fusion": False}


def test_clap_front_end_matches_the_feature_extractor():
    from transformers import ClapFeatureExtractor
    from transformers.audio_utils import mel_filter_bank

    from mlatr.models.htsat import ClapLogMel, slaney_mel_filterbank

    reference_fb = mel_filter_bank(num_frequency_bins=513, num_mel_filters=64, min_frequency=50,
                                   max_frequency=14_000, sampling_rate=48_000, norm="slaney", mel_scale="slaney")
    assert torch.allclose(slaney_mel_filterbank(), torch.from_numpy(reference_fb).float(), rtol=1e-4, atol=1e-8)
    fe = ClapFeatureExtractor(frequency_min=50, frequency_max=14_000)
    wave = torch.randn(48_000, generator=torch.Generator().manual_seed(0)) * 0.1
    expected = fe._np_extract_fbank_features(wave.double().numpy(), fe.mel_filters_slaney)  # [frames, 64]
    ours = ClapLogMel(input_rate=48_000).log_mel(wave[None])[0]
    assert ours.shape == expected.shape
    assert torch.allclose(ours, torch.from_numpy(expected).float(), atol=2e-3)


def test_clap_front_end_fills_ten_seconds_and_resizes_long_clips():
    from mlatr.models.htsat import ClapLogMel

    fe = ClapLogMel(input_rate=48_000)
    clip = torch.randn(1, 3 * 48_000) * 0.1
    feats, covered = fe(clip)
    tiled = torch.cat([clip[0]] * 3 + [torch.zeros(48_000)])[None]  # repeatpad: 3 copies then zeros
    expected = F.interpolate(fe.log_mel(tiled)[:, None], size=(1024, 64), mode="bicubic", align_corners=True)
    assert feats.shape == (1, 1, 1024, 64) and torch.allclose(feats, expected, atol=1e-4)
    assert covered.tolist() == pytest.approx([0.9])
    long = torch.randn(1, 12 * 48_000) * 0.1
    feats, covered = fe(long)
    expected = F.interpolate(fe.log_mel(long)[:, None], size=(1024, 64), mode="bicubic", align_corners=True)
    assert torch.allclose(feats, expected, atol=1e-4) and covered.tolist() == [1.0]
    _, covered = ClapLogMel(input_rate=48_000, padding="pad")(clip)
    assert covered.tolist() == pytest.approx([0.3])


def test_htsat_from_a_clap_folder_frames_and_padding(tmp_path):
    torch.manual_seed(0)
    text_cfg = {"vocab_size": 50, "hidden_size": 16, "num_hidden_layers": 1, "num_attention_heads": 2,
                "intermediate_size": 32, "projection_dim": 16, "max_position_embeddings": 40}
    clap = transformers.ClapModel(transformers.ClapConfig(text_config=text_cfg, audio_config=AUDIO_CFG,
                                                          projection_dim=16))
    clap.save_pretrained(tmp_path / "clap")  # the layout of laion/clap-htsat-unfused
    enc = build_audio_encoder("htsat", path=str(tmp_path / "clap"), padding="pad").eval()
    own = clap.audio_model.state_dict()
    assert all(torch.equal(own[k], v) for k, v in enc.model.state_dict().items())
    assert enc.load_report["missing"] == [] and any(k.startswith("text_model.") for k in enc.load_report["ignored"])
    lengths = torch.tensor([32_000, 12_000])
    wave = torch.randn(2, 32_000) * (torch.arange(32_000)[None] < lengths[:, None])
    with torch.no_grad():
        out = enc(wave, lengths)
        assert out.pooled.shape == (2, 32) and out.frames.shape == (2, 16, 32) and enc.output_dim == 32
        assert out.mask.sum(dim=1).tolist() == [4, 2]  # 2 s and 0.75 s of a 10 s window of 16 positions
        for i, n in enumerate(lengths.tolist()):
            alone = enc(wave[i:i + 1, :n])
            assert torch.allclose(alone.pooled[0], out.pooled[i], atol=1e-4)
        full = build_audio_encoder("htsat", path=str(tmp_path / "clap")).eval()(wave[:1])  # repeatpad
        assert full.mask.all()
        assert torch.allclose(full.pooled, full.frames.mean(dim=1), atol=1e-5)  # pooler = mean of the map
    with pytest.raises(MlatrError, match="huggingface-cli download laion/clap-htsat-unfused"):
        build_audio_encoder("htsat", path=str(tmp_path / "missing"))


def test_htsat_config_freezing_and_checkpointing():
    enc = build_audio_encoder("htsat", config=AUDIO_CFG)
    rebuilt = build_audio_encoder(**enc.config())
    rebuilt.load_state_dict(enc.state_dict())
    wave = torch.randn(2, 16_000)
    with torch.no_grad():
        assert torch.allclose(rebuilt.eval()(wave).pooled, enc.eval()(wave).pooled)
    frozen = build_audio_encoder("htsat", config=AUDIO_CFG, train_last_stages=1).train()
    names = {n for n, p in frozen.named_parameters() if p.requires_grad}
    assert names and all(n.startswith(("model.audio_encoder.layers.2.", "model.audio_encoder.norm.")) for n in names)
    assert not frozen.model.audio_encoder.batch_norm.training
    grads = []
    for ckpt in (False, True):
        torch.manual_seed(1)
        model = build_audio_encoder("htsat", config=AUDIO_CFG, gradient_checkpointing=ckpt).train()
        model(wave).pooled.square().sum().backward()
        grads.append(torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None]))
    assert torch.allclose(grads[0], grads[1], atol=1e-6)


def test_half_precision_weights_load_as_float32(tmp_path):
    from mlatr.models.hf_text import write_tiny_model

    folder = write_tiny_model("bert", tmp_path / "bert")
    model = transformers.BertModel.from_pretrained(str(folder), local_files_only=True)
    model.half().save_pretrained(folder)  # a checkpoint stored in float16
    enc = build_text_encoder("bert", path=str(folder))
    assert {p.dtype for p in enc.parameters()} == {torch.float32}
    assert enc(["a low tone"], ["eng"]).pooled.dtype == torch.float32


@pytest.mark.parametrize("name", ["sonar", "bert"])
def test_eager_attention_is_an_option_with_the_same_encoding(folders, name):
    """model.text.attention: eager reaches transformers' attn_implementation, encodes as sdpa does, and is
    kept in the config; token_lengths are the tokenised rows' lengths (what a batch is padded to)."""
    fused = build_text_encoder(name, path=str(folders[name]), attention="sdpa").eval()
    eager = build_text_encoder(name, path=str(folders[name]), attention="eager").eval()
    assert eager.model.config._attn_implementation == "eager" and eager.config()["attention"] == "eager"
    with torch.no_grad():
        assert torch.allclose(fused(TEXTS, LANGS).pooled, eager(TEXTS, LANGS).pooled, atol=1e-5)
    ids, mask = fused.tokenize(TEXTS, LANGS)
    assert fused.token_lengths(TEXTS, LANGS) == mask.sum(dim=1).tolist()
    with pytest.raises(MlatrError, match="attention"):
        build_text_encoder(name, path=str(folders[name]), attention="flash")
