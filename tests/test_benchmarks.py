"""Every benchmark script runs at a toy size, so that none can rot unseen (a renamed function, a moved module).

Each script of ``benchmarks/`` runs as a person runs it (its own Python process, its command line) on toy
data: a few clips, a few steps, small dimensions. Only that it finishes (exit 0) and prints figures is
checked: the figures themselves belong to the docs, with the command and commit that measured them at full
size. ``gpu_suite.py`` runs through ``gpu_suite.sh`` in ``tests/test_gpu_suite.py``.
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BENCHMARKS = ROOT / "benchmarks"
#: scripts run by another test
ELSEWHERE = {"gpu_suite.py": "tests/test_gpu_suite.py"}

#: script -> its toy command line ({manifest}: toy tones; {checkpoint}, {index}: a tiny trained model and its
#: index; {tmp}: a folder of the run)
TOY = {
    "batch_collisions.py": ["{manifest}", "--batches", "3", "--batch-size", "4"],
    "bench_audio_stages.py": ["--seconds", "1", "--crop", "0.5", "--formats", "WAV,OGG", "--rates", "16000",
                              "--repeats", "1", "--no-cnn"],
    "bench_data_throughput.py": ["--clips", "6", "--dir", "{tmp}/data", "--modes", "store", "--steps", "1",
                                 "--warmup", "0", "--batch", "2"],
    "bench_duplicates.py": ["--model", "{checkpoint}", "--manifest", "{manifest}", "--originals", "2", "--min-seconds",
                            "0.5", "--trim", "0.2", "--batch-size", "4", "--work", "{tmp}/dups"],
    "bench_embed_audio.py": ["--manifest", "{manifest}", "--clips", "2", "--batch-size", "2", "--max-seconds", "1",
                             "--repeats", "1"],
    "bench_index_build.py": ["--manifest", "{manifest}", "--model", "{checkpoint}", "--limit", "6", "--cases",
                             "baseline,torch-1,torch-all", "--batch-size", "2", "--work", "{tmp}/bench"],
    "bench_evaluation.py": ["--clips", "20", "--captions", "2", "--dim", "16", "--repeats", "1", "--skip-loop"],
    "bench_filtered_ann.py": ["--clips", "300", "--dim", "8", "--queries", "3", "--clusters", "5", "--fractions",
                              "1,0.1", "--work", "{tmp}/filtered"],
    "bench_index_memory.py": ["--clips", "1", "--minutes", "0.03", "--max-seconds", "1", "--batch-size", "2",
                              "--work", "{tmp}/long"],
    "bench_langid.py": ["--synthetic", "10"],
    "bench_matching.py": ["all", "--threads", "1", "--batch", "4", "--la", "8", "--lt", "8", "--dim", "8",
                          "--repeats", "1", "--loop-pairs", "4", "--clips", "6", "--captions", "12",
                          "--budget-mb", "1"],
    "bench_milvus.py": ["--clips", "300", "--dim", "8", "--clusters", "5", "--queries", "2", "--work", "{tmp}/m"],
    "bench_moments.py": ["--model", "{checkpoint}", "--manifest", "{manifest}", "--events", "toy", "--minutes", "0.2",
                         "--settings", "2:1", "--repeats", "1", "--batch-size", "4", "--work", "{tmp}/moments"],
    "bench_runtime_retrieval.py": ["--model", "{checkpoint}", "--manifest", "{manifest}", "--split", "all", "--limit",
                                   "6", "--cases", "torch/fp32", "--batch-size", "2"],
    "bench_search.py": ["--dim", "8", "--sizes", "50", "--queries", "2", "--build-clips", "0"],
    "bench_search_scale.py": ["--clips", "300", "--dim", "8", "--queries", "2", "--add", "20", "--no-serve",
                              "--captions-per-clip", "2", "--clusters", "5", "--ann-exact-below", "200",
                              "--work", "{tmp}/scale"],
    "bench_serve.py": ["--model", "{checkpoint}", "--manifest", "{manifest}", "--clips", "40", "--queries", "2",
                       "--requests", "4", "--concurrency", "2", "--sound-queries", "1", "--embed-batch", "4",
                       "--load-ranks", "audio"],
    "bench_serve_start.py": ["{index}", "--repeat", "1"],
    "bench_step_memory.py": ["--methods", "KCL + grad cache", "--batch", "2", "--max-tokens", "4", "--threads", "1",
                             "--text-layers", "1", "--text-width", "32", "--dir", "{tmp}/memory"],
    "bench_tail_epoch.py": ["--clips", "4", "--blocks", "1", "--train-blocks", "0,1", "--corpus", "100",
                            "--budget", "1"],
    "bench_svr_overhead.py": ["--batch", "3", "--seconds", "0.5", "--steps", "1", "--warmup", "0",
                              "--memory-steps", "1", "--device", "cpu"],
    "bench_text_agreement.py": ["--synthetic", "0", "--encoders", "e5-small"],
    "bench_torchrun.py": ["--clips", "8", "--batch", "4", "--steps", "1", "--warmup", "0", "--cases", "ML-CLAP",
                          "--dir", "{tmp}/torchrun"],
    "bench_tsne.py": ["--points", "80", "--dim", "8", "--repeat", "1"],
}


@pytest.fixture(scope="module")
def toy(served_toy):
    """The session's toy manifest, tiny trained model and its index."""
    manifest, checkpoint, index = served_toy
    return {"manifest": manifest, "checkpoint": checkpoint, "index": index}


def test_every_benchmark_script_has_a_toy_run():
    scripts = {p.name for p in BENCHMARKS.glob("*.py")}
    assert scripts == set(TOY) | set(ELSEWHERE), "a benchmark without a toy run here (or one gone)"


@pytest.mark.parametrize("script", sorted(TOY))
def test_benchmark_runs_at_a_toy_size(script, toy, tmp_path):
    args = [a.format(tmp=tmp_path, **toy) for a in TOY[script]]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, str(BENCHMARKS / script), *args], capture_output=True, text=True,
                          timeout=300, env=env, cwd=tmp_path)
    assert done.returncode == 0, f"{script} {' '.join(args)}\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
    assert done.stdout.strip(), f"{script} printed nothing"
