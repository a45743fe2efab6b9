"""Real-sound runs on generated clips: the evaluation views, leave-one-library-out folds, the runner, the demo.

No Debian package, no aisfx and no real text model: a stand-in audio backbone, hashed text vectors.
"""

import hashlib
import json
import shutil

import numpy as np
import pytest
import torch

import mlatr.lab.experiments.real_heads as real_heads
from mlatr.cli import main
from mlatr.commands.demo_real import closing_lines
from mlatr.data.manifest import Clip, Manifest
from mlatr.errors import MlatrError
from mlatr.lab.experiments import real_sounds, unseen_library
from mlatr.lab.experiments.head_options import HEAD_OPTIONS
from mlatr.lab.experiments.head_recipe import HeadRecipe, train_recipe
from mlatr.lab.experiments.real_heads import RealSounds, build_model, evaluate_clips, text_space
from mlatr.lab.experiments.relevance_fit import RANKINGS
from mlatr.search.index import Index
from mlatr.training.run_curves import read_curves, run_folders
from mlatr.training.run_log import read_run_log
from mlatr.translation import ApertiumBackend
from mlatr.translation.apertium_backend import installed_modes

LANGS = ["eng", "fra"]
QUERIES = [{"id": "dog", "keywords": ["dog"], "captions": {"eng": "a dog", "fra": "un chien"}},
           {"id": "door", "keywords": ["door"], "captions": {"eng": "a door", "fra": "une porte"}},
           {"id": "rain", "keywords": ["rain"], "captions": {"eng": "rain", "fra": "la pluie"}}]
SOUNDS = [("a dog barking", "animal"), ("a door closing", "door"), ("a dog growling", "animal"),
          ("a door opening", "door"), ("a bell", None), ("a whistle", None)]


class HashBackend:
    """Stand-in sentence encoder: a unit vector from the text's hash (the same text, the same vector)."""

    dim = 16

    def __init__(self, *_):
        pass

    def embed(self, texts):
        out = []
        for t in texts:
            rng = np.random.default_rng(int.from_bytes(hashlib.sha256(t.encode()).digest()[:4], "big"))
            v = rng.standard_normal(self.dim)
            out.append(v / np.linalg.norm(v))
        return np.asarray(out, np.float32)


class StubAudio(torch.nn.Module):
    output_dim = 16

    def config(self):
        return {"name": "small-cnn"}


def make_data(n_libraries=3, audio_from_text=True):
    clips, feats = [], []
    backend = HashBackend()
    for lib in range(n_libraries):
        for k, (caption, label) in enumerate(SOUNDS):
            split = ("train", "val", "test")[k % 3] if k < 3 else ("train", "test", "train")[k % 3]
            clips.append(Clip(id=f"lib{lib}/s{k}", audio=f"lib{lib}/s{k}.wav", captions={"eng": [caption]},
                              split=split, labels=[label] if label else []))
            feats.append(backend.embed([caption])[0] if audio_from_text else np.ones(16, np.float32))
    translations = {"animal": {"fra": "animal"}, "door": {"fra": "porte"}}
    return RealSounds(Manifest(clips=clips), np.asarray(feats, np.float32), QUERIES, LANGS, translations, StubAudio())


def fake_text_space(name, data, cache_dir):
    return text_space(name, data, cache_dir, backend_factory=HashBackend)


class Identity(torch.nn.Module):
    """Heads that are identities: audio features equal to their caption's text vector retrieve perfectly."""

    def __init__(self):
        super().__init__()
        self.audio_projection = torch.nn.Identity()
        self.text_projection = torch.nn.Identity()


def test_evaluate_clips_on_a_space_where_every_answer_is_known(tmp_path):
    data = make_data(n_libraries=1)
    _, bank = fake_text_space("e5-small", data, tmp_path)
    res = evaluate_clips(Identity(), data, bank, list(range(6)))
    assert res["captions"]["t2a"]["R1"] == 100.0 and res["captions"]["a2t"]["R1"] == 100.0
    assert res["captions"]["chance"]["t2a"]["R1"] == pytest.approx(100 / 6)
    q = res["queries"]
    assert q["n_queries"] == 2 and q["n_clips"] == 4  # no clip is relevant to "rain"; bell and whistle to none
    # chance t2a R@1 of a query with 2 relevant clips among 6: 1 - C(4,1)/C(6,1) = 1/3
    assert q["chance"]["t2a"]["R1"] == pytest.approx(100 / 3)
    assert q["chance"]["a2t"]["R1"] == pytest.approx(50.0)  # one relevant query of two
    z = res["zero_shot"]
    assert z["classes"] == ["animal", "door"] and z["n_clips"] == 4 and z["chance"]["top1"] == 50.0
    assert set(z) >= {"eng", "fra", "avg"}


