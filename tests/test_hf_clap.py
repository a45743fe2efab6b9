"""A transformers ClapModel folder as a ready mlatr model (``import-checkpoint --from hf-clap``): the features
equal ClapFeatureExtractor's, the embeddings ClapModel.get_audio_features / get_text_features', and the
checkpoint works in eval, index build and search. Tiny random ClapModels built from configs; no downloads."""

import json

import numpy as np
import pytest
import torch

transformers = pytest.importorskip("transformers")

from clap_folders import clap_folder  # noqa: E402
from mlatr.cli import main  # noqa: E402
from mlatr.convert.hf_clap import clap_to_mlatr  # noqa: E402
from mlatr.errors import MlatrError  # noqa: E402
from mlatr.inference.checkpoint import load_model, read_checkpoint  # noqa: E402
from mlatr.models.hf_clap import ClapFeatures  # noqa: E402
from toydata import make_toy_manifest  # noqa: E402


def test_fusion_filters_are_torchaudios_htk_filters():
    from transformers.audio_utils import mel_filter_bank

    fe = ClapFeatures(frequency_min=50, frequency_max=14_000, truncation="fusion")
    expected = mel_filter_bank(num_frequency_bins=513, num_mel_filters=64, min_frequency=50, max_frequency=14_000,
                               sampling_rate=48_000, norm=None, mel_scale="htk")
    assert torch.allclose(fe.filterbank, torch.from_numpy(expected).float(), atol=1e-6)


@pytest.mark.parametrize("truncation", ["fusion", "rand_trunc"])
@pytest.mark.parametrize("padding", ["repeatpad", "repeat", "pad"])
def test_features_equal_the_feature_extractors(truncation, padding, monkeypatch):
    """Short clips exactly; long clips with the extractor's random draws fixed to mlatr's choices (the middle
    start of each third under fusion, the first window under rand_trunc)."""
    settings = {"frequency_min": 50, "frequency_max": 14_000, "max_length_s": 1, "truncation": truncation,
                "padding": padding}
    hf = transformers.ClapFeatureExtractor(**settings)
    ours = ClapFeatures(**settings)
    monkeypatch.setattr(np.random, "choice", lambda part: part[len(part) // 2])
    monkeypatch.setattr(np.random, "randint", lambda low, high: 0)
    gen = torch.Generator().manual_seed(0)
    for seconds in (0.3, 1.0, 2.7):
        wave = 0.1 * torch.randn(int(seconds * 48_000), generator=gen)
        mel, longer = hf._get_input_mel(wave.double().numpy(), hf.nb_max_samples, truncation, padding)
        feats, is_longer, covered = ours(wave[None])
        assert feats.shape[1:] == mel.shape and bool(is_longer[0]) == (longer and truncation == "fusion")
        assert torch.allclose(feats[0], torch.from_numpy(mel).float(), atol=2e-3), seconds
    expected_cover = {"repeatpad": 0.9, "repeat": 1.0, "pad": 0.3}[padding]
    assert ours(0.1 * torch.randn(1, 14_400))[2].tolist() == pytest.approx([expected_cover])


@pytest.mark.parametrize("fusion", [True, False])
def test_embeddings_equal_get_audio_and_text_features(tmp_path, fusion):
    model, tok, fe = clap_folder(tmp_path / "clap", fusion)
    ours, report = clap_to_mlatr(tmp_path / "clap")
    assert report["temperature"] == pytest.approx(0.05) and "logit_scale_t" in report["ignored"]
    gen = torch.Generator().manual_seed(1)
    lengths = torch.tensor([48_000, 20_000, 7_000])
    wave = 0.1 * torch.randn(3, 48_000, generator=gen) * (torch.arange(48_000)[None] < lengths[:, None])
    inputs = fe([w[:n].double().numpy() for w, n in zip(wave, lengths.tolist(), strict=True)], return_tensors="pt",
                sampling_rate=48_000)
    is_longer = torch.zeros(3, 1, dtype=torch.bool)  # none is longer than the window (the extractor draws one)
    captions = ["a dog barks", "rain on a roof", "un chien aboie près de la fenêtre"]
    text_inputs = tok(captions, padding=True, return_tensors="pt")
    with torch.no_grad():
        ref_audio = model.get_audio_features(input_features=inputs["input_features"].float(),
                                             is_longer=is_longer).pooler_output
        ref_text = model.get_text_features(**text_inputs).pooler_output
        audio = ours.encode_audio(wave, lengths).pooled
        text = ours.encode_text(captions, ["eng", "eng", "fra"]).pooled
    assert torch.allclose(audio, ref_audio, atol=1e-4)
    assert torch.allclose(text, ref_text, atol=1e-5)
    assert float(ours.temperature) == pytest.approx(1 / model.logit_scale_a.exp().item(), rel=1e-5)


def test_cli_import_works_for_eval_index_and_search(tmp_path, capsys):
    clap_folder(tmp_path / "clap", fusion=False)
    out = tmp_path / "laion-clap.pt"
    assert main(["import-checkpoint", "--from", "hf-clap", str(tmp_path / "clap"), "-o", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "truncation rand_trunc" in printed and f"wrote {out}" in printed
    ckpt = read_checkpoint(out)
    assert ckpt["source"]["from"] == "hf-clap"
    assert ckpt["train_config"]["data"]["sample_rate"] == 48_000
    assert ckpt["train_config"]["data"]["eval_max_seconds"] == 1.0
    reference, _ = clap_to_mlatr(tmp_path / "clap")
    loaded = load_model(out)
    wave = 0.1 * torch.randn(2, 30_000)
    with torch.no_grad():
        assert torch.allclose(loaded.model.encode_audio(wave).pooled, reference.encode_audio(wave).pooled)
        assert torch.allclose(loaded.model.encode_text(["a bell"]).pooled, reference.encode_text(["a bell"]).pooled)

    manifest = make_toy_manifest(tmp_path / "toy", n_train=4, n_val=2, n_test=3, languages=("eng", "fra"))
    assert main(["eval", "--checkpoint", str(out), "--manifest", str(manifest), "--split", "test",
                 "--languages", "eng,fra", "--json", str(tmp_path / "m.json")]) == 0
    metrics = json.loads((tmp_path / "m.json").read_text())
    assert set(metrics["t2a"]) == {"eng", "fra", "avg"} and "mrv" in metrics["consistency"]
    index = tmp_path / "lib.idx.npz"
    assert main(["index", "build", "--checkpoint", str(out), "--manifest", str(manifest), "-o", str(index),
                 "--no-progress"]) == 0
    assert np.load(index, allow_pickle=False)["embeddings"].shape[1] == 12
    capsys.readouterr()
    assert main(["search", str(index), "a tone", "--lang", "eng"]) == 0
    assert capsys.readouterr().out.strip()


def test_a_folder_that_is_no_clap_model_is_refused(tmp_path):
    from mlatr.models.hf_text import write_tiny_model

    write_tiny_model("bert", tmp_path / "bert")
    with pytest.raises(MlatrError, match="model_type: .bert., not clap"):
        clap_to_mlatr(tmp_path / "bert")
    with pytest.raises(MlatrError, match="does not exist"):
        clap_to_mlatr(tmp_path / "nothing")
