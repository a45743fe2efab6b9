"""webdataset shards in and out: export, import back, ML-CLAP's own layout, and training from shards giving the
clips, captions and weights training from the manifest gives (one process, and 2 torchrun processes)."""

import io
import json
import tarfile
import uuid
from pathlib import Path

import numpy as np
import pytest
import torch

pytest.importorskip("webdataset")

from distributed_runs import launch, run_job  # noqa: E402
from mlatr.cli import main  # noqa: E402
from mlatr.data.manifest import Manifest  # noqa: E402
from mlatr.data.pipeline.file_source import AudioSource  # noqa: E402
from mlatr.data.webdataset_shards import ShardSource, index_shards, shard_urls  # noqa: E402
from mlatr.errors import MlatrError  # noqa: E402
from toydata import make_toy_manifest  # noqa: E402

NO_DROPOUT = [
    "model.audio={name: small-cnn, channels: [8, 16], dim: 32, num_heads: 2, ff_dim: 64, dropout: 0.0}",
    "model.text={name: small-transformer, dim: 32, num_layers: 1, num_heads: 2, ff_dim: 64, vocab_size: 300, "
    "dropout: 0.0}",
]


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """The toy manifest (one French caption left missing) and its export in shards of 5 samples."""
    root = tmp_path_factory.mktemp("wds")
    path = make_toy_manifest(root / "toy", n_train=9, n_val=3, n_test=2)
    manifest = Manifest.load(path)
    manifest.clips[1].captions["fra"][0] = None  # a missing translation stays missing
    manifest.clips[2].labels = ["tone"]
    manifest.save(path)
    pattern = root / "shards" / "shard-%06d.tar"
    assert main(["data", "export", "--format", "webdataset", str(path), "-o", str(pattern), "--maxcount", "5",
                 "--no-progress"]) == 0
    return path, root / "shards"


def test_export_layout(exported):
    path, shards = exported
    manifest = Manifest.load(path)
    assert sorted(p.name for p in shards.iterdir()) == ["shard-000000.tar", "shard-000001.tar", "shard-000002.tar"]
    with tarfile.open(shards / "shard-000000.tar") as tar:
        names = tar.getnames()
        clip = manifest.clips[1]
        key = f"{clip.id.replace('.', '_').replace('/', '_')}_00000001"
        assert f"{key}.json" in names and f"{key}.wav" in names and len(names) == 10
        meta = json.loads(tar.extractfile(f"{key}.json").read())
        assert tar.extractfile(f"{key}.wav").read() == clip.audio_path(manifest.root).read_bytes()
    assert meta["id"] == clip.id and meta["split"] == clip.split
    assert meta["captions"] == {"eng_Latn": clip.captions["eng"], "fra_Latn": [None, *clip.captions["fra"][1:]],
                                "deu_Latn": clip.captions["deu"]}


def test_import_gives_the_manifest_back(exported, tmp_path, capsys):
    path, shards = exported
    out = tmp_path / "back.jsonl"
    assert main(["data", "import", "--format", "webdataset", f"{shards}/shard-{{000000..000002}}.tar",
                 "-o", str(out)]) == 0
    assert "wrote 14 clips" in capsys.readouterr().out
    original, back = Manifest.load(path), Manifest.load(out)
    assert [c.id for c in back] == [c.id for c in original]
    for a, b in zip(original, back, strict=True):
        assert (a.captions, a.split, a.labels, a.duration) == (b.captions, b.split, b.labels, b.duration)
        assert b.audio_path(back.root).read_bytes() == a.audio_path(original.root).read_bytes()
    assert back.clips[0].audio.startswith("back-audio/")
    # the folder data export wrote is read as its shards, in name order
    assert main(["data", "import", "--format", "webdataset", str(shards), "-o", str(tmp_path / "folder.jsonl")]) == 0
    folder = Manifest.load(tmp_path / "folder.jsonl")
    assert [(c.id, c.captions, c.split) for c in folder] == [(c.id, c.captions, c.split) for c in back]


