"""Bad or weak input, command by command: each gets a clear error (exit 2, a message on stderr
naming file / line / field, no traceback, nothing written) or a counted, reported skip.

Truncated audio and the folder import of an undecodable file: tests/test_bad_audio.py. Kills, orphan
temporary files and a full disk: tests/test_run_recovery.py and tests/test_fault_kill.py. Generated
malformed inputs: tests/test_bad_input_properties.py.
"""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from clitools import assert_user_error, digest, manifest_lines, run_cli, write_tone
from mlatr.data.manifest import Manifest
from mlatr.errors import MlatrError
from mlatr.languages import LANGUAGE_NAMES
from mlatr.search.index import Index
from mlatr.training.config import load_config

# ---------------------------------------------------------------- bad 2: language codes


def test_config_languages_are_normalised_or_refused(capsys):
    assert load_config(None, ["data.languages=[eng,fr]"]).data.languages == ["eng", "fra"]
    assert load_config(None, ["data.languages=[EN, de, zh]"]).data.languages == ["eng", "deu", "zho"]
    r = run_cli(capsys, "train", "data.languages=[eng,xx]", "data.manifest=nowhere.jsonl")
    assert_user_error(r, "config: data.languages: unknown language code 'xx'", *sorted(LANGUAGE_NAMES))
    r = run_cli(capsys, "train", "data.languages=[eng,fr,fra]")
    assert_user_error(r, "config: data.languages: language fra is given twice")


def test_every_language_option_takes_iso_639_1(served_toy, tmp_path, capsys):
    manifest, ckpt, index = served_toy
    out = tmp_path / "m.json"
    r = run_cli(capsys, "eval", "--model", ckpt, "--manifest", manifest, "--languages", "fr,en",
                "--pivot", "en", "--json", out)
    assert r.code == 0, r.err
    metrics = json.loads(out.read_text())
    assert set(metrics["t2a"]) == {"eng", "fra", "avg"} and metrics["pivot"] == "eng"
    assert run_cli(capsys, "data", "validate", manifest, "--languages", "en,fr,de").code == 0
    r = run_cli(capsys, "data", "validate", manifest, "--languages", "eng,fr")
    assert r.code == 1 and "captions.deu" in r.out and "captions.fra" not in r.out
    r = run_cli(capsys, "search", index, "a tone", "--lang", "fr", "--json")
    assert r.code == 0 and json.loads(r.out)["lang"] == "fra"
    for argv in (["search", index, "a tone", "--lang", "xx"],
                 ["eval", "--model", ckpt, "--manifest", manifest, "--pivot", "xx"],
                 ["index", "build", "--model", ckpt, "--manifest", manifest, "-o", tmp_path / "i.npz",
                  "--caption-langs", "eng,xx"],
                 ["data", "validate", manifest, "--languages", "eng,xx"]):
        assert_user_error(run_cli(capsys, *argv), "unknown language code 'xx'", "fra")
    assert not (tmp_path / "i.npz").exists()


def test_synth_languages_are_normalised(tmp_path, capsys):
    r = run_cli(capsys, "data", "synth", "-o", tmp_path / "s", "--train", "2", "--val", "0", "--test", "0",
                "--languages", "en,fr", "--workers", "1", "--quiet")
    assert r.code == 0, r.err
    assert Manifest.load(tmp_path / "s" / "manifest.jsonl").languages() == ["eng", "fra"]
    assert run_cli(capsys, "data", "validate", tmp_path / "s" / "manifest.jsonl", "--languages", "eng,fr").code == 0
    assert_user_error(run_cli(capsys, "data", "synth", "-o", tmp_path / "t", "--languages", "eng,fr,fra"),
                      "--languages: language fra is given twice")


# ---------------------------------------------------------------- bad 3: data import -o over its source


def test_import_refuses_to_overwrite_its_source(tmp_path, capsys):
    src = tmp_path / "captions.csv"
    src.write_text("file_name,caption_1\na.wav,a dog barks\n", encoding="utf-8")
    (tmp_path / "link.csv").symlink_to(src)
    before = digest(src)
    for out in (src, tmp_path / "link.csv", tmp_path / "." / "captions.csv"):
        r = run_cli(capsys, "data", "import", "--format", "clotho-csv", src, "-o", out)
        assert_user_error(r, f"-o {out} is the source {src}", "the command would replace its own input")
    assert digest(src) == before
    m = tmp_path / "m.jsonl"
    assert run_cli(capsys, "data", "import", "--format", "clotho-csv", src, "-o", m).code == 0
    tr = tmp_path / "fra.csv"
    tr.write_text("id,index,caption\na,0,un chien aboie\n", encoding="utf-8")
    r = run_cli(capsys, "data", "import", "--format", "translations", tr, "--lang", "fr", "-o", tr, "--base", m)
    assert_user_error(r, "is the source")
    # merging into the -o manifest itself is what translations do by design
    assert run_cli(capsys, "data", "import", "--format", "translations", tr, "--lang", "fr", "-o", m).code == 0
    assert Manifest.load(m)[0].captions["fra"] == ["un chien aboie"]


