"""The papers' presets: each parses with the papers' settings, fails clearly while its weights are
placeholders, and its tiny twin builds through the same code path and trains two steps on toy data."""

import json
from pathlib import Path

import pytest
import torch

from mlatr.errors import MlatrError
from mlatr.training.config import load_config
from mlatr.training.trainer import Trainer
from toydata import make_toy_manifest

pytest.importorskip("transformers")

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ROOT / "configs"
ATRI = [f"atri-{s}-{d}" for s in ("mlclap", "cacl", "kcl") for d in ("audiocaps", "clotho")]
SUPCLAP = [f"supclap-{d}{m}" for d in ("audiocaps", "clotho") for m in ("", "-english")]
FINEGRAINED = ["finegrained-audiocaps", "finegrained-clotho"]
ALL = ATRI + SUPCLAP + FINEGRAINED


def tiny_overrides(family: str, folder: Path) -> list[str]:
    lines = (CONFIGS / "tiny" / f"{family}.overrides").read_text(encoding="utf-8").splitlines()
    out = [line.strip() for line in lines if line.strip() and not line.lstrip().startswith("#")]
    assert all(" " not in line for line in out)  # shell-safe, as the file says
    return [f"model.text.path={folder}" if line.startswith("model.text.path=") else line for line in out]


def test_every_preset_is_listed_and_parses():
    on_disk = {p.stem for p in CONFIGS.glob("*.yaml")} - {"demo"}
    assert on_disk == set(ALL)
    for name in ALL:
        cfg = load_config(CONFIGS / f"{name}.yaml")
        assert cfg.optim.name == "adam" and cfg.model.temperature == 0.07
        assert cfg.out_dir == f"runs/{name}"


@pytest.mark.parametrize("name", ATRI)
def test_atri_settings(name):
    cfg = load_config(CONFIGS / f"{name}.yaml")
    assert cfg.model.audio["name"] == "ced-base" and cfg.model.text["name"] == "sonar"
    assert (cfg.train.batch_size, cfg.optim.lr, cfg.train.epochs) == (24, 5e-6, 10)  # ATRI §5.3
    assert cfg.objective.scheme == name.split("-")[1] and cfg.objective.svr is None
    assert cfg.data.languages == ["eng", "fra", "deu", "spa", "nld", "cat", "jpn", "zho"]
    assert cfg.model.init_checkpoint is None  # optional ML-CLAP start: model.init_checkpoint=PATH
    assert load_config(CONFIGS / f"{name}.yaml", ["model.init_checkpoint=runs/x/best.pt"]).model.init_checkpoint


@pytest.mark.parametrize("name", SUPCLAP)
def test_supclap_settings(name):
    cfg = load_config(CONFIGS / f"{name}.yaml")
    svr = cfg.objective.svr
    assert (cfg.train.batch_size, cfg.optim.lr, cfg.train.epochs) == (24, 5e-5, 10)  # SupCLAP §4.1.2
    assert (svr.radius, svr.bidirectional, svr.alpha, svr.beta, svr.constraint) == ("dynamic", True, 1.0, 0.01, True)
    assert cfg.objective.base == "infonce"
    assert cfg.data.languages == (["eng"] if name.endswith("-english") else
                                  ["eng", "fra", "deu", "spa", "nld", "cat", "jpn", "zho"])


@pytest.mark.parametrize("name", FINEGRAINED)
def test_finegrained_settings(name):
    cfg = load_config(CONFIGS / f"{name}.yaml")
    assert cfg.model.audio["name"] == "htsat" and cfg.model.text["name"] == "bert"
    assert cfg.model.embed_dim == 512 and cfg.model.text["max_length"] == 30
    assert (cfg.train.batch_size, cfg.optim.lr, cfg.train.epochs) == (128, 5e-5, 40)  # paper §3.2
    m, c = cfg.objective.matching, cfg.objective.cmsc
    assert (m.name, m.tau_w, m.lam) == ("lgmm", 0.25, 10.0)
    assert (c.interc, c.jnt, c.intrac, c.beta) == (True, True, True, 0.3)


def test_tiny_htsat_overrides_are_the_documented_config():
    from mlatr.models.htsat import TINY_CLAP_AUDIO_CONFIG

    cfg = load_config(CONFIGS / "finegrained-clotho.yaml", tiny_overrides("htsat-bert", Path("x")))
    assert cfg.model.audio["config"] == TINY_CLAP_AUDIO_CONFIG and cfg.model.audio["path"] is None


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    from mlatr.models.hf_text import write_tiny_model

    root = tmp_path_factory.mktemp("presets")
    manifest = make_toy_manifest(root / "data", n_train=16, n_val=4, n_test=2)
    return {"manifest": manifest, "sonar": write_tiny_model("sonar", root / "sonar"),
            "bert": write_tiny_model("bert", root / "bert")}