def test_folds_hold_out_each_library_and_keep_the_in_library_split():
    data = make_data()
    f = unseen_library.folds(data)
    assert list(f) == ["lib0", "lib1", "lib2", "in-library"]
    assert f["lib1"]["test"] == list(range(6, 12))
    assert not set(f["lib1"]["train"]) & set(range(6, 12))
    assert all(data.manifest.clips[i].split == "val" for i in f["lib1"]["val"])
    assert f["in-library"]["test"] == [i for i, c in enumerate(data.manifest.clips) if c.split == "test"]
    with pytest.raises(MlatrError, match="nowhere"):
        unseen_library.folds(data, ["nowhere"])


def test_audio_only_heads_keep_the_text_space_and_train(tmp_path):
    data = make_data()
    text_enc, bank = fake_text_space("e5-small", data, tmp_path)
    trained = train_recipe(HeadRecipe("audio-only", epochs=3, batch_size=4, lr=1e-2, embed_dim=8), data, text_enc,
                           bank, list(range(12)), [12, 13, 14], seed=0)
    model, (log,) = trained.model, trained.logs
    assert model.embed_dim == 16 and isinstance(model.text_projection, torch.nn.Module)
    x = bank.vectors[:3]
    assert torch.equal(model.text_projection(x), x)  # still the identity after training
    assert len(log) == 3 and log[-1]["loss"] < log[0]["loss"] and trained.seeds == [0]
    untrained = train_recipe(HeadRecipe("random", untrained=True), data, text_enc, bank, [0, 1], [], seed=0)
    assert untrained.logs == [[]]
    with pytest.raises(MlatrError, match="--heads: random is not a trained head option"):
        HeadRecipe("random")
    with pytest.raises(MlatrError, match="--ensemble must be in 1..64"):
        HeadRecipe("audio-only", ensemble=65)


