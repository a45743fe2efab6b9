"""benchmarks/gpu_suite.sh on the CPU: its mechanics (real steps measured beside the planner's prediction)."""

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_gpu_suite_runs_on_cpu_and_measures_beside_the_plan(tmp_path):
    out = tmp_path / "suite.json"
    env = {**os.environ, "DEVICE": "cpu", "TINY": "1", "STEPS": "1", "OUT": str(out), "PYTHON": sys.executable,
           "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(["bash", str(ROOT / "benchmarks" / "gpu_suite.sh"), "--schemes", "kcl",
                           "--options", "plain,grad-cache-8"], env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads(out.read_text())
    rows = {(r["scheme"], r["option"]): r for r in result["rows"]}
    assert set(rows) == {("kcl", "plain"), ("kcl", "grad-cache-8")}
    for row in rows.values():  # on the CPU the measurement is the real step's live-tensor peak
        assert abs(row["measured_over_predicted"] - 1) < 0.05
        assert row["step_s"] > 0
    assert result["loader_clips_per_s"] > 0
    assert "measured MiB" in proc.stdout and "loader" in proc.stdout
