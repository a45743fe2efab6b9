"""ATRI Appendix C's t-SNE view: which rows are drawn, that t-SNE keeps each clip's captions together when
they are together, and the figure from mlatr eval-embeddings / eval (with --compare) and eval-demo."""

import numpy as np
import pytest
import torch

from mlatr.audio.io import load_audio
from mlatr.cli import main
from mlatr.data.manifest import Manifest
from mlatr.errors import MlatrError
from mlatr.evaluation import tsne
from mlatr.evaluation.synthetic import structured_embeddings
from mlatr.evaluation.tsne import embed_2d, plot_tsne_arrays, same_clip_neighbours, select_rows, view_from_arrays
from mlatr.inference.checkpoint import read_checkpoint, save_checkpoint
from mlatr.models import DualEncoder
from mlatr.training.trainer import Trainer
from toydata import make_toy_manifest, tiny_config

pytest.importorskip("sklearn")


def _png_size(path):
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")


def test_select_rows_picks_clips_and_their_fullest_caption_group():
    # clip 0: group 0 in eng+fra, group 1 in eng+fra+deu; clip 1: groups 2, 3 tie (eng+deu); clip 2: no caption
    text_audio = np.array([0, 0, 0, 0, 0, 1, 1, 1, 1, 3])
    text_lang = np.array(["fra", "eng", "deu", "eng", "fra", "eng", "eng", "deu", "deu", "eng"])
    text_group = np.array([0, 0, 1, 1, 1, 2, 3, 3, 2, 4])
    sel = select_rows(text_audio, text_lang, text_group, n_audio=4, n_clips=50)
    assert sel.clips.tolist() == [0, 1, 3]  # every clip with a caption, in order; clip 2 has none
    assert [t.tolist() for t in sel.texts] == [[3, 4, 2], [5, 8], [9]]  # eng, fra, deu order; tie -> group 2
    few = select_rows(text_audio, text_lang, text_group, n_audio=4, n_clips=2, seed=1)
    assert len(few.clips) == 2 and set(few.clips) <= {0, 1, 3}
    assert few.clips.tolist() == select_rows(text_audio, text_lang, text_group, 4, 2, seed=1).clips.tolist()


def test_tsne_keeps_each_clips_captions_together():
    arrays = structured_embeddings(n_clips=40, seed=0, language_shift=0.05,
                                   language_noise=dict.fromkeys(["eng", "fra", "deu", "spa", "nld", "cat", "jpn",
                                                                  "zho"], 0.05), sigma_caption=0.05, missing_fraction=0)
    sel = select_rows(arrays["text_audio"], arrays["text_lang"], arrays["text_group"], 40, n_clips=14)
    view = view_from_arrays("x", arrays["audio"], arrays["text"], arrays["text_lang"], sel)
    xy = embed_2d(view)
    assert xy.shape == (14 + 14 * 8, 2)
    text_xy = xy[14:]
    dist = ((text_xy[:, None] - text_xy[None]) ** 2).sum(-1)
    np.fill_diagonal(dist, np.inf)
    same = view.text_clip[dist.argmin(1)] == view.text_clip  # nearest caption in 2-D describes the same clip
    assert same.mean() > 0.95
    # the same question in the model's own space, as the panel titles report it
    cos = view.text @ view.text.T / np.outer(np.linalg.norm(view.text, axis=1), np.linalg.norm(view.text, axis=1))
    np.fill_diagonal(cos, -2)
    assert same_clip_neighbours(view) == pytest.approx(np.mean(view.text_clip[cos.argmax(1)] == view.text_clip))
    assert same_clip_neighbours(view) > 0.95
    assert np.array_equal(embed_2d(view), xy)  # fixed random_state: the same picture every time


