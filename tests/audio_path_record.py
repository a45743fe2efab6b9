"""Audio to vectors through every door, on fixed clips: what the audio path gives, recorded.

:func:`record` returns ``{name: array}``; ``tests/fixtures/audio_path_reference.npz`` holds it as the code
gave it at the commit named in its ``recorded_at`` (before issue 48 / 49 item 4 reshaped the inference audio
path), and ``tests/test_audio_path_recorded.py`` asserts that today's code gives the same vectors (cosine >=
0.99999 per row: float32 sums may run in another order on another CPU or with another batch).

The clips (:func:`make_clips`): 16 and 48 kHz, mono and stereo, WAV / FLAC (made here from seeded signals) and
OGG / MP3 (lossy: encoded once and kept in ``tests/fixtures/audio_path/``, so another libvorbis or LAME cannot
change them), short (one window) and long (several windows of the model's 2 s evaluation crop). The models
(:func:`toy_model`, :func:`aisfx_model`): a tiny small-cnn + small-transformer, and aiSFX's pretrained CNN (the
``aisfx`` wheel's checkpoint) with a small-transformer; every weight not read from the wheel is drawn from a
numpy generator, so the models are the same whatever torch's own random streams do.

The doors: ``LoadedModel.embed_audio`` with paths (whole, or cropped and in 1 s windows three at a time) and
with arrays, ``embed_library`` over a webdataset shard, ``mlatr embed``, ``mlatr index build`` (a file to skip
under ``--skip-bad`` among them), ``mlatr.Index.build`` of a folder, a sound query (its vector and scores),
``encode_manifest`` with frames (``mlatr eval`` / ``encode``) and the frozen-feature cache.

Run as a script to write the reference: ``python tests/audio_path_record.py``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import soundfile as sf
import torch

TESTS = Path(__file__).resolve().parent
if str(TESTS) not in sys.path:
    sys.path.insert(0, str(TESTS))

FIXTURES = TESTS / "fixtures"
LOSSY = FIXTURES / "audio_path"
REFERENCE = FIXTURES / "audio_path_reference.npz"
#: (name, rate, channels, seconds, format): lossless ones are made by :func:`make_clips`, lossy ones kept in LOSSY
CLIPS = [("wav16m_short", 16000, 1, 1.3, "WAV"), ("wav48s_long", 48000, 2, 5.2, "WAV"),
         ("flac16s_long", 16000, 2, 4.1, "FLAC"), ("flac48m_short", 48000, 1, 0.7, "FLAC"),
         ("ogg48s_long", 48000, 2, 3.3, "OGG"), ("ogg16m_short", 16000, 1, 1.6, "OGG"),
         ("mp348m_short", 48000, 1, 1.5, "MP3"), ("mp316s_long", 16000, 2, 4.4, "MP3")]
EXT = {"WAV": ".wav", "FLAC": ".flac", "OGG": ".ogg", "MP3": ".mp3"}
LOSSLESS = ("WAV", "FLAC")


def signal(i: int, rate: int, channels: int, seconds: float) -> np.ndarray:
    """A seeded clip ``[T, C]``: tones that change over time, noise, silence, an onset; channels differ."""
    rng = np.random.default_rng(100 + i)
    t = np.arange(int(round(rate * seconds))) / rate
    out = []
    for c in range(channels):
        f0 = 150.0 * (1.5 ** rng.integers(0, 8)) * (1 + 0.1 * c)
        sweep = np.sin(2 * np.pi * (f0 * t + 40.0 * t ** 2))
        env = (np.sin(2 * np.pi * (0.7 + 0.3 * i) * t) > -0.3).astype(float)
        x = 0.4 * env * sweep + 0.05 * rng.standard_normal(t.shape)
        x[: int(0.1 * rate)] = 0.0
        out.append(x)
    return (np.stack(out, axis=1) * 0.9).astype(np.float32)


def make_clips(folder: Path) -> list[Path]:
    """The clips of :data:`CLIPS` in ``folder`` (lossless made here, lossy copied from the fixtures)."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for i, (name, rate, channels, seconds, fmt) in enumerate(CLIPS):
        path = folder / f"{name}{EXT[fmt]}"
        if fmt in LOSSLESS:
            sf.write(path, signal(i, rate, channels, seconds), rate, format=fmt, subtype="PCM_16")
        else:
            path.write_bytes((LOSSY / path.name).read_bytes())
        paths.append(path)
    return paths


def write_lossy() -> None:
    """Encode the lossy clips into the fixtures (once; the files are then kept as they are)."""
    LOSSY.mkdir(parents=True, exist_ok=True)
    for i, (name, rate, channels, seconds, fmt) in enumerate(CLIPS):
        if fmt not in LOSSLESS:
            sf.write(LOSSY / f"{name}{EXT[fmt]}", signal(i, rate, channels, seconds), rate, format=fmt)


