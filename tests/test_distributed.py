"""torchrun training on CPU: 2 processes x B/2 clips give 1 process x B's loss and gradients, for every scheme."""

import json
import os
import shutil
import subprocess
import sys

import pytest
import torch

from distributed_runs import free_port, launch, run_job
from mlatr.writer_lock import FOLDER_LOCK
from toydata import make_toy_manifest, tiny_config

#: The tiny model without dropout (each process draws its own dropout masks), a learnable temperature.
NO_DROPOUT = [
    "model.audio={name: small-cnn, channels: [8, 16], dim: 32, num_heads: 2, ff_dim: 64, dropout: 0.0}",
    "model.text={name: small-transformer, dim: 32, num_layers: 1, num_heads: 2, ff_dim: 64, vocab_size: 300, "
    "dropout: 0.0}",
    "model.learnable_temperature=true",
]

#: One step per epoch: 7 training clips, a global batch of 7 (shards of 4 and 3 clips); plain Adam.
COMMON = [*NO_DROPOUT, "train.batch_size=7", "train.eval_every=0", "optim.name=adam", "optim.warmup_steps=0",
          "optim.schedule=constant", "optim.grad_clip=null", "data.workers=0", "dist.timeout_minutes=3"]

CASES = {
    "mlclap": ["objective.scheme=mlclap"],
    "kcl-siglip-local": ["objective.scheme=kcl", "objective.base=siglip", "dist.local_loss=true"],
    "cacl-svr": ["objective.scheme=cacl", "objective.svr={radius: dynamic}"],
    "kcl-gradcache": ["objective.scheme=kcl", "optim.grad_cache_chunk=2"],
    "lgmm-local": ["objective.scheme=mlclap", "objective.matching={name: lgmm}", "dist.local_loss=true"],
}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Every case trained one step in 2 processes, and the resume jobs; then the same cases in this process."""
    root = tmp_path_factory.mktemp("dist")
    manifest = make_toy_manifest(root / "data", n_train=7, n_val=2, n_test=0)

    def overrides(out, extra, epochs=1):
        return [f"data.manifest={manifest}", f"out_dir={out}", "data.languages=[eng,fra,deu]", f"train.epochs={epochs}",
                "data.max_seconds=1.0", "train.progress=false", "train.log_every=1", *COMMON, *extra]

    jobs = [{"overrides": overrides(root / "two" / name, extra), "out": str(root / "two" / name)}
            for name, extra in CASES.items()]
    full, part = root / "two" / "resume-full", root / "two" / "resume-part"
    jobs.append({"overrides": overrides(full, CASES["mlclap"], epochs=2), "out": str(full), "grad_step": 1})
    jobs.append({"overrides": overrides(part, CASES["mlclap"], epochs=2), "out": str(part), "stop_at_epoch": 2})
    launch(jobs, world=2, timeout_s=420)
    for name, extra in CASES.items():
        run_job({"overrides": overrides(root / "one" / name, extra), "out": str(root / "one" / name)})
    run_job({"overrides": overrides(part, CASES["mlclap"], epochs=2), "out": str(part), "resume": True,
             "grad_step": 1})  # the 2-process run resumed in 1 process
    return root


def step_losses(out):
    lines = [json.loads(x) for x in (out / "log.jsonl").read_text().splitlines()]
    return [r["loss"] for r in lines if r["type"] == "step"]


@pytest.mark.parametrize("case", list(CASES))
def test_two_processes_equal_one(runs, case):
    one, two = runs / "one" / case, runs / "two" / case
    assert step_losses(two)[0] == pytest.approx(step_losses(one)[0], rel=1e-5)
    a, b = torch.load(one / "compare.pt"), torch.load(two / "compare.pt")
    assert a["grads"].keys() == b["grads"].keys() and "log_temperature" in a["grads"]
    for name, grad in a["grads"].items():
        torch.testing.assert_close(b["grads"][name], grad, rtol=1e-4, atol=1e-6, msg=name)
    # the update: Adam's first step is lr * g / (|g| + eps), so entries whose gradient is rounding noise
    # (zero in exact arithmetic) may move either way; every other entry moves the same
    for name, grad in a["grads"].items():
        clear = grad.abs() > 1e-5
        torch.testing.assert_close(b["weights"][name][clear], a["weights"][name][clear], rtol=1e-5, atol=1e-7,
                                   msg=name)
    written = sorted(p.name for p in two.iterdir() if p.name != FOLDER_LOCK)  # the run's writer lock stays
    assert written == ["best.pt", "compare.pt", "config.yaml", "last.pt", "log.jsonl", "summary.json"]
    assert len(step_losses(two)) == 1  # one process wrote the log


def test_resume_with_another_world_size(runs):
    """Epoch 2 of a 2-process run, resumed in 1 process, computes what the 2-process run computed."""
    full, part = runs / "two" / "resume-full", runs / "two" / "resume-part"
    assert step_losses(part)[1] == pytest.approx(step_losses(full)[1], rel=1e-5)
    a, b = torch.load(full / "compare.pt"), torch.load(part / "compare.pt")
    assert a["start"] == (0, 0) and b["start"][0] == 1 and b["start"][1] > 0  # a resume, not a fresh start
    for name, grad in a["grads"].items():
        torch.testing.assert_close(b["grads"][name], grad, rtol=1e-4, atol=1e-6, msg=name)


def test_torchrun_command_line(tmp_path):
    """``torchrun --nproc_per_node=2 -m mlatr train``: one run, written once, validated by the first process."""
    manifest = make_toy_manifest(tmp_path / "data", n_train=8, n_val=3, n_test=0)
    out = tmp_path / "run"
    cfg = tiny_config(manifest, out, "data.workers=1", "dist.timeout_minutes=3", epochs=1)
    (tmp_path / "c.yaml").write_text(json.dumps(cfg.to_dict()))
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    env.update(GLOO_SOCKET_IFNAME="lo", OMP_NUM_THREADS="1")
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2",
                           "--master_addr=127.0.0.1", f"--master_port={free_port()}", "-m", "mlatr", "train",
                           "--config", str(tmp_path / "c.yaml")], capture_output=True, text=True, timeout=300,
                          env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.count('"steps": 1') == 1  # the summary is printed once
    summary = json.loads((out / "summary.json").read_text())
    assert summary["steps"] == 1 and summary["best_epoch"] == 1
    epochs = [json.loads(x) for x in (out / "log.jsonl").read_text().splitlines() if '"epoch"' in x]
    assert [r["epoch"] for r in epochs if r["type"] == "epoch"] == [1] and "val" in epochs[-1]
    shutil.rmtree(out)
