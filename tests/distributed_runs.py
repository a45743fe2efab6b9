"""Training runs for the distributed tests: the same job in one process or in each of N local processes.

:func:`run_job` trains one config and, in the first process, saves what the tests compare: every
parameter's gradient at the first optimizer step (taken just before it) and the weights after the run.
:func:`launch` starts N processes on 127.0.0.1 (gloo) with torchrun's environment variables, each running
the jobs in order, and kills them all if they do not finish in time.
"""

from __future__ import annotations

import os
import socket
import sys
import time
from pathlib import Path

import torch


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_job(job: dict) -> None:
    """``job``: ``overrides`` (config), ``out`` (its out_dir), optional ``resume``, ``stop_at_epoch`` (a
    KeyboardInterrupt at the first step of that epoch, after the previous epoch's checkpoint) and
    ``grad_step`` (the optimizer step whose gradients are kept; default the run's first)."""
    from mlatr.training.config import load_config
    from mlatr.training.trainer import Trainer

    def stop(trainer, info):
        if info["epoch"] == job.get("stop_at_epoch"):
            raise KeyboardInterrupt

    trainer = Trainer(load_config(None, job["overrides"]), resume=job.get("resume", False), callbacks=[stop])
    names = {id(p): n for n, p in trainer.model.named_parameters()}
    names.update({id(p): "objective." + n for n, p in trainer.objective.named_parameters()})
    first: dict[str, torch.Tensor] = {}

    def keep_gradients(optimizer, args, kwargs):
        if not first and trainer.step >= job.get("grad_step", 0):
            for group in optimizer.param_groups:
                for p in group["params"]:
                    if p.grad is not None:
                        first[names[id(p)]] = p.grad.detach().clone()

    trainer.optimizer.register_step_pre_hook(keep_gradients)
    start = (trainer.epoch, trainer.step)  # where the run (or its resume) begins
    try:
        trainer.fit()
    except KeyboardInterrupt:
        return
    if trainer.dist.is_main:
        weights = {**{k: v.clone() for k, v in trainer.model.state_dict().items()},
                   **{"objective." + k: v.clone() for k, v in trainer.objective.state_dict().items()}}
        torch.save({"start": start, "grads": first, "weights": weights},
                   Path(job["out"]) / "compare.pt")


def _worker(rank: int, world: int, port: int, jobs: list[dict]) -> None:
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE=str(world),
                      MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    if sys.platform.startswith("linux"):
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    torch.set_num_threads(1)
    from mlatr.inference.process_group import shutdown

    try:
        for job in jobs:
            run_job(job)
    finally:
        shutdown()


def launch(jobs: list[dict], world: int = 2, timeout_s: float = 300.0) -> None:
    """Run ``jobs`` in ``world`` local processes; raise if one fails or they take longer than ``timeout_s``."""
    import torch.multiprocessing as mp

    context = mp.start_processes(_worker, args=(world, free_port(), jobs), nprocs=world, join=False,
                                 start_method="spawn")
    deadline = time.monotonic() + timeout_s
    try:
        while not context.join(timeout=1.0):
            if time.monotonic() > deadline:
                raise TimeoutError(f"distributed jobs still running after {timeout_s:.0f} s")
    finally:
        for process in context.processes:
            if process.is_alive():
                process.kill()
