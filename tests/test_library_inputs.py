"""One library, given any way (a folder, a manifest, sound files, webdataset shards), to any door (mlatr embed,
mlatr classify, mlatr index build; LoadedModel.embed_library / embed_audio / classify, mlatr.Index.build): the
same clips, the same ids (relative to the library's root) and the same embeddings."""

import json
import shutil

import numpy as np
import pytest

import mlatr
from clitools import assert_user_error, run_cli, write_tone
from mlatr.data.manifest import Manifest
from mlatr.search.index import Index

pytest.importorskip("webdataset")


@pytest.fixture(scope="module")
def library(tmp_path_factory, served_toy):
    """A folder of six tones in two subfolders, its manifest (data import), its shards (data export) and the toy
    model; (folder, manifest, shards, model)."""
    from mlatr.cli import main

    root = tmp_path_factory.mktemp("library")
    folder = root / "my-sounds"
    for i in range(3):
        write_tone(folder / "low" / f"hum-{i}.wav", 0.5 + 0.25 * i)
        write_tone(folder / "high" / f"beep-{i}.wav", 0.75)
    (folder / "high" / "beep-0.txt").write_text("a short beep\n", encoding="utf-8")
    manifest = root / "my-sounds.jsonl"
    assert main(["data", "import", "--format", "folder", str(folder), "-o", str(manifest)]) == 0
    assert main(["data", "export", "--format", "webdataset", str(manifest), "-o", str(root / "shards" / "s-%06d.tar"),
                 "--maxcount", "4", "--no-progress"]) == 0
    return folder, manifest, root / "shards", served_toy[1]


IDS = ["high/beep-0", "high/beep-1", "high/beep-2", "low/hum-0", "low/hum-1", "low/hum-2"]


def _embedded(capsys, tmp_path, name, *inputs):
    r = run_cli(capsys, "embed", *inputs, "-o", tmp_path / f"{name}.npz", "--no-progress")
    assert r.code == 0, r.err
    with np.load(tmp_path / f"{name}.npz") as z:
        return list(z["ids"]), z["embeddings"]


def test_every_form_of_a_library_gives_the_same_ids_and_embeddings(library, tmp_path, capsys, monkeypatch):
    folder, manifest, shards, model_path = library
    monkeypatch.setenv("MLATR_MODEL", str(model_path))
    files = sorted(str(p) for p in folder.rglob("*.wav"))
    forms = {"folder": [folder], "manifest": [manifest], "files": files, "shards": [shards],
             "shard range": [f"{shards}/s-{{000000..000001}}.tar"], "mixed": [folder / "high", *files[3:]]}
    results = {name: _embedded(capsys, tmp_path, name.replace(" ", "-"), *items) for name, items in forms.items()}
    ids, emb = results["folder"]
    assert ids == IDS
    for name, (got_ids, got) in results.items():
        if name == "mixed":  # the folder high/ has its own root: its ids lose the folder's name
            assert got_ids == ["beep-0", "beep-1", "beep-2", "hum-0", "hum-1", "hum-2"]
        else:
            assert got_ids == IDS, name
        np.testing.assert_allclose(got, emb, atol=1e-6, err_msg=name)
    model = mlatr.load(device="cpu")
    for items in (folder, manifest, files, shards):
        found = model.embed_library(items)
        assert found.ids == IDS
        np.testing.assert_allclose(found.embeddings, emb, atol=1e-6)
        np.testing.assert_allclose(model.embed_audio(items), emb, atol=1e-6)
    np.testing.assert_allclose(model.embed_audio(files), emb, atol=1e-6)  # plain files, the file path as before
    assert repr(found).startswith("LibraryEmbeddings(6 clips, dim 16")
    # the index: the CLI from a folder, Python from shards, both the same
    r = run_cli(capsys, "index", "build", folder, "-o", tmp_path / "lib.idx", "--no-progress")
    assert r.code == 0, r.err
    built = Index.load(tmp_path / "lib.idx")
    assert built.ids == IDS and built.caption_text[built.caption_clip.tolist().index(0)] == "a short beep"
    np.testing.assert_allclose(built.embeddings, emb, atol=1e-6)
    in_memory = Index.build(model, shards, progress=False)
    assert in_memory.ids == IDS
    np.testing.assert_allclose(in_memory.embeddings, emb, atol=1e-6)
    assert repr(in_memory) == f"Index(6 clips, in memory, dim 16, model={model_path})"
    assert repr(built) == f"Index(6 clips, 1 shard, exact, dim 16, model={model_path})"