def test_the_runner_writes_every_fold_resumes_and_picks_a_trained_best(tmp_path, monkeypatch):
    data = make_data()
    monkeypatch.setattr(RealSounds, "load", classmethod(lambda cls, *a, **k: data))
    monkeypatch.setattr(unseen_library, "text_space", fake_text_space)
    written, train = [], unseen_library.train_recipe

    def checkpointed(*args):  # a trained fold leaves last.pt until its results are recorded
        trained = train(*args)
        written.append(bool(trained.logs[0]) and (args[7] / "0" / "last.pt").is_file())
        return trained

    monkeypatch.setattr(unseen_library, "train_recipe", checkpointed)
    res = unseen_library.run_unseen_library("m.jsonl", tmp_path / "out", ["e5-small"], ["random", "audio-only"],
                                            epochs=2, batch_size=4, progress=False)
    assert written.count(True) == 4  # the four audio-only folds
    assert set(res["runs"]["e5-small/audio-only"]["folds"]) == {"lib0", "lib1", "lib2", "in-library"}
    assert res["best"] == "e5-small/audio-only"
    u = res["runs"]["e5-small/random"]["unseen"]
    folds = res["runs"]["e5-small/random"]["folds"]
    expected = np.mean([folds[f]["queries"]["t2a"]["fra"]["R10"] for f in ("lib0", "lib1", "lib2")])
    assert u["queries"]["t2a"]["fra"]["R10"] == pytest.approx(expected) and u["libraries"] == 3
    report = (tmp_path / "out" / "report.md").read_text(encoding="utf-8")
    assert "| chance |" in report and "e5-small/audio-only" in report
    # text search with the library's metadata, cross-fitted on the kept fold embeddings: the audio ranking
    # does not depend on the names, and every ranking is measured on every held-out library
    ts = res["runs"]["e5-small/audio-only"]["text_search"]
    assert set(ts["libraries"]) == {"lib0", "lib1", "lib2"}
    for fold in ("lib0", "lib1", "lib2"):
        assert (tmp_path / "out" / "embeddings" / "e5-small" / "audio-only" / f"{fold}.npz").is_file()
        lib = ts["libraries"][fold]
        assert lib["meaningless"]["audio"] == lib["names"]["audio"]
        assert set(lib["names"]) == set(RANKINGS)
    assert 0.0 <= ts["calibration"]["ece_shown"] <= 1.0
    assert "## Text search with the library's own names: e5-small/audio-only" in report
    assert "| names / default (fused) | R@10 |" in report and "| meaningless / captions only | R@1 |" in report
    # calibrating a model of the recipe is one command: it stores, in the model, a calibration for its weights
    from mlatr.inference.checkpoint import read_checkpoint, save_checkpoint
    from mlatr.inference.model_identity import weights_sha256
    from mlatr.lab.experiments import relevance_fit
    from mlatr.search.relevance import Calibration

    model = build_model(data, fake_text_space("e5-small", data, tmp_path / "out" / "cache")[0],
                        HEAD_OPTIONS["audio-only"], 16, 0)
    save_checkpoint(tmp_path / "m.pt", {"model_config": model.config(), "model": model.state_dict()})
    assert "calibration" not in read_checkpoint(tmp_path / "m.pt")
    relevance_fit.calibrate_command(tmp_path / "out" / "embeddings" / "e5-small" / "audio-only", "m.jsonl",
                                    tmp_path / "out" / "cache", tmp_path / "cal", model=tmp_path / "m.pt")
    stored = read_checkpoint(tmp_path / "m.pt")
    cal = Calibration.from_dict(stored["calibration"])
    assert cal.weights_sha256 == weights_sha256(stored["model"]) and cal.fitted["units"] == ["lib0", "lib1", "lib2"]
    assert cal.answer.kind == "linear" and cal.text.kind == "logistic" and cal.classify["temperature"] > 0
    assert set(cal.abstention) >= {"margin", "nonsense_missed", "false_abstention", "nonsense_seed"}
    assert (tmp_path / "cal" / "reliability.png").read_bytes()[:4] == b"\x89PNG"
    assert (tmp_path / "cal" / "nothing-relevant-tradeoff.png").read_bytes()[:4] == b"\x89PNG"
    assert "nothing relevant" in (tmp_path / "cal" / "report.md").read_text(encoding="utf-8")
    assert (tmp_path / "out" / "unseen-recall-by-language.png").stat().st_size > 0
    assert not (tmp_path / "out" / "heads").exists()  # every fold recorded: no head checkpoint is kept
    calls = []
    monkeypatch.setattr(unseen_library, "train_recipe", lambda *a, **k: calls.append(1))
    again = unseen_library.run_unseen_library("m.jsonl", tmp_path / "out", ["e5-small"], ["random", "audio-only"],
                                              epochs=2, batch_size=4, progress=False)
    assert calls == [] and again["runs"].keys() == res["runs"].keys()
    with pytest.raises(MlatrError, match="--heads: unknown best; known: random, both-heads"):
        unseen_library.run_unseen_library("m.jsonl", tmp_path / "o2", ["e5-small"], ["best"], progress=False)