def test_ml_clap_and_laion_layouts_are_read(tmp_path):
    """Shards as ML-CLAP's json-to-wds script writes them (gzipped, STEM_UUID keys, FLAC, NLLB caption lists)
    and a LAION-CLAP sample ({"text": [...]})."""
    import soundfile as sf

    rng = np.random.default_rng(0)
    waves = [rng.uniform(-0.5, 0.5, 16000 * (k + 1)).astype(np.float32) for k in range(3)]
    captions = [{"eng_Latn": ["a dog barks", "a dog"], "fra_Latn": ["un chien aboie"]},
                {"eng_Latn": ["rain falls"], "zho_Hans": ["下雨了"], "jpn_Jpan": ["雨が降る"]}]
    shard = tmp_path / "audiocaps_train_000000.tar.gz"
    with tarfile.open(shard, "w:gz") as tar:
        def add(name, data):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        for k, (wave, caps) in enumerate(zip(waves, [*captions, None], strict=True)):
            buf = io.BytesIO()
            sf.write(buf, wave, 16000, format="FLAC")
            key = f"Y{k}abc_30_000_{uuid.UUID(int=k).hex}"
            meta = {"captions": caps} if caps else {"text": ["wind blows"], "original_data": {"title": "wind"}}
            add(f"{key}.flac", buf.getvalue())
            add(f"{key}.json", json.dumps(meta, ensure_ascii=False).encode("utf-8"))
    index = index_shards(str(shard))
    clips = index.manifest.clips
    assert clips[0].captions == {"eng": ["a dog barks", "a dog"], "fra": ["un chien aboie"]}
    assert clips[1].captions == {"eng": ["rain falls"], "zho": ["下雨了"], "jpn": ["雨が降る"]}
    assert clips[2].captions == {"eng": ["wind blows"]} and clips[2].extra == {"original_data": {"title": "wind"}}
    assert clips[0].id == f"Y0abc_30_000_{uuid.UUID(int=0).hex}"
    source = ShardSource(index.manifest, index, 16000)
    for k, wave in enumerate(waves):
        np.testing.assert_allclose(source.load(k), wave, atol=1e-4)  # FLAC is 16-bit
        assert source.length(k) == wave.shape[0]
    out = tmp_path / "m.jsonl"
    assert main(["data", "import", "--format", "webdataset", str(shard), "-o", str(out), "--split", "train"]) == 0
    assert Manifest.load(out).splits() == {"train": 3}


def test_bad_shards_are_refused(tmp_path):
    with pytest.raises(MlatrError, match="shard not found"):
        index_shards(str(tmp_path / "none-{0..1}.tar"))
    (tmp_path / "junk.tar").write_bytes(b"not a tar at all" * 64)
    with pytest.raises(MlatrError, match="not a readable tar shard"):
        index_shards(str(tmp_path / "junk.tar"))
    assert shard_urls("a/s-{000..002}.tar::b.tar") == ["a/s-000.tar", "a/s-001.tar", "a/s-002.tar", "b.tar"]


def test_ranks_and_reader_threads_split_the_shards(exported):
    """Each rank reads shards k = rank mod 2 (by 2 threads); gathered, the index is the one-process index."""
    _, shards = exported
    spec = f"{shards}/shard-{{000000..000002}}.tar"
    whole = index_shards(spec)
    parts = {}

    def gather(mine):
        parts[len(parts)] = sorted(mine)
        return [mine, index_shards_part(1)]

    def index_shards_part(rank):
        from mlatr.data.webdataset_shards import read_shard

        return {k: read_shard(url) for k, url in enumerate(shard_urls(spec)) if k % 2 == rank}

    split = index_shards(spec, rank=0, world_size=2, gather=gather, workers=2)
    assert parts == {0: [0, 2]}
    assert [(c.id, c.captions) for c in split.manifest] == [(c.id, c.captions) for c in whole.manifest]
    assert split.audio == whole.audio


def _overrides(data, out, epochs=2):
    return [*data, f"out_dir={out}", "data.languages=[eng,fra,deu]", f"train.epochs={epochs}",
            "data.max_seconds=1.0", "train.progress=false", "train.log_every=1", "train.batch_size=5",
            "data.workers=0", "optim.warmup_steps=0", "dist.timeout_minutes=3", *NO_DROPOUT]


def _same_runs(a, b):
    first, second = torch.load(a / "compare.pt"), torch.load(b / "compare.pt")
    assert first["weights"].keys() == second["weights"].keys()
    for name, value in first["weights"].items():
        assert torch.equal(second["weights"][name], value), name
    log = [json.loads(x) for x in (a / "log.jsonl").read_text().splitlines()]
    other = [json.loads(x) for x in (b / "log.jsonl").read_text().splitlines()]
    drop = ("epoch_time_s", "peak_memory_mb")
    assert [{k: v for k, v in r.items() if k not in drop} for r in log] == \
        [{k: v for k, v in r.items() if k not in drop} for r in other]