def test_placeholder_weights_fail_clearly(toy, tmp_path):
    cfg = load_config(CONFIGS / "atri-kcl-audiocaps.yaml", [f"data.manifest={toy['manifest']}",
                                                             f"out_dir={tmp_path}", "data.languages=[eng,fra,deu]",
                                                             "train.batch_size=8"])  # the toy set has 16 clips
    with pytest.raises(MlatrError, match="CED checkpoint weights/ced-base does not exist.*huggingface-cli download"):
        Trainer(cfg)
    cfg = load_config(CONFIGS / "finegrained-audiocaps.yaml", [f"data.manifest={toy['manifest']}",
                                                                f"out_dir={tmp_path}", "train.batch_size=8"])
    with pytest.raises(MlatrError, match="laion/clap-htsat-unfused"):
        Trainer(cfg)


@pytest.mark.parametrize("name", ALL)
def test_tiny_twin_trains_two_steps(toy, tmp_path, name):
    family, folder = ("htsat-bert", toy["bert"]) if name in FINEGRAINED else ("ced-sonar", toy["sonar"])
    languages = "[eng]" if name in FINEGRAINED or name.endswith("-english") else "[eng,fra,deu]"
    cfg = load_config(CONFIGS / f"{name}.yaml", [
        *tiny_overrides(family, folder), f"data.manifest={toy['manifest']}", f"out_dir={tmp_path / 'run'}",
        f"data.languages={languages}", "train.epochs=1", "train.progress=false", "train.log_every=1",
        "train.eval_every=0", "data.max_seconds=1.0"])
    trainer = Trainer(cfg)
    audio_cls = {"ced-sonar": "CEDAudioEncoder", "htsat-bert": "HTSATAudioEncoder"}[family]
    assert type(trainer.model.audio_encoder).__name__ == audio_cls
    assert type(trainer.model.text_encoder).__name__ == "HFTextEncoder"
    before = {k: v.clone() for k, v in trainer.model.state_dict().items()}
    summary = trainer.fit()
    assert summary["steps"] == 2  # 16 clips / batch 8
    steps = [json.loads(x) for x in (tmp_path / "run" / "log.jsonl").read_text().splitlines()]
    losses = [s["loss"] for s in steps if s["type"] == "step"]
    assert len(losses) == 2 and all(torch.isfinite(torch.tensor(losses)))
    after = trainer.model.state_dict()
    assert any(not torch.equal(before[k], after[k]) for k in before if k.startswith("audio_encoder."))
    assert any(not torch.equal(before[k], after[k]) for k in before if k.startswith("text_encoder."))
    if name in SUPCLAP:
        assert any("svr_radius" in s for s in steps)


@pytest.mark.parametrize("name,published_m", [("bert", 110), ("labse", 471), ("xlmr", 279)])
def test_text_encoder_sizes_of_the_real_models(name, published_m):
    """BERT-base 110M (Devlin et al. 2019), LaBSE 471M (Feng et al. 2022), XLM-R base 279M (its model card)."""
    import transformers

    configs = {"bert": transformers.BertConfig(),
               "labse": transformers.BertConfig(vocab_size=501153),
               "xlmr": transformers.XLMRobertaConfig(vocab_size=250002, max_position_embeddings=514, type_vocab_size=1)}
    cls = transformers.XLMRobertaModel if name == "xlmr" else transformers.BertModel
    with torch.device("meta"):
        model = cls(configs[name])
    count = sum(p.numel() for p in model.parameters()) / 1e6
    assert abs(count - published_m) / published_m < 0.01, count


def test_a_mistyped_encoder_option_is_named():
    from mlatr.models.registry import build_audio_encoder, build_text_encoder

    with pytest.raises(MlatrError, match="audio encoder 'ced-base'.*'chekpoint'.*checkpoint"):
        build_audio_encoder("ced-base", chekpoint="x.pt")
    with pytest.raises(MlatrError, match="text encoder 'sonar'.*'pth'"):
        build_text_encoder("sonar", pth="weights/sonar")
    with pytest.raises(MlatrError, match="audio encoder 'htsat'.*'padd'"):
        build_audio_encoder("htsat", padd="pad")