def test_demo_real_trains_the_chosen_heads_and_indexes_the_library(tmp_path, monkeypatch):
    data = make_data()
    monkeypatch.setattr(RealSounds, "load", classmethod(lambda cls, *a, **k: data))
    monkeypatch.setattr(real_sounds, "text_space", fake_text_space)
    for clip in data.manifest.clips:  # the index stores absolute audio paths
        (tmp_path / clip.audio).parent.mkdir(parents=True, exist_ok=True)
    data.manifest.root = tmp_path
    (tmp_path / "licences.json").write_text(json.dumps({"format": "mlatr-sound-licences-1", "refused": [], "packages": [
        {"package": "lib0-data", "version": "1", "library": "lib0", "clips": 6, "licences": ["CC0-1.0"],
         "holders": ["2020 A | B"], "copyright": "copyright/lib0-data"}]}))
    (tmp_path / "demo").mkdir()
    (tmp_path / "demo" / "log.jsonl").write_text('{"type": "epoch", "epoch": 1, "step": 1}\n')  # an older demo's
    res = real_sounds.run_real_demo(tmp_path / "m.jsonl", tmp_path / "demo", ["e5-small"], heads="near-identity",
                                    epochs=2, progress=False, unseen_epochs=2, added_groups=2, ensemble=2,
                                    workers=2)
    assert not (tmp_path / "demo" / "log.jsonl").exists()
    assert list(res["runs"]) == ["e5-small/random", "e5-small/near-identity"]
    assert res["index"]["clips"] == len(data.manifest) and res["index"]["heads"] == "near-identity"
    saved = json.loads((tmp_path / "demo" / "results.json").read_text(encoding="utf-8"))
    assert saved["settings"]["heads"] == "near-identity" and saved["settings"]["ensemble"] == 2
    report = (tmp_path / "demo" / "report.md").read_text(encoding="utf-8")
    assert "Hand-written multilingual queries" in report
    unseen = res["unseen"]  # lib0-2 are all added libraries: held out in 2 hash groups, never the 12 original ones
    assert unseen["groups"]["original"] == {"libraries": 0} and 1 <= unseen["groups"]["added"]["libraries"] <= 2
    assert "## Libraries never trained on" in report and "| added |" in report
    assert "| lib0-data | 1 | lib0 | 6 | CC0-1.0 | 2020 A / B |" in report and res["seconds"] > 0
    card = (tmp_path / "demo" / "model-card.md").read_text(encoding="utf-8")  # the model's card: data, licences
    assert "| lib0-data | 1 | lib0 | 6 | CC0-1.0 | 2020 A / B |" in card and "## Libraries never trained on" in card
    assert f"({res['clips']['train']} clips;" in card and "heads `near-identity`" in card
    assert "2 such head pairs trained apart (seeds 0, 1)" in card
    assert "InfoNCE (tau 0.07) on the English captions" in card
    figure = tmp_path / "demo" / "query-recall-by-language.png"
    assert res["figure"] == str(figure) and figure.read_bytes()[:4] == b"\x89PNG"
    closing = closing_lines(res, tmp_path / "demo").splitlines()
    assert closing[0].endswith("model.pt") and closing[1].endswith(f"sounds.idx ({len(data.manifest)} clips)")
    assert closing[-1].startswith(f"next:   mlatr search {tmp_path / 'demo' / 'sounds.idx'} ")
    # the index is the current format (a folder of shards), searchable, with every clip
    index = Index.load(tmp_path / "demo" / "sounds.idx")
    assert index.summary()["format"] == "mlatr-index-2" and list(index.ids) == [c.id for c in data.manifest.clips]
    assert not (tmp_path / "demo" / "sounds.idx.npz").exists()
    # each head pair's training curve: one epoch record per epoch of its log; mlatr plot draws both
    members = res["runs"]["e5-small/near-identity"]["members"]
    assert [m["seed"] for m in members] == [0, 1] and res["runs"]["e5-small/random"]["members"] == []
    for k, member in enumerate(members):
        log = member["log"]
        steps, epochs = read_run_log(tmp_path / "demo" / "members" / str(k) / "log.jsonl")
        assert steps == [] and [e["epoch"] for e in epochs] == [1, 2] and epochs[-1]["step"] > epochs[0]["step"] > 0
        assert [e["train_loss"] for e in epochs] == [r["loss"] for r in log]
        curves = read_curves(tmp_path / "demo" / "members" / str(k))
        assert curves.losses["loss"] == ([e["step"] for e in epochs], [r["loss"] for r in log])
        assert curves.val == {"val t2a R@10 (%)": ([1, 2], [r["val"] for r in log])}
    assert members[0]["log"] != members[1]["log"]
    assert run_folders([tmp_path / "demo"]) == [tmp_path / "demo" / "members" / k for k in ("0", "1")]
    assert main(["plot", str(tmp_path / "demo")]) == 0 and (tmp_path / "demo" / "curves.png").stat().st_size > 0
    # the unseen run trained the same ensemble
    unseen_settings = json.loads((tmp_path / "demo" / "unseen" / "results.json").read_text())["settings"]
    assert unseen_settings["ensemble"] == 2
    # the saved model is the two pairs, each exactly the single-pair demo of its seed (seed 0: member 0)
    single = real_sounds.run_real_demo(tmp_path / "m.jsonl", tmp_path / "one", ["e5-small"], heads="near-identity",
                                       epochs=2, progress=False, ensemble=1)
    assert single["runs"]["e5-small/near-identity"]["members"][0]["log"] == members[0]["log"]
    pair = torch.load(tmp_path / "demo" / "model.pt", weights_only=False)
    one = torch.load(tmp_path / "one" / "model.pt", weights_only=False)
    assert pair["model_config"]["ensemble"] == 2 and "ensemble" not in one["model_config"]
    for side in ("audio_projection", "text_projection"):
        for key, value in one["model"].items():
            if key.startswith(side):
                member0 = key.replace(side, f"{side}.members.0")
                assert torch.equal(pair["model"][member0], value), key
                assert not torch.equal(pair["model"][key.replace(side, f"{side}.members.1")], value), key
    assert [p.name for p in (tmp_path / "one" / "members").iterdir()] == ["0"]
    with pytest.raises(MlatrError, match="trained head option"):
        real_sounds.run_real_demo("m.jsonl", tmp_path / "d2", ["e5-small"], heads="random")