def numpy_weights(model: torch.nn.Module, skip: str | None = None, seed: int = 0) -> None:
    """Every parameter and batch-norm statistic of ``model`` (not under ``skip``) drawn from a numpy generator,
    whatever torch drew at initialisation: weights uniform in +-1/sqrt(fan-in), scales near 1, biases and means
    near 0, variances near 1."""
    rng = np.random.default_rng(seed)
    stats = [(n, b) for n, b in model.named_buffers() if n.endswith(("running_mean", "running_var"))]
    with torch.no_grad():
        for name, t in list(model.named_parameters()) + stats:
            if (skip and name.startswith(skip)) or not t.is_floating_point() or t.dim() == 0:
                continue
            noise = rng.standard_normal(t.shape).astype(np.float32)
            if t.dim() == 1:
                near_one = name.endswith(("weight", "running_var"))
                t.copy_(torch.from_numpy(np.abs(noise) * 0.05 + 1 if name.endswith("running_var") else
                                         noise * 0.05 + (1.0 if near_one else 0.0)))
                continue
            bound = 1.0 / np.sqrt(max(1, t[0].numel()))
            t.copy_(torch.from_numpy(rng.uniform(-bound, bound, t.shape).astype(np.float32)))


CORPUS = ["a low tone", "a high tone", "a double tone", "noise and a sweep", "a short sound", "a long sound"] * 3
DATA = {"sample_rate": 16000, "eval_max_seconds": 2.0, "languages": ["eng"]}


def toy_model(path: Path) -> Path:
    """A checkpoint of a tiny small-cnn + small-transformer model, weights from numpy."""
    from mlatr.inference.checkpoint import save_checkpoint
    from mlatr.models.dual_encoder import DualEncoder
    from mlatr.models.registry import build_audio_encoder, build_text_encoder

    audio = build_audio_encoder("small-cnn", channels=[8, 16], dim=32, num_heads=2, ff_dim=64)
    text = build_text_encoder("small-transformer", corpus=CORPUS, dim=32, num_layers=1, num_heads=2, ff_dim=64,
                              vocab_size=60, min_frequency=1)
    model = DualEncoder(audio, text, embed_dim=16)
    numpy_weights(model, seed=1)
    save_checkpoint(path, {"model_config": model.config(), "model": model.state_dict(), "train_config": {"data": DATA}})
    return path


def aisfx_model(path: Path) -> Path:
    """A checkpoint of aiSFX's pretrained CNN (the wheel's weights) with heads and a text tower from numpy."""
    from mlatr.inference.checkpoint import save_checkpoint
    from mlatr.models.dual_encoder import DualEncoder
    from mlatr.models.registry import build_audio_encoder, build_text_encoder

    audio = build_audio_encoder("aisfx")
    text = build_text_encoder("small-transformer", corpus=CORPUS, dim=32, num_layers=1, num_heads=2, ff_dim=64,
                              vocab_size=60, min_frequency=1)
    model = DualEncoder(audio, text, embed_dim=32)
    numpy_weights(model, skip="audio_encoder.", seed=2)
    save_checkpoint(path, {"model_config": model.config(), "model": model.state_dict(), "train_config": {"data": DATA}})
    return path