def test_eval_embeddings_plot_and_compare(tmp_path, monkeypatch):
    arrays = {}
    for name, shift in (("mlclap", 0.4), ("kcl", 0.05)):
        arrays[name] = structured_embeddings(n_clips=30, seed=0, language_shift=shift)
        np.savez(tmp_path / f"{name}.npz", **arrays[name])
    out = tmp_path / "plots"
    assert main(["eval-embeddings", str(tmp_path / "kcl.npz"), "--plot", str(out), "--tsne-clips", "8"]) == 0
    w1, h1 = _png_size(out / "tsne.png")
    assert w1 > h1 > 300
    drawn = {}
    monkeypatch.setattr(tsne, "plot_tsne", lambda views, path, seed=0: drawn.setdefault("views", views) and path)
    assert main(["eval-embeddings", str(tmp_path / "kcl.npz"), "--plot", str(out), "--tsne-clips", "8",
                 "--compare", str(tmp_path / "mlclap.npz")]) == 0
    kcl, mlclap = drawn["views"]  # two panels, the same rows of each file
    assert (kcl.name, mlclap.name) == ("kcl", "mlclap") and kcl.audio.shape == (8, 64)
    sel = select_rows(arrays["kcl"]["text_audio"], arrays["kcl"]["text_lang"], arrays["kcl"]["text_group"], 30, 8)
    assert np.array_equal(mlclap.audio, arrays["mlclap"]["audio"][sel.clips])
    assert np.array_equal(mlclap.text, arrays["mlclap"]["text"][sel.text_rows])
    assert np.array_equal(kcl.text, arrays["kcl"]["text"][sel.text_rows])
    np.savez(tmp_path / "other.npz", **structured_embeddings(n_clips=31, seed=0))
    with pytest.raises(MlatrError, match="same clips and captions"):
        plot_tsne_arrays({"a": dict(np.load(tmp_path / "kcl.npz")), "b": dict(np.load(tmp_path / "other.npz"))},
                         out / "x.png")
    assert main(["eval-embeddings", str(tmp_path / "kcl.npz"), "--compare", str(tmp_path / "mlclap.npz")]) == 2


def test_eval_compare_encodes_the_same_clips_with_the_second_checkpoint(tmp_path, monkeypatch):
    manifest = make_toy_manifest(tmp_path / "toy", n_train=8, n_val=2, n_test=6)
    ckpts = []
    for seed in (0, 1):  # two untrained tiny models: different random weights, same architecture
        trainer = Trainer(tiny_config(manifest, tmp_path / f"run{seed}", f"seed={seed}"))
        ckpts.append(tmp_path / f"m{seed}.pt")
        save_checkpoint(ckpts[-1], trainer.state())
    drawn = {}

    def capture(views, path, seed=0, title=""):
        drawn["views"] = views
        return path

    monkeypatch.setattr(tsne, "plot_tsne", capture)
    assert main(["eval", "--checkpoint", str(ckpts[0]), "--manifest", str(manifest), "--plot", str(tmp_path / "p"),
                 "--compare", str(ckpts[1]), "--tsne-clips", "4", "--max-seconds", "2"]) == 0
    first, second = drawn["views"]
    assert first.name == "m0.pt" or first.name.endswith("/m0.pt")
    assert first.audio.shape[0] == second.audio.shape[0] == 4
    assert first.text_lang.tolist() == second.text_lang.tolist() == ["eng", "fra", "deu"] * 4
    # the second panel holds the second model's own embeddings of the same clips
    test = Manifest.load(manifest).split("test")
    state = read_checkpoint(ckpts[1])
    model = DualEncoder.from_config(state["model_config"])
    model.load_state_dict(state["model"])
    model.eval()
    sel = select_rows(*(np.array(x) for x in _caption_arrays(test)), n_audio=len(test), n_clips=4)
    with torch.no_grad():
        for k, row in enumerate(sel.clips):
            wave = torch.from_numpy(load_audio(test[row].audio_path(test.root), 16000)[: 2 * 16000])[None]
            own = model.encode_audio(wave).pooled[0].numpy()
            assert np.allclose(second.audio[k], own, atol=1e-5)
            assert not np.allclose(first.audio[k], own, atol=1e-3)


def _caption_arrays(manifest):
    arrays = manifest.caption_arrays(["eng", "fra", "deu"])
    return arrays["text_audio"], arrays["text_lang"], arrays["text_group"]