def test_demo_real_translates_english_captions_for_a_kcl_recipe_and_indexes_its_own(tmp_path, monkeypatch):
    """A head option that trains on several caption languages, on an English-only manifest: the demo translates the
    captions with Apertium (cached), trains on English, Spanish and Catalan, and indexes the manifest's own captions."""
    if shutil.which("apertium") is None or not {"eng-spa", "eng-cat"} <= set(installed_modes()):
        pytest.skip("apertium eng-spa / eng-cat not installed (scripts/setup-system.sh installs them as root)")
    data = make_data(n_libraries=2)
    monkeypatch.setattr(RealSounds, "load", classmethod(lambda cls, *a, **k: data))
    monkeypatch.setattr(real_sounds, "text_space", fake_text_space)
    data.manifest.root = tmp_path
    seen, train = [], real_sounds.train_recipe
    monkeypatch.setattr(real_sounds, "train_recipe", lambda recipe, d, *a, **k: (
        recipe.option.trained and seen.append(d)) or train(recipe, d, *a, **k))
    real_sounds.run_real_demo(tmp_path / "m.jsonl", tmp_path / "demo", ["e5-small"], heads="near-identity-kcl",
                              epochs=1, progress=False, ensemble=1)
    (trained,) = seen
    assert trained.caption_languages() == ["eng", "cat", "spa"]
    backend = ApertiumBackend()
    for clip, mine in zip(data.manifest.clips, trained.manifest.clips, strict=True):
        assert clip.captions == {"eng": clip.captions["eng"]} and mine.captions["eng"] == clip.captions["eng"]
        for lang in ("spa", "cat"):  # what Apertium itself gives for each caption
            assert mine.captions[lang] == backend.translate_batch(clip.captions["eng"], "eng", lang), (clip.id, lang)
    card = (tmp_path / "demo" / "model-card.md").read_text(encoding="utf-8")
    assert "KCL (ATRI eq. 9, tau 0.07) over the captions in eng, cat, spa (spa, cat translated from English by " \
           "Apertium)" in card
    index = Index.load(tmp_path / "demo" / "sounds.idx")
    assert [caps for caps in index.captions] == [c.captions for c in data.manifest.clips]  # English only
    # a second run finds every translation in the cache: Apertium is not run again
    monkeypatch.setattr(ApertiumBackend, "translate_batch", lambda *a: pytest.fail("translated again"))
    real_sounds.run_real_demo(tmp_path / "m.jsonl", tmp_path / "demo", ["e5-small"], heads="near-identity-kcl",
                              epochs=1, progress=False, ensemble=1)
    # without Apertium the error says what to do instead
    monkeypatch.setattr(shutil, "which", lambda *a, **k: None)
    with pytest.raises(MlatrError, match="mlatr data translate.*--heads near-identity"):
        real_sounds.run_real_demo(tmp_path / "m.jsonl", tmp_path / "d3", ["e5-small"], heads="near-identity-kcl",
                                  epochs=1, progress=False, ensemble=1)


def test_head_options_use_real_heads_module_names():
    assert set(HEAD_OPTIONS) == {"random", "both-heads", "audio-only", "near-identity", "near-identity-kcl",
                                 "kcl-translations"}
    assert real_heads.library_of("scratch/Animal/Dog1") == "scratch"