def test_no_command_writes_over_its_inputs(served_toy, tmp_path, capsys):
    manifest, ckpt, index = served_toy
    emb = _npz(tmp_path / "e.npz", 3)
    before = digest(manifest, ckpt, emb)
    for argv, fragment in (
            (["index", "build", "--model", ckpt, "--manifest", manifest, "-o", manifest], "-o"),
            (["encode", "--model", ckpt, "--manifest", manifest, "-o", ckpt], "-o"),
            (["eval", "--model", ckpt, "--manifest", manifest, "--json", manifest], "--json"),
            (["eval-embeddings", emb, "--json", emb], "--json")):
        assert_user_error(run_cli(capsys, *argv), f"{fragment} ", "the command would replace its own input")
    assert digest(manifest, ckpt, emb) == before
    assert_user_error(run_cli(capsys, "encode", "--model", ckpt, "--manifest", manifest, "-o", tmp_path),
                      "is a folder")


# ---------------------------------------------------------------- bad 4: non-finite embeddings


def _damaged_copy(index, tmp_path, rows, name="nan.idx.npz", value=np.nan):
    with np.load(index) as z:
        arrays = {k: z[k] for k in z.files}
    arrays["embeddings"] = arrays["embeddings"].copy()
    arrays["embeddings"][rows, 0] = value
    out = tmp_path / name
    np.savez(out, **arrays)
    return out, json.loads(str(arrays["meta"]))["ids"]


@pytest.mark.parametrize("backend", ["numpy", "faiss"])
def test_index_with_nan_is_refused_on_load(served_toy, tmp_path, capsys, backend):
    pytest.importorskip("faiss") if backend == "faiss" else None
    bad, ids = _damaged_copy(served_toy[2], tmp_path, [3, 7])
    r = run_cli(capsys, "search", bad, "a tone", "--json", "--backend", backend)
    assert_user_error(r, f"{bad}: embeddings: non-finite values", f"clip(s) {ids[3]}, {ids[7]}")
    assert r.out == ""
    inf, ids = _damaged_copy(served_toy[2], tmp_path, [0], "inf.idx.npz", np.inf)
    with pytest.raises(MlatrError, match=f"clip\\(s\\) {ids[0]}"):
        Index.load(inf)


def test_build_refuses_nan_embeddings_naming_the_clips(served_toy, tmp_path, monkeypatch):
    from mlatr.inference.checkpoint import load_model
    from mlatr.search.build import build_index

    manifest, ckpt, _ = served_toy
    loaded = load_model(ckpt)
    encode = loaded.model.encode_audio
    calls = []

    def nan_second_clip(wave, lengths):
        out = encode(wave, lengths)
        if not calls:
            out.pooled[1] = float("nan")
        calls.append(1)
        return out

    monkeypatch.setattr(loaded.model, "encode_audio", nan_second_clip)
    out = tmp_path / "lib.idx.npz"
    with pytest.raises(MlatrError, match="non-finite values .* clip\\(s\\) clip001"):
        build_index(loaded, Manifest.load(manifest), out)
    assert not out.exists() and list(tmp_path.iterdir()) == []
    # the refused vector is not left in the resume journal: the next build of the same clips with the same model
    # (another output, the encoder well again) encodes clip001 anew instead of resuming its NaN
    monkeypatch.setattr(loaded.model, "encode_audio", encode)
    build_index(loaded, Manifest.load(manifest), tmp_path / "again.idx.npz")
    again = Index.load(tmp_path / "again.idx.npz")
    assert np.isfinite(np.asarray(again.embeddings)).all() and "clip001" in again.ids


# ---------------------------------------------------------------- weak: empty manifest, one test clip