def manifest_of(paths: list[Path], path: Path) -> Path:
    """A manifest of the clips (captions from their names), one per line."""
    rows = [{"id": p.stem, "audio": str(p), "captions": {"eng": [p.stem.replace("_", " ") + " sound"]}}
            for p in paths]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def record_model(name: str, ckpt: Path, clips: list[Path], root: Path) -> dict[str, np.ndarray]:
    """Every door's vectors for one model."""
    from mlatr.cli import main
    from mlatr.data.manifest import Manifest
    from mlatr.data.webdataset_shards import export_webdataset
    from mlatr.inference.checkpoint import load_model
    from mlatr.inference.encoded_split import encode_manifest
    from mlatr.search import Index, build_index
    from mlatr.search.segments import Segmenting

    out: dict[str, np.ndarray] = {}
    loaded = load_model(ckpt)
    files = [str(p) for p in clips]
    out["embed_paths"] = loaded.embed_audio(files)
    out["embed_paths_windows"] = loaded.embed_audio(files, max_seconds=3.0, window_seconds=1.0, batch_size=3)
    arrays, rates = [], []
    for p in clips:
        data, rate = sf.read(p, dtype="float32", always_2d=True)
        arrays.append(data if data.shape[1] > 1 else data[:, 0])
        rates.append(rate)
    for rate in sorted(set(rates)):
        rows = [i for i, r in enumerate(rates) if r == rate]
        out[f"embed_arrays_{rate}"] = loaded.embed_audio([arrays[i] for i in rows], sample_rate=rate)
    manifest = manifest_of(clips, root / f"{name}.jsonl")
    out["encode_manifest"] = (enc := encode_manifest(loaded.model, Manifest.load(manifest), ["eng"], batch_size=4,
                                                     max_seconds=2.0)).audio
    frames = encode_manifest(loaded.model, Manifest.load(manifest), ["eng"], batch_size=4, max_seconds=2.0,
                             frames=True)
    out["encode_manifest_frames"] = frames.audio_frames.numpy().reshape(-1, frames.audio_frames.shape[-1])
    out["encode_manifest_mask"] = frames.audio_mask.numpy().astype(np.float32)
    out["encode_manifest_text"] = enc.text
    # mlatr embed (no crop: whole files in windows of the model's 2 s), mlatr index build (--skip-bad: a bad file)
    assert main(["embed", *files, "--model", str(ckpt), "-o", str(root / f"{name}.npz"), "--no-progress"]) == 0
    with np.load(root / f"{name}.npz") as z:
        out["cli_embed"] = z["embeddings"]
    bad = root / f"{name}_bad.wav"
    bad.write_bytes(b"RIFF not a wave file")
    rows = [{"id": p.stem, "audio": str(p), "captions": {"eng": [p.stem]}} for p in [*clips[:3], bad, *clips[3:]]]
    (root / f"{name}_bad.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    assert main(["index", "build", "--model", str(ckpt), "--manifest", str(root / f"{name}_bad.jsonl"), "-o",
                 str(root / f"{name}.idx"), "--skip-bad", "--no-progress", "--window-seconds", "1.5"]) == 0
    index = Index.load(root / f"{name}.idx")
    assert index.ids == [p.stem for p in clips], index.ids
    out["cli_index_build"] = np.asarray(index.embeddings)
    out["cli_index_captions"] = np.asarray(index.caption_embeddings)
    # no segments (they came later, and a long clip's best segment may outscore its pooled vector): the sound
    # query's scores are the pooled vectors' cosines, as recorded
    report = build_index(loaded, Manifest.load(manifest), root / f"{name}.idx.npz", batch_size=3,
                         segments=Segmenting())
    out["build_index_npz"] = report.index.embeddings
    folder = root / f"{name}_folder"
    folder.mkdir()
    for p in clips:
        (folder / p.name).write_bytes(p.read_bytes())
    built = Index.build(loaded, folder, progress=False)
    order = np.argsort(built.ids)
    out["index_build_folder"] = built.embeddings[order]
    out["sound_query_long"] = report.index.embed_sound(report.index.query_waveform(clips[1]))
    out["sound_query_short"] = report.index.embed_sound(report.index.query_waveform(clips[0]))
    hits = report.index.search_audio(clips[2], k=8)
    out["sound_query_scores"] = np.asarray([h.score for h in hits], np.float32)
    # webdataset shards: the same clips read from a tar's members
    export_webdataset(Manifest.load(manifest), str(root / f"{name}-shard-%06d.tar"))
    shards = loaded.embed_library(str(root / f"{name}-shard-000000.tar"), max_seconds=3.0)
    out["embed_shards"] = shards.embeddings[np.argsort(shards.ids)]
    return out


def record_frozen_features(clips: list[Path], root: Path) -> np.ndarray:
    """aiSFX's pooled features of the clips through the frozen-feature cache (a 2 s centre crop each)."""
    from mlatr.data.manifest import Manifest
    from mlatr.frozen_features import AudioFeatureCache, audio_features
    from mlatr.models.registry import build_audio_encoder

    manifest = Manifest.load(manifest_of(clips, root / "frozen.jsonl"))
    cache = AudioFeatureCache(root / "frozen.npz", "aisfx-test")
    return audio_features(build_audio_encoder("aisfx"), manifest, cache, 2.0, batch_size=3, progress=False)


def record(root: Path, models: tuple[str, ...] = ("toy", "aisfx")) -> dict[str, np.ndarray]:
    """``{model/door: array}`` for the clips of :func:`make_clips` (the aisfx doors only when its wheel is there)."""
    clips = make_clips(root / "clips")
    out: dict[str, np.ndarray] = {}
    for name in models:
        ckpt = (toy_model if name == "toy" else aisfx_model)(root / f"{name}.pt")
        out.update({f"{name}/{k}": v for k, v in record_model(name, ckpt, clips, root).items()})
    if "aisfx" in models:
        out["aisfx/frozen_features"] = record_frozen_features(clips, root)
    return out


if __name__ == "__main__":
    import tempfile

    if "--lossy" in sys.argv:
        write_lossy()
    with tempfile.TemporaryDirectory() as tmp:
        arrays = record(Path(tmp))
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                            cwd=TESTS).stdout.strip()
    np.savez(REFERENCE, recorded_at=np.asarray(commit), **arrays)
    print(f"wrote {REFERENCE}: {len(arrays)} arrays at {commit}")