def test_kcl_over_translations_needs_them_and_trains_on_every_language(tmp_path):
    data = make_data()
    text_enc, bank = fake_text_space("e5-small", data, tmp_path)
    option = HEAD_OPTIONS["kcl-translations"]
    with pytest.raises(MlatrError, match="mlatr data translate"):
        train_recipe(HeadRecipe(option.name, epochs=1, embed_dim=8), data, text_enc, bank, list(range(12)), [], 0)
    for clip in data.manifest.clips:
        clip.captions["spa"] = ["traducción de " + clip.captions["eng"][0]]
    assert data.caption_languages() == ["eng", "spa"]
    _, bank = fake_text_space("e5-small", data, tmp_path)  # the translations' features join the bank
    trained = train_recipe(HeadRecipe(option.name, epochs=2, batch_size=6, embed_dim=8), data, text_enc, bank,
                           list(range(12)), [], 0)
    assert [len(log) for log in trained.logs] == [2]


@pytest.mark.parametrize("command, flag", [(["experiment", "unseen-library"], "--text"),
                                           (["experiment", "unseen-library"], "--heads"),
                                           (["demo-real"], "--text"), (["demo-real"], "--heads")])
def test_unknown_encoder_or_head_is_refused_before_any_work(tmp_path, capsys, command, flag):
    manifest = tmp_path / "manifest.jsonl"
    manifest.write_text("")  # exists; never read
    out = tmp_path / "out"
    assert main([*command, "--manifest", str(manifest), flag, "nope", "--out", str(out)]) != 0
    assert f"{flag}: unknown nope; known: " in capsys.readouterr().err
    assert not out.exists()


def test_kept_fold_embeddings_give_the_scores_and_recall_of_the_evaluation(tmp_path):
    from mlatr.evaluation.queries import multilingual_query_eval
    from mlatr.lab.experiments.relevance_fit import _r10, load_libraries
    from mlatr.lab.experiments.text_search_eval import fold_embeddings, query_texts, save_fold_embeddings
    from mlatr.search.relevance import FEATURES

    data = make_data(n_libraries=2)
    for i, clip in enumerate(data.manifest.clips):  # file names that say what the sound is, one without words
        clip.audio = f"lib{i // 6}/fx/{['dog_bark', 'door', 'dog-growl', 'door_open', '0001', 'whistle'][i % 6]}.wav"
    _, bank = fake_text_space("e5-small", data, tmp_path)
    rows = list(range(6))
    save_fold_embeddings(tmp_path / "emb" / "lib0.npz", fold_embeddings(Identity(), data, bank, rows))
    names = [data.metadata(i, "names") for i in rows]
    assert names == ["dog bark", "door", "dog growl", "door open", "fx", "whistle"]
    lib = next(x for x in load_libraries(tmp_path / "emb", data) if x.kind == "names")
    q_text, q_lang, _ = query_texts(data)
    q = bank.lookup(q_text, q_lang).numpy()
    c = bank.lookup(names, ["eng"] * 6).numpy()
    a = data.features[rows]
    q, c, a = (x / np.linalg.norm(x, axis=1, keepdims=True) for x in (q, c, a))
    assert np.allclose(lib.captions, q @ c.T, atol=1e-5)
    assert np.allclose(lib.x[..., FEATURES.index("sound")], q @ a.T, atol=1e-5)
    keyword = lib.x[..., FEATURES.index("keyword")]
    dog = q_text.index("a dog")
    assert keyword[dog, 0] > 0 and keyword[dog, 2] > 0 and keyword[dog, 1] == 0 and keyword[dog, 4] == 0
    for scores in (lib.x[..., FEATURES.index("sound")], lib.captions):
        ev = multilingual_query_eval(lib.query_emb, lib.q_lang, lib.q_group, lib.audio_emb, lib.relevant,
                                     data.languages, scores=scores)
        assert _r10(lib, scores) == pytest.approx(ev["t2a"]["avg"]["R10"])


def test_added_libraries_are_held_out_in_groups_the_original_ones_alone():
    from types import SimpleNamespace

    from mlatr.data.manifest import Clip, Manifest
    from mlatr.lab.experiments.unseen_library import ORIGINAL_LIBRARIES, folds

    libs = ["scratch", "wesnoth", *[f"game{k}" for k in range(20)]]
    clips = [Clip(id=f"{lib}/c{j}", audio=f"{lib}/c{j}.wav", split=("val", "test", "train")[j]) for lib in libs
             for j in range(3)]
    data = SimpleNamespace(manifest=Manifest(clips=clips), libraries=[c.id.split("/")[0] for c in clips])
    grouped = folds(data, added_groups=4)
    assert {"scratch", "wesnoth"} < set(grouped) and not any(f.startswith("game") for f in grouped)
    added = [f for f in grouped if f.startswith("added-")]
    assert 1 < len(added) <= 4
    held = [data.libraries[i] for f in added for i in grouped[f]["test"]]
    assert sorted(set(held)) == sorted(f"game{k}" for k in range(20)) and len(held) == 60  # each once
    for f in added:
        test_libs = {data.libraries[i] for i in grouped[f]["test"]}
        assert test_libs.isdisjoint(data.libraries[i] for i in grouped[f]["train"] + grouped[f]["val"])
    assert set(folds(data)) == {*libs, "in-library"} and "scratch" in ORIGINAL_LIBRARIES