def test_empty_manifest_is_an_error(served_toy, tmp_path, capsys):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n\n", encoding="utf-8")
    r = run_cli(capsys, "data", "validate", empty)
    assert r.code == 1 and f"{empty}: no clip: the manifest is empty" in r.out
    out = tmp_path / "e.idx.npz"
    assert_user_error(run_cli(capsys, "index", "build", "--model", served_toy[1], "--manifest", empty,
                              "-o", out), f"{empty}: no clip")
    assert not out.exists()
    assert_user_error(run_cli(capsys, "data", "stats", empty), "no clip")
    bad = manifest_lines(tmp_path / "allbad.jsonl", [{"id": "a"}, {"audio": "b.wav"}])
    assert_user_error(run_cli(capsys, "data", "stats", bad, "--skip-bad"),
                      "no usable clip: every line has a problem (2 line(s) skipped")


def _npz(path, n_clips, langs=("eng", "fra"), groups=None, dim=8, seed=0):
    rng = np.random.default_rng(seed)
    text_lang = np.asarray([lang for _ in range(n_clips) for lang in langs], dtype=str)
    text_audio = np.repeat(np.arange(n_clips), len(langs))
    text_group = np.repeat(np.arange(n_clips), len(langs)) if groups is None else np.asarray(groups)
    np.savez(path, audio=rng.standard_normal((n_clips, dim)), text=rng.standard_normal((len(text_lang), dim)),
             text_audio=text_audio, text_lang=text_lang, text_group=text_group)
    return path


def test_few_candidates_are_warned_about(tmp_path, capsys, served_toy):
    one = _npz(tmp_path / "one.npz", 1)
    r = run_cli(capsys, "eval-embeddings", one, "--json", tmp_path / "one.json")
    assert r.code == 0 and "Traceback" not in r.err
    assert "mlatr: warning: only 1 clip(s) to rank in text-to-audio retrieval" in r.err
    assert "chance alone gives R@1 100 %, R@5 100 %, R@10 100 %" in r.err
    assert "only 1 clip" in json.loads((tmp_path / "one.json").read_text())["warnings"][0]
    r = run_cli(capsys, "eval-embeddings", _npz(tmp_path / "many.npz", 120))
    assert r.code == 0 and "warning" not in r.err
    manifest, ckpt, _ = served_toy  # 4 test clips
    r = run_cli(capsys, "eval", "--model", ckpt, "--manifest", manifest)
    assert r.code == 0 and "only 4 clip(s) to rank" in r.err and "R@5 100 %" in r.err


# ---------------------------------------------------------------- weak: non-UTF-8 CSV, --lang of imports

CSV_ROWS = {
    "audiocaps-csv": ("audiocap_id,youtube_id,start_time,caption\n", "1,abc,0,a dog barks\n",
                      "2,def,0,caf\xe9 noise\n", "caption"),
    "clotho-csv": ("file_name,caption_1\n", "a.wav,a dog barks\n", "b.wav,caf\xe9 noise\n", "caption_1"),
    "esc50-csv": ("filename,fold,target,category\n", "a.wav,1,0,dog\n", "b.wav,1,1,caf\xe9\n", "category"),
    "urbansound8k-csv": ("slice_file_name,fsID,start,end,salience,fold,classID,class\n",
                         "a.wav,1,0,1,1,1,0,dog_bark\n", "b.wav,2,0,1,1,1,1,caf\xe9\n", "class"),
}


@pytest.mark.parametrize("fmt", sorted(CSV_ROWS))
def test_non_utf8_csv_row_is_named_or_skipped(tmp_path, capsys, fmt):
    header, good, latin, column = CSV_ROWS[fmt]
    src = tmp_path / "meta.csv"
    src.write_bytes((header + good).encode() + latin.encode("latin-1"))
    out = tmp_path / "m.jsonl"
    r = run_cli(capsys, "data", "import", "--format", fmt, src, "-o", out)
    assert_user_error(r, f"{src}:3: {column}: not UTF-8 text (byte 0xe9)")
    assert not out.exists()
    r = run_cli(capsys, "data", "import", "--format", fmt, src, "-o", out, "--skip-bad")
    assert r.code == 0 and "skipped 1 bad row(s)" in r.out and f"{src}:3: {column}: not UTF-8" in r.err
    assert len(Manifest.load(out)) == 1


