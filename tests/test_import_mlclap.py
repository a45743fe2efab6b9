"""mlatr import-checkpoint --from mlclap: a state dict with ML-CLAP's key names and shapes, made by a tiny
configuration of ML-CLAP's modules written out here (CED ``AudioTransformer`` with pooling "cat", fairseq2's
SONAR text encoder, Linear-ReLU-Linear projections, learnt tau), converts into an mlatr checkpoint whose
model gives the same embeddings as those modules on the same input; every unmatched key is reported; the
result loads in mlatr eval, mlatr index build and model.init_checkpoint.

The reference modules follow ML-CLAP's code (github.com/zyyan4/ml-clap, models/ced/audiotransformer.py,
models/mlclap_model.py) and fairseq2's SONAR encoder (pre-norm layers, embeddings scaled by sqrt(d),
sinusoidal positions from 2 as in fairseq, final norm, mean pooling; special tokens <pad> <unk> <s> </s>).
Their front end is mlatr's LogMel: the log-mel is a fixed function, and the converter compares ML-CLAP's
saved filterbank and window with mlatr's instead (its torchaudio front end reflects at the edges).
"""

import json
import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from mlatr.audio.frontend import LogMel
from mlatr.cli import main
from mlatr.convert.mlclap import ConversionReport, convert_mlclap_state, read_mlclap_state
from mlatr.errors import MlatrError
from mlatr.inference.checkpoint import load_model, read_checkpoint
from mlatr.models import DualEncoder
from mlatr.models.hf_text import write_tiny_model
from mlatr.training.config import load_config
from mlatr.training.trainer import Trainer
from toydata import make_toy_manifest

transformers = pytest.importorskip("transformers")

DIM, DEPTH, HEADS, EMBED, TEXT_DIM, TEXT_LAYERS, TEXT_HEADS = 32, 2, 4, 24, 16, 2, 2