def test_validation_libraries_are_held_out_whole_and_the_same_in_every_fold():
    from types import SimpleNamespace

    from mlatr.data.manifest import Clip, Manifest
    from mlatr.lab.experiments.unseen_library import folds, validation_libraries

    libs = ["scratch", "wesnoth", *[f"game{k}" for k in range(30)]]
    clips = [Clip(id=f"{lib}/c{j}", audio=f"{lib}/c{j}.wav", split=("val", "test", "train")[j]) for lib in libs
             for j in range(3)]
    data = SimpleNamespace(manifest=Manifest(clips=clips), libraries=[c.id.split("/")[0] for c in clips])
    grouped = folds(data, added_groups=4, val_libraries=0.2)
    held = validation_libraries(set(libs), 0.2)
    assert 2 <= len(held) <= 12  # about a fifth of 32
    for fold, rows in grouped.items():
        if fold == "in-library":
            assert rows["val"] == [i for i, c in enumerate(clips) if c.split == "val"]  # the hash split, as before
            continue
        test_libs = {data.libraries[i] for i in rows["test"]}
        val_libs = {data.libraries[i] for i in rows["val"]}
        assert val_libs == held - test_libs  # the same libraries in every fold, unless held out for the test
        assert len(rows["val"]) == 3 * len(val_libs)  # whole: all three splits of each
        assert val_libs.isdisjoint(data.libraries[i] for i in rows["train"]) and val_libs.isdisjoint(test_libs)
        assert len(rows["train"]) + len(rows["val"]) + len(rows["test"]) == len(clips)
    assert validation_libraries({"a", "b", "c"}, 0.0001) and len(validation_libraries({"a", "b"}, 0.0001)) == 1
    with pytest.raises(MlatrError, match="none would be left"):
        validation_libraries({"a", "b"}, 1.0)


def test_a_translated_reading_of_fold_embeddings_kept_without_translations_is_refused(tmp_path):
    from mlatr.lab.experiments.relevance_fit import load_libraries
    from mlatr.lab.experiments.text_search_eval import fold_embeddings, save_fold_embeddings

    data = make_data(n_libraries=2)
    _, bank = fake_text_space("e5-small", data, tmp_path)
    save_fold_embeddings(tmp_path / "emb" / "lib0.npz", fold_embeddings(Identity(), data, bank, list(range(6))))
    assert load_libraries(tmp_path / "emb", data)  # untranslated: read as they are
    with pytest.raises(MlatrError, match=r"lib0\.npz: kept without the queries' translations"):
        load_libraries(tmp_path / "emb", data, translate=True)


def test_the_text_space_translates_the_queries_as_a_search_does(tmp_path, monkeypatch):
    """Where a translator has the pair, the queries' English translations are made before the bank embeds its texts
    (so kept fold embeddings carry them); where none is installed, nothing is translated."""
    from mlatr.lab.experiments import real_heads

    class French:  # a QueryTranslator with only the fra -> eng pair
        def translate(self, texts, source, target):
            return [f"english of {t}" if source == "fra" and target == "eng" else None for t in texts]

    monkeypatch.setattr(real_heads, "installed_translator", lambda cache: French())
    data = make_data(n_libraries=1)
    _, bank = fake_text_space("e5-small", data, tmp_path / "a")
    assert data.query_translations == {("fra", q["captions"]["fra"]): f"english of {q['captions']['fra']}"
                                       for q in QUERIES}
    vectors = bank.lookup(["english of un chien"], ["eng"])  # embedded: the bank knows it
    assert np.allclose(vectors.numpy()[0], HashBackend().embed(["english of un chien"])[0], atol=1e-6)
    monkeypatch.setattr(real_heads, "installed_translator", lambda cache: None)
    data = make_data(n_libraries=1)
    fake_text_space("e5-small", data, tmp_path / "b")
    assert data.query_translations == {}