def test_non_utf8_header_translations_and_manifest(tmp_path, capsys, served_toy):
    src = tmp_path / "meta.csv"
    src.write_bytes("file_name,capti\xf3n_1\na.wav,x\n".encode("latin-1"))
    assert_user_error(run_cli(capsys, "data", "import", "--format", "clotho-csv", src, "-o", tmp_path / "o.jsonl"),
                      f"{src}:1: header: not UTF-8")
    m = tmp_path / "m.jsonl"
    shutil.copy(served_toy[0], m)
    tr = tmp_path / "fra.csv"
    tr.write_bytes("id,index,caption\nclip000,0,un son tr\xe8s grave\nclip001,0,aigu\n".encode("latin-1"))
    r = run_cli(capsys, "data", "import", "--format", "translations", tr, "--lang", "fra", "-o", m, "--overwrite",
                "--skip-bad")
    assert r.code == 0 and f"{tr}:2: caption: not UTF-8" in r.err
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(served_toy[0].read_bytes().replace(b"un son grave simple", "un son gr\xe2ve".encode("latin-1"), 1))
    r = run_cli(capsys, "data", "validate", bad)
    assert r.code == 1 and f"{bad}:1: captions.fra[0]: not UTF-8 text (byte 0xe2)" in r.out


def test_import_lang_is_checked_before_reading(tmp_path, capsys):
    src = tmp_path / "tr.csv"
    src.write_text("id,index,caption\na,0,x\n", encoding="utf-8")
    for fmt in ("translations", "mlclap-json"):
        r = run_cli(capsys, "data", "import", "--format", fmt, src, "--lang", "xx", "-o", tmp_path / "m.jsonl")
        assert_user_error(r, "--lang: unknown language code 'xx'", "fra")


# ---------------------------------------------------------------- weak: eval-embeddings


def test_language_sharing_no_group_with_the_pivot_is_explained(tmp_path, capsys):
    # fra captions translate other source captions than the eng ones: groups 0..9 eng, 10..19 fra
    n = 10
    groups = [g + (n if k % 2 else 0) for g in range(n) for k in range(2)]
    path = _npz(tmp_path / "e.npz", n, groups=groups)
    r = run_cli(capsys, "eval-embeddings", path)
    assert r.code == 0
    assert "gap, dis and MRV are blank: fra shares no caption group with the pivot eng" in r.err


def test_npy_and_other_files_given_as_npz(tmp_path, capsys):
    np.save(tmp_path / "a.npy", np.zeros((3, 4)))
    assert_user_error(run_cli(capsys, "eval-embeddings", tmp_path / "a.npy"),
                      "a.npy: not an embeddings .npz", "a single NumPy .npy array (np.save)")
    (tmp_path / "t.npz").write_text("audio,text\n1,2\n")
    assert_user_error(run_cli(capsys, "eval-embeddings", tmp_path / "t.npz"), "a text file starting 'audio,text'")


# ---------------------------------------------------------------- weak: config numbers, overrides


@pytest.mark.parametrize("override, message", [
    ("optim.lr=-0.01", "config: optim.lr: must be > 0, got -0.01"),
    ("optim.lr=nan", "config: optim.lr: must be a finite number, got nan"),
    ("model.embed_dim=-5", "config: model.embed_dim: must be >= 1, got -5"),
    ("model.temperature=0", "config: model.temperature: must be > 0"),
    ("train.batch_size=1", "config: train.batch_size: must be >= 2"),
    ("train.epochs=true", "config: train.epochs: must be an integer, got True"),
    ("data.max_seconds=-1", "config: data.max_seconds: must be > 0"),
    ("optim.betas=[0.9, 1.5]", "config: optim.betas: must be two numbers in [0, 1)"),
    ("optim.weight_decay=.inf", "config: optim.weight_decay: must be a finite number"),
    ("train.progress=maybe", "config: train.progress: must be true or false"),
    ("data.workers=-1", "config: data.workers: must be auto or an integer >= 0, got -1"),
    ("data.workers=many", "config: data.workers: must be auto or an integer >= 0, got 'many'"),
    ("data.workers=1.5", "config: data.workers: must be a string or an integer, got 1.5"),
    ("data.cache_audio=fast", "config: data.cache_audio: must be true, false or auto, got 'fast'"),
    ("data.cache_audio=3", "config: data.cache_audio: must be true or false or a string, got 3"),
    ("data.prefetch=0", "config: data.prefetch: must be >= 1, got 0"),
    ("optim.grad_cache_chunk=0", "config: optim.grad_cache_chunk: must be >= 1, or null"),
    ("dist.timeout_minutes=0", "config: dist.timeout_minutes: must be > 0"),
])
def test_config_numbers_name_the_key(capsys, override, message):
    assert_user_error(run_cli(capsys, "train", override, "data.manifest=nowhere.jsonl"), message)