# ---- ML-CLAP's audio tower: CED AudioTransformer(pooling="cat") -----------------------------------------
class RefAttention(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        b, n, c = x.shape
        q, k, v = self.qkv(x).reshape(b, n, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
        attn = (q @ k.transpose(-2, -1) * (c // self.heads) ** -0.5).softmax(-1)
        return self.proj((attn @ v).transpose(1, 2).reshape(b, n, c))


class RefMlp(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(dim, 4 * dim), nn.Linear(4 * dim, dim)

    def forward(self, x):
        return self.fc2(F.gelu(self.fc1(x)))


class RefBlock(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.norm1, self.attn = nn.LayerNorm(dim, eps=1e-6), RefAttention(dim, heads)
        self.norm2, self.mlp = nn.LayerNorm(dim, eps=1e-6), RefMlp(dim)

    def forward(self, x):
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class RefMelSpectrogram(nn.Module):
    """Holds what torchaudio's MelSpectrogram saves: ``spectrogram.window`` and ``mel_scale.fb``."""

    def __init__(self, logmel):
        super().__init__()
        self.spectrogram, self.mel_scale = nn.Module(), nn.Module()
        self.spectrogram.register_buffer("window", logmel.window.clone())
        self.mel_scale.register_buffer("fb", logmel.filterbank.clone())


class RefCED(nn.Module):
    def __init__(self):
        super().__init__()
        self.logmel = LogMel()  # not a saved module of ML-CLAP's (buffers not persistent): see the docstring
        self.front_end = nn.Sequential(RefMelSpectrogram(self.logmel), nn.Identity())
        self.init_bn = nn.Sequential(nn.Identity(), nn.BatchNorm2d(64, momentum=0.01), nn.Identity())
        self.patch_embed = nn.Module()
        self.patch_embed.proj = nn.Conv2d(1, DIM, 16, 16)
        self.time_pos_embed = nn.Parameter(torch.randn(1, DIM, 1, 1012 // 16) * 0.02)
        self.freq_pos_embed = nn.Parameter(torch.randn(1, DIM, 4, 1) * 0.02)
        self.blocks = nn.Sequential(*[RefBlock(DIM, HEADS) for _ in range(DEPTH)])
        self.norm = nn.LayerNorm(DIM, eps=1e-6)
        self.outputlayer = nn.Sequential(nn.LayerNorm(DIM), nn.Linear(DIM, 527))

    def forward(self, wave):  # clips up to 10.12 s: one chunk, as ML-CLAP's forward_spectrogram
        x = self.logmel(wave)[0][:, None]  # b 1 f t
        x = self.init_bn[1](x.transpose(1, 2)).transpose(1, 2)  # BatchNorm over mel bins ('b c f t -> b f c t')
        x = self.patch_embed.proj(x)
        x = x + self.time_pos_embed[:, :, :, : x.shape[-1]] + self.freq_pos_embed
        x = x.flatten(2).transpose(1, 2)  # b (f t) d
        return self.norm(self.blocks(x)).mean(1)  # pooling 'cat' = mean over every patch


# ---- ML-CLAP's text tower: fairseq2's SONAR text encoder ------------------------------------------------
class RefSelfAttention(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.q_proj, self.k_proj, self.v_proj, self.output_proj = (nn.Linear(d, d) for _ in range(4))

    def forward(self, x, keep):
        b, n, d = x.shape
        h = TEXT_HEADS

        def split(t):
            return t.reshape(b, n, h, d // h).transpose(1, 2)

        q, k, v = split(self.q_proj(x)), split(self.k_proj(x)), split(self.v_proj(x))
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(d // h)
        scores = scores.masked_fill(~keep[:, None, None, :], float("-inf"))
        return self.output_proj((scores.softmax(-1) @ v).transpose(1, 2).reshape(b, n, d))


class RefLayer(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.self_attn_layer_norm, self.self_attn = nn.LayerNorm(d), RefSelfAttention(d)
        self.ffn_layer_norm, self.ffn = nn.LayerNorm(d), nn.Module()
        self.ffn.inner_proj, self.ffn.output_proj = nn.Linear(d, 2 * d), nn.Linear(2 * d, d)

    def forward(self, x, keep):
        x = x + self.self_attn(self.self_attn_layer_norm(x), keep)
        return x + self.ffn.output_proj(torch.relu(self.ffn.inner_proj(self.ffn_layer_norm(x))))


class RefSonar(nn.Module):
    def __init__(self, vocab):
        super().__init__()
        self.encoder_frontend = nn.Module()
        self.encoder_frontend.embed = nn.Embedding(vocab, TEXT_DIM)
        self.encoder = nn.Module()
        self.encoder.layers = nn.ModuleList([RefLayer(TEXT_DIM) for _ in range(TEXT_LAYERS)])
        self.layer_norm = nn.LayerNorm(TEXT_DIM)

    @staticmethod
    def positions(n):
        """fairseq's sinusoids: position p = 2, 3, ... (padding index 1 + 1), [sin | cos] halves."""
        half = TEXT_DIM // 2
        freq = torch.exp(torch.arange(half) * -(math.log(10000.0) / (half - 1)))
        angle = torch.arange(2, n + 2, dtype=torch.float32)[:, None] * freq[None]
        return torch.cat([angle.sin(), angle.cos()], dim=1)

    def forward(self, ids, keep):
        x = self.encoder_frontend.embed(ids) * math.sqrt(TEXT_DIM) + self.positions(ids.shape[1])
        for layer in self.encoder.layers:
            x = layer(x, keep)
        x = self.layer_norm(x)
        w = keep[..., None].float()
        return (x * w).sum(1) / w.sum(1)


class Wrapper(nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model = model


class RefMLCLAP(nn.Module):
    def __init__(self, vocab):
        super().__init__()
        self.audio_encoder, self.text_encoder = Wrapper(RefCED()), Wrapper(RefSonar(vocab))
        self.audio_proj = nn.Sequential(nn.Linear(DIM, EMBED), nn.ReLU(), nn.Linear(EMBED, EMBED))
        self.text_proj = nn.Sequential(nn.Linear(TEXT_DIM, EMBED), nn.ReLU(), nn.Linear(EMBED, EMBED))
        self.temperature = nn.Parameter(torch.ones([]) * 0.05)

    def encode_audio(self, wave):
        return F.normalize(self.audio_proj(self.audio_encoder.model(wave)), dim=-1)

    def encode_text(self, fs2_ids, keep):
        return F.normalize(self.text_proj(self.text_encoder.model(fs2_ids, keep)), dim=-1)


#: Hugging Face NLLB id -> fairseq2 id of the four special tokens (<s> <pad> </s> <unk> vs <pad> <unk> <s> </s>).
HF_TO_FS2 = {0: 2, 1: 0, 2: 3, 3: 1}


@pytest.fixture(scope="module")
def ref(tmp_path_factory):
    root = tmp_path_factory.mktemp("mlclap")
    sonar = write_tiny_model("sonar", root / "sonar", dim=TEXT_DIM, layers=TEXT_LAYERS)
    vocab = len(transformers.AutoTokenizer.from_pretrained(str(sonar)))
    torch.manual_seed(0)
    model = RefMLCLAP(vocab).eval()
    with torch.no_grad():  # non-trivial input-norm statistics, so the batch norm's mapping is checked too
        bn = model.audio_encoder.model.init_bn[1]
        bn.running_mean.uniform_(-60, -20)
        bn.running_var.uniform_(50, 200)
        bn.weight.uniform_(0.5, 1.5)
        bn.bias.uniform_(-0.2, 0.2)
    state = model.state_dict()
    path = root / "pretrain.pt"
    torch.save(state, path)
    return model, state, path, sonar


def _fs2_ids(ids):
    return ids.clone().apply_(lambda i: HF_TO_FS2.get(i, i))


def test_reference_state_dict_has_mlclap_key_names(ref):
    _, state, _, _ = ref
    for key in ("audio_encoder.model.init_bn.1.running_mean", "audio_encoder.model.blocks.1.attn.qkv.weight",
                "audio_encoder.model.front_end.0.mel_scale.fb", "audio_encoder.model.outputlayer.1.weight",
                "text_encoder.model.encoder_frontend.embed.weight",
                "text_encoder.model.encoder.layers.0.self_attn.output_proj.weight",
                "text_encoder.model.encoder.layers.1.ffn.inner_proj.bias", "text_encoder.model.layer_norm.weight",
                "audio_proj.2.weight", "text_proj.0.bias", "temperature"):
        assert key in state


def test_converted_model_gives_the_same_embeddings(ref):
    model, state, _, sonar = ref
    converted, report = convert_mlclap_state(state, sonar, audio_heads=HEADS)
    assert report.ok and report.matched == len(converted.state_dict()) - 1  # every weight came from ML-CLAP
    assert set(report.ignored) == {"audio_encoder.model.front_end.0.spectrogram.window",
                                   "audio_encoder.model.front_end.0.mel_scale.fb",
                                   "audio_encoder.model.outputlayer.0.weight", "audio_encoder.model.outputlayer.0.bias",
                                   "audio_encoder.model.outputlayer.1.weight", "audio_encoder.model.outputlayer.1.bias"}
    assert any("mel_scale.fb matches" in n for n in report.notes)
    assert report.mlclap_temperature == pytest.approx(0.05) and float(converted.temperature) == pytest.approx(0.07)
    torch.manual_seed(1)
    wave = 0.1 * torch.randn(2, 16000 * 3)  # 3 s: one CED chunk
    texts, langs = ["a dog barks while a car passes", "un gos borda"], ["eng", "cat"]
    with torch.no_grad():
        mine_a = converted.encode_audio(wave).pooled
        ref_a = model.encode_audio(wave)
        ids, mask = converted.text_encoder.tokenize(texts, langs)
        assert ids[1, 0] == converted.text_encoder.tokenizer.convert_tokens_to_ids("cat_Latn")
        mine_t = converted.encode_text(texts, langs).pooled
        ref_t = model.encode_text(_fs2_ids(ids), mask.bool())
    assert torch.allclose(mine_a, ref_a, atol=1e-5), (mine_a - ref_a).abs().max()
    assert torch.allclose(mine_t, ref_t, atol=1e-5), (mine_t - ref_t).abs().max()
    assert (ref_a @ ref_t.T).abs().max() < 0.999  # the embeddings are not trivially equal to each other


def test_unmatched_keys_are_reported(ref):
    _, state, _, sonar = ref
    broken = dict(state)
    del broken["text_encoder.model.encoder.layers.1.ffn.inner_proj.weight"]
    broken["text_encoder.model.encoder.adapter.weight"] = torch.zeros(3)
    broken["logit_bias"] = torch.zeros(1)
    with pytest.raises(MlatrError) as err:
        convert_mlclap_state(broken, sonar, audio_heads=HEADS)
    text = str(err.value)
    for key in ("text_encoder.model.layers.1.fc1.weight", "text_encoder.model.encoder.adapter.weight", "logit_bias"):
        assert key in text
    _, report = convert_mlclap_state(broken, sonar, audio_heads=HEADS, allow_unmatched=True)
    assert isinstance(report, ConversionReport) and not report.ok
    assert report.missing == ["text_encoder.model.layers.1.fc1.weight"]
    assert sorted(report.unexpected) == ["logit_bias", "text_encoder.model.encoder.adapter.weight"]
    bad = dict(state, **{"audio_proj.0.bias": torch.zeros(EMBED + 1)})
    with pytest.raises(MlatrError, match=r"(?s)shape mismatch.*audio_projection.net.0.bias"):
        convert_mlclap_state(bad, sonar, audio_heads=HEADS)


def test_heads_of_an_unpublished_width_must_be_given(ref):
    _, state, _, sonar = ref
    with pytest.raises(MlatrError, match="--audio-heads"):
        convert_mlclap_state(state, sonar)


def test_cli_output_works_for_eval_index_and_init_checkpoint(ref, tmp_path, capsys):
    model, state, path, sonar = ref
    torch.save({"model": {f"module.{k}": v for k, v in state.items()}}, tmp_path / "wrapped.pt")  # DDP + wrapper
    assert read_mlclap_state(tmp_path / "wrapped.pt").keys() == state.keys()
    out = tmp_path / "mlclap.pt"
    assert main(["import-checkpoint", "--from", "mlclap", str(path), "--sonar", str(sonar), "--audio-heads",
                 str(HEADS), "-o", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "matched" in printed and "outputlayer" in printed and f"wrote {out}" in printed
    ckpt = read_checkpoint(out)
    assert ckpt["source"]["from"] == "mlclap" and ckpt["train_config"]["data"]["languages"][0] == "eng"
    loaded = DualEncoder.from_config(ckpt["model_config"])  # the checkpoint format itself, as every loader reads it
    loaded.load_state_dict(ckpt["model"])
    loaded.eval()
    wave = 0.1 * torch.randn(1, 16000)
    with torch.no_grad():
        assert torch.allclose(loaded.encode_audio(wave).pooled, model.encode_audio(wave), atol=1e-5)

    manifest = make_toy_manifest(tmp_path / "toy", n_train=4, n_val=2, n_test=3, languages=("eng", "fra"))
    assert main(["eval", "--model", str(out), "--manifest", str(manifest), "--split", "test",
                 "--languages", "eng,fra", "--json", str(tmp_path / "m.json")]) == 0
    metrics = json.loads((tmp_path / "m.json").read_text())
    assert set(metrics["t2a"]) == {"eng", "fra", "avg"}
    assert main(["index", "build", "--model", str(out), "--manifest", str(manifest), "-o",
                 str(tmp_path / "lib.idx.npz"), "--no-progress"]) == 0

    cfg = load_config(None, [f"data.manifest={manifest}", f"out_dir={tmp_path / 'run'}", "data.languages=[eng,fra]",
                             f"model.init_checkpoint={out}", "train.epochs=1", "train.batch_size=4",
                             "train.progress=false", "data.max_seconds=1.0", "data.eval_max_seconds=1.0"])
    trainer = Trainer(cfg)
    start = trainer.model.state_dict()
    for key, value in loaded.state_dict().items():
        assert torch.equal(start[key], value), key  # training starts from ML-CLAP's weights


def test_init_checkpoint_takes_the_runs_freezing_options(ref, tmp_path):
    """model.init_checkpoint keeps the checkpoint's architecture but freezes what the run's config says."""
    _, _, path, sonar = ref
    out = tmp_path / "mlclap.pt"
    assert main(["import-checkpoint", "--from", "mlclap", str(path), "--sonar", str(sonar), "--audio-heads",
                 str(HEADS), "-o", str(out)]) == 0
    saved = read_checkpoint(out)["model_config"]
    manifest = make_toy_manifest(tmp_path / "toy", n_train=4, n_val=2, n_test=3, languages=("eng", "fra"))
    base = [f"data.manifest={manifest}", "data.languages=[eng,fra]", f"model.init_checkpoint={out}",
            "train.epochs=1", "train.batch_size=4", "train.progress=false", "data.max_seconds=1.0",
            "data.eval_max_seconds=1.0"]
    audio_name, text_name = saved["audio_encoder"]["name"], saved["text_encoder"]["name"]
    cfg = load_config(None, [*base, f"out_dir={tmp_path / 'frozen'}",
                             f"model.audio={{name: {audio_name}, train_last_blocks: 1}}",
                             f"model.text={{name: {text_name}, freeze: true}}"])
    model = Trainer(cfg).model
    assert not any(p.requires_grad for p in model.text_encoder.parameters())
    blocks = model.audio_encoder.blocks
    assert all(p.requires_grad for p in blocks[-1].parameters())
    assert not any(p.requires_grad for b in blocks[:-1] for p in b.parameters())
    assert model.config()["audio_encoder"]["train_last_blocks"] == 1  # written into the run's checkpoints too
    untouched = Trainer(load_config(None, [*base, f"out_dir={tmp_path / 'all'}"])).model  # no option: all train
    assert all(p.requires_grad for p in untouched.text_encoder.parameters())

    cfg = load_config(None, [*base, f"out_dir={tmp_path / 'bad'}", f"model.audio={{name: {audio_name}, "
                             "train_last_layers: 1}"])
    with pytest.raises(MlatrError, match="model.audio.train_last_layers.*no such option"):
        Trainer(cfg)


def test_a_relative_sonar_folder_is_stored_absolute(ref, tmp_path, monkeypatch):
    """The checkpoint names the SONAR folder (its tokenizer) absolutely, so it loads from any folder."""
    _, _, path, sonar = ref
    monkeypatch.chdir(sonar.parent)
    out = tmp_path / "mlclap.pt"
    assert main(["import-checkpoint", "--from", "mlclap", str(path), "--sonar", sonar.name, "--audio-heads",
                 str(HEADS), "-o", str(out)]) == 0
    assert read_checkpoint(out)["model_config"]["text_encoder"]["path"] == str(sonar.resolve())
    monkeypatch.chdir(tmp_path)
    load_model(out)  # from another folder