def test_classify_names_clips_as_the_library_does_in_the_cli_and_python(library, capsys, monkeypatch):
    folder, manifest, shards, model_path = library
    monkeypatch.setenv("MLATR_MODEL", str(model_path))
    model = mlatr.load(device="cpu")
    expected = model.classify(folder, "low tone,high tone")
    assert expected.ids == IDS and expected.scores.shape == (6, 2)
    for items in ([manifest], [shards], sorted(folder.rglob("*.wav"))):
        r = run_cli(capsys, "classify", *items, "--labels", "low tone,high tone", "--json")
        assert r.code == 0, r.err
        out = json.loads(r.out)["results"]
        assert [x["id"] for x in out] == IDS
        np.testing.assert_allclose([x["score"] for x in out], expected.scores.max(axis=1), atol=1e-5)
    python = model.classify(manifest, ["low tone", "high tone"])
    assert python.ids == IDS and python.labels == expected.labels


def test_splits_and_bad_combinations_say_what_to_do(library, tmp_path, capsys, monkeypatch):
    folder, manifest, shards, model_path = library
    monkeypatch.setenv("MLATR_MODEL", str(model_path))
    m = Manifest.load(manifest)
    for i, clip in enumerate(m.clips):
        clip.split = "test" if i % 2 else "train"
    m.rebase(tmp_path)
    m.save(tmp_path / "split.jsonl")
    ids, _ = _embedded(capsys, tmp_path, "test", tmp_path / "split.jsonl", "--split", "test")
    assert ids == IDS[1::2]
    assert_user_error(run_cli(capsys, "embed", folder, "--split", "test", "-o", tmp_path / "x.npz"),
                      "has no splits")
    assert_user_error(run_cli(capsys, "embed", folder, shards, "-o", tmp_path / "x.npz"), "shards", "alone")
    copy = tmp_path / "copy"
    shutil.copytree(folder, copy)
    assert_user_error(run_cli(capsys, "embed", folder, copy, "-o", tmp_path / "x.npz"), "high/beep-0", "both")
    assert_user_error(run_cli(capsys, "index", "build", folder, "--manifest", manifest, "-o", tmp_path / "i.idx"),
                      "once")
    assert_user_error(run_cli(capsys, "index", "build", "-o", tmp_path / "i.idx"), "INPUT")
    missing = tmp_path / "gone.wav"
    assert_user_error(run_cli(capsys, "embed", missing, "-o", tmp_path / "x.npz"), str(missing))


def test_text_and_sound_searches_answer_the_same_list_with_typed_evidence(library, tmp_path, capsys, monkeypatch):
    """search_text and search_audio both answer Results of Hit (captions of a sound query in caption_hits);
    evidence is typed with to_dict(); a sound query whose audio is in the library says so (same_audio) for
    exactly the clips with its samples (the 0.75 s tones: hum-1 and the three beeps)."""
    folder, _, _, model_path = library
    index = Index.build(mlatr.load(model_path, device="cpu"), folder, progress=False)
    text = index.search_text("a short beep", k=6)
    sound = index.search_audio(folder / "low" / "hum-1.wav", k=6)
    assert type(text) is type(sound) is mlatr.Results and all(isinstance(h, mlatr.Hit) for h in [*text, *sound])
    assert text.caption_hits is None and "captions" not in text.to_dict()
    scores = [c.score for c in sound.caption_hits]
    assert len(scores) == 6 and {c.text for c in sound.caption_hits} <= set(index.caption_text)
    assert scores == sorted(scores)[::-1]
    assert sound.to_dict()["captions"] == [c.to_dict() for c in sound.caption_hits]
    same = {"low/hum-1", "high/beep-0", "high/beep-1", "high/beep-2"}
    assert {h.id for h in sound if h.same_audio} == same and len(sound) == 6
    assert not any(h.same_audio for h in text)
    e = next(e for e in text[0].evidence if e.source == "caption")
    assert isinstance(e, mlatr.Evidence) and e.to_dict() == {"source": "caption", "text": "a short beep",
                                                            "lang": "eng", "origin": "sidecar", "score": e.score,
                                                            "rank": 1}  # the caption came from a sidecar .txt
    assert [x.to_dict() for x in sound[0].evidence] == [{"source": "sound", "score": sound[0].score, "rank": 1}]
    h = text[0]
    assert repr(h) == f"Hit(rank=1, id={h.id!r}, score={h.score:.3f}, relevance={h.relevance:.2f})"
    assert repr(sound).startswith("Results([Hit(rank=1, ") and repr(sound).endswith(
        f"relevance={sound.relevance:.2f}, nothing_relevant={sound.nothing_relevant}, 6 caption hits)")
    # the CLI says it too: --json and the table
    index.save(tmp_path / "lib.idx")
    r = run_cli(capsys, "search", tmp_path / "lib.idx", "--audio", folder / "low" / "hum-1.wav", "--json",
                "--model", model_path)
    assert r.code == 0, r.err
    out = json.loads(r.out)
    assert {x["id"] for x in out["results"] if x["same_audio"]} == same
    assert [c["text"] for c in out["captions"]][:6] == [c.text for c in sound.caption_hits]  # the CLI's k is 10
    r = run_cli(capsys, "search", tmp_path / "lib.idx", "--audio", folder / "low" / "hum-0.wav", "--model", model_path)
    assert r.code == 0 and "the same audio as the query" in r.out and "captions of indexed clips:" in r.out