def test_overrides_anywhere_on_the_train_command_line(tmp_path, capsys, served_toy):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("train: {epochs: 1}\n")
    r = run_cli(capsys, "train", f"out_dir={tmp_path / 'x'}", "--config", cfg, "--no-progress",
                f"data.manifest={tmp_path / 'missing.jsonl'}")
    assert_user_error(r, "missing.jsonl: file not found (a manifest)")  # parsed: the config was read
    r = run_cli(capsys, "train", "--config", cfg, "--bogus", "train.epochs=2")
    assert_user_error(r, "unrecognized arguments: --bogus", "config overrides are KEY=VALUE")
    run_dir = tmp_path / "run"
    shutil.copytree(served_toy[1].parent, run_dir)
    saved = (run_dir / "config.yaml").read_text()
    r = run_cli(capsys, "train", "--config", run_dir / "config.yaml", "--resume", "optim.lr=0.5")
    assert_user_error(r, "resume needs the same one", "optim.lr: 0.001 in the run, 0.5 now")
    assert (run_dir / "config.yaml").read_text() == saved


# ---------------------------------------------------------------- weak: eval arguments


def test_eval_arguments_are_checked(served_toy, capsys):
    manifest, ckpt, _ = served_toy
    base = ["eval", "--model", ckpt, "--manifest", manifest]
    assert_user_error(run_cli(capsys, *base, "--languages", "xxx"), "--languages: unknown language code 'xxx'")
    assert_user_error(run_cli(capsys, *base, "--languages", "jpn"),
                      "--languages: no caption in jpn in split 'test'", "its captions are in: eng, fra, deu")
    assert_user_error(run_cli(capsys, *base, "--batch-size", "0"), "--batch-size: must be an integer >= 1, got 0")
    assert_user_error(run_cli(capsys, *base, "--max-seconds", "-3"), "--max-seconds: must be a number > 0, got -3")
    assert_user_error(run_cli(capsys, "search", served_toy[2], "q", "-k", "0"), "-k: must be an integer >= 1")


# ---------------------------------------------------------------- weak: damaged files


def test_truncated_empty_and_foreign_files(served_toy, tmp_path, capsys):
    manifest, ckpt, index = served_toy
    data = index.read_bytes()
    (tmp_path / "cut.idx.npz").write_bytes(data[: len(data) // 2])
    (tmp_path / "empty.idx.npz").write_bytes(b"")
    (tmp_path / "notes.txt").write_text("my model is in the other folder\n")
    cases = [
        (["search", tmp_path / "cut.idx.npz", "q"], "not an mlatr index", "truncated or damaged zip archive"),
        (["search", tmp_path / "empty.idx.npz", "q"], "not an mlatr index", "empty (0 bytes)"),
        (["search", tmp_path / "notes.txt", "q"], "not an mlatr index", "a text file starting 'my model"),
        (["search", ckpt, "q"], "not an mlatr index", "a PyTorch file"),
        (["eval", "--model", tmp_path / "notes.txt", "--manifest", manifest], "not an mlatr checkpoint",
         "a text file starting"),
        (["eval", "--model", index, "--manifest", manifest], "not an mlatr checkpoint", "NumPy .npz archive"),
        (["eval", "--model", tmp_path / "cut.idx.npz", "--manifest", manifest], "truncated"),
        (["eval-embeddings", tmp_path / "empty.idx.npz"], "not an embeddings .npz", "empty (0 bytes)"),
        (["eval-embeddings", ckpt], "not an embeddings .npz", "a PyTorch file"),
    ]
    for argv, *fragments in cases:
        r = run_cli(capsys, *argv)
        assert_user_error(r, *fragments)
        assert "pickled data" not in r.err and "weights_only" not in r.err


def test_every_clip_unreadable_in_index_build(served_toy, tmp_path, capsys):
    rows = [{"id": f"c{i}", "audio": f"broken{i}.wav", "captions": {"eng": ["a tone"]}} for i in range(3)]
    m = manifest_lines(tmp_path / "m.jsonl", rows)
    for i in range(3):
        (tmp_path / f"broken{i}.wav").write_bytes(b"RIFF" + bytes(40))
    out = tmp_path / "lib.idx.npz"
    base = ["index", "build", "--model", served_toy[1], "--manifest", m, "-o", out, "--no-progress"]
    assert_user_error(run_cli(capsys, *base), f"{m}:1: audio: clip 'c0'")
    assert_user_error(run_cli(capsys, *base, "--skip-bad"), "none of the 3 new clip(s)", "nothing was written")
    assert not out.exists()
    write_tone(tmp_path / "broken1.wav", 1.0)
    r = run_cli(capsys, *base, "--skip-bad")
    assert r.code == 0 and "mlatr: skipped 2 bad file(s), each listed with its reason in" in r.err
    assert Index.load(out).ids == ["c1"]