def test_training_from_shards_equals_training_from_the_manifest(exported, tmp_path):
    path, shards = exported
    spec = f"data.webdataset={shards}/shard-{{000000..000002}}.tar"
    from mlatr.training.config import load_config
    from mlatr.training.trainer import Trainer

    plain = Trainer(load_config(None, _overrides([f"data.manifest={path}"], tmp_path / "m")))
    sharded = Trainer(load_config(None, _overrides([spec], tmp_path / "s")))
    for a, b in ((plain.train_manifest, sharded.train_manifest), (plain.val_manifest, sharded.val_manifest)):
        assert [(c.id, c.captions, c.split) for c in a] == [(c.id, c.captions, c.split) for c in b]
    assert isinstance(sharded.batches.source, ShardSource) and type(plain.batches.source) is AudioSource
    for i in range(len(plain.train_manifest)):
        assert np.array_equal(sharded.batches.source.load(i), plain.batches.source.load(i))
    assert sharded.batches.plan(0) == plain.batches.plan(0)  # clips, caption indices, crops
    folder = Trainer(load_config(None, _overrides([f"data.webdataset={shards}"], tmp_path / "f")))  # the folder
    assert [c.id for c in folder.train_manifest] == [c.id for c in sharded.train_manifest]
    run_job({"overrides": _overrides([f"data.manifest={path}"], tmp_path / "one-m"), "out": str(tmp_path / "one-m")})
    run_job({"overrides": _overrides([spec], tmp_path / "one-s"), "out": str(tmp_path / "one-s")})
    _same_runs(tmp_path / "one-m", tmp_path / "one-s")
    # evaluation from the shards: the metrics evaluation from the manifest gives
    ckpt = str(tmp_path / "one-m" / "last.pt")
    common = ["eval", "--model", ckpt, "--split", "val", "--max-seconds", "1", "--languages", "eng,fra,deu"]
    assert main([*common, "--manifest", str(path), "--json", str(tmp_path / "m.json")]) == 0
    assert main([*common, "--webdataset", f"{shards}/shard-{{000000..000002}}.tar",
                 "--json", str(tmp_path / "s.json")]) == 0
    assert json.loads((tmp_path / "s.json").read_text()) == json.loads((tmp_path / "m.json").read_text())


def test_two_torchrun_processes_from_shards_equal_the_manifest(exported, tmp_path):
    path, shards = exported
    spec = f"data.webdataset={shards}/shard-{{000000..000002}}.tar"
    jobs = [{"overrides": _overrides([f"data.manifest={path}"], tmp_path / "m", epochs=1), "out": str(tmp_path / "m")},
            {"overrides": _overrides([spec], tmp_path / "s", epochs=1), "out": str(tmp_path / "s")}]
    launch(jobs, world=2, timeout_s=300)
    _same_runs(tmp_path / "m", tmp_path / "s")


def test_shards_at_an_fsspec_url(exported):
    """A shard at a non-local fsspec URL (the in-memory file system) reads as the local file does, audio by
    its byte range included."""
    import fsspec

    path, shards = exported
    local = index_shards(str(shards / "shard-000001.tar"))
    with fsspec.open("memory://bucket/shard-000001.tar", "wb") as fh:
        fh.write((shards / "shard-000001.tar").read_bytes())
    remote = index_shards("memory://bucket/shard-{000001..000001}.tar")
    assert [(c.id, c.captions) for c in remote.manifest] == [(c.id, c.captions) for c in local.manifest]
    a, b = ShardSource(local.manifest, local, 16000), ShardSource(remote.manifest, remote, 16000)
    assert all(np.array_equal(a.load(i), b.load(i)) for i in range(len(local.manifest)))
    assert remote.audio[remote.manifest[0].id].url.startswith("memory://")


def test_gzipped_export_and_an_interrupted_one(exported, tmp_path, monkeypatch):
    """A .tar.gz pattern gzips the shards; a failure mid-export leaves the complete shards and no partial one."""
    import mlatr.data.webdataset_shards as shards_module
    from mlatr.data.webdataset_shards import export_webdataset

    path, _ = exported
    manifest = Manifest.load(path)
    written = export_webdataset(manifest, str(tmp_path / "gz" / "s-%03d.tar.gz"), maxcount=6, progress=False)
    assert [p.rsplit("/", 1)[1] for p in written] == ["s-000.tar.gz", "s-001.tar.gz", "s-002.tar.gz"]
    assert (tmp_path / "gz" / "s-000.tar.gz").read_bytes()[:2] == b"\x1f\x8b"
    back = index_shards(str(tmp_path / "gz" / "s-{000..002}.tar.gz"))
    assert [(c.id, c.captions) for c in back.manifest] == [(c.id, c.captions) for c in manifest]
    real, calls = shards_module._audio_member, []

    def failing(p):
        calls.append(p)
        if len(calls) == 8:
            raise OSError("disk went away")
        return real(p)

    monkeypatch.setattr(shards_module, "_audio_member", failing)
    with pytest.raises(OSError, match="disk went away"):
        export_webdataset(manifest, str(tmp_path / "cut" / "s-%03d.tar"), maxcount=5, progress=False)
    assert sorted(p.name for p in (tmp_path / "cut").iterdir()) == ["s-000.tar"]


def test_encode_and_index_build_from_shards_equal_the_manifest(exported, served_toy, tmp_path, capsys):
    """``mlatr encode`` and ``mlatr index build`` read the shards' audio members: the embeddings, ids and captions
    are the manifest's; the index records each member's address as the clip's path and searches it."""
    from mlatr.search import Index

    path, shards = exported
    spec = f"{shards}/shard-{{000000..000002}}.tar"
    ckpt = str(served_toy[1])
    common = ["encode", "--model", ckpt, "--split", "all", "--max-seconds", "1", "--languages", "eng"]
    assert main([*common, "--manifest", str(path), "-o", str(tmp_path / "m.npz")]) == 0
    assert main([*common, "--webdataset", spec, "-o", str(tmp_path / "s.npz")]) == 0
    m, s = np.load(tmp_path / "m.npz"), np.load(tmp_path / "s.npz")
    for key in ("audio", "text", "clip_ids", "text_lang"):
        assert np.array_equal(m[key], s[key]), key
    build = ["index", "build", "--model", ckpt, "--caption-langs", "eng,fra", "--max-seconds", "1",
             "--no-progress"]
    assert main([*build, "--manifest", str(path), "-o", str(tmp_path / "m.idx")]) == 0
    assert main([*build, "--webdataset", spec, "-o", str(tmp_path / "s.idx"), "--split", "train"]) == 0
    capsys.readouterr()
    a, b = Index.load(tmp_path / "m.idx"), Index.load(tmp_path / "s.idx")
    train = [i for i, c in enumerate(Manifest.load(path).clips) if c.split == "train"]
    assert b.ids == [a.ids[i] for i in train]
    assert np.allclose(b.embeddings, a.embeddings[train], atol=1e-5)  # other audio batches: BLAS rounding may differ
    assert list(b.captions) == [a.captions[i] for i in train]
    kept = np.isin(a.caption_clip, train)
    assert list(b.caption_text) == [t for t, k in zip(a.caption_text, kept, strict=True) if k]
    assert np.allclose(b.caption_embeddings, a.caption_embeddings[kept], atol=1e-5)  # other text batches
    first = index_shards(spec).audio[b.ids[0]]
    assert b.paths[0] == str(Path(first.url).resolve()) + f"#{b.paths[0].split('#')[1]}"
    assert b.paths[0].endswith(f".{first.ext}") and b.stale(0) is None
    # the shards' index ranks every clip it holds by its sound cosine, best first (not compared with the manifest
    # index's ranking: the two indexes' sound cosines for this query differ by about 1e-3 though their clip
    # embeddings agree within 1e-5 (cause not traced), and near-ties swapped under ATEN_CPU_CAPABILITY=default)
    got = b.search_text("a tone", k=len(b.ids), rank="audio")
    cosines = [next(e.score for e in h.evidence if e.source == "sound") for h in got]
    assert sorted(h.id for h in got) == sorted(b.ids) and cosines == sorted(cosines, reverse=True)
    with pytest.raises(SystemExit):  # one source or the other
        main([*build, "--manifest", str(path), "--webdataset", spec, "-o", str(tmp_path / "x.idx")])
