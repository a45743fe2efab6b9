"""The supclap grid's bi-DynamicSVR rows, SupCLAP as defined and mlatr's earlier form, train to the recorded
losses and weights, on any CPU.

Each row's config tree comes from :func:`~mlatr.lab.experiments.supclap.supclap_config` (as ``mlatr experiment
supclap`` builds it), shrunk to the tiny model of the toy data, and :class:`~mlatr.training.trainer.Trainer`
trains it 2 epochs of 2 steps. The record: each step's logged terms (the radius's and the drift among them),
each epoch's loss and terms, and the
trained model's and objective's weights (per tensor, its norm and its inner product with a seeded vector:
:func:`behaviour_record.weight_digest`). ``tests/fixtures/supclap_rows_reference.json`` was written by
``python tests/test_supclap_rows_recorded.py OUT.json`` before the earlier form's switches left the losses
for experiment code (issue 49; its ``recorded_at`` commit): moving them must not change a number. Made in
float64 on one thread, as :mod:`behaviour_record` is and for its reason (a record that holds on every CPU).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import torch

TESTS = Path(__file__).resolve().parent
if str(TESTS) not in sys.path:
    sys.path.insert(0, str(TESTS))

from behaviour_record import compare, jsonable, unique_captions, weight_digest  # noqa: E402
from mlatr.inference.checkpoint import read_checkpoint  # noqa: E402
from mlatr.lab.experiments.supclap import supclap_config  # noqa: E402
from mlatr.training.config import config_from_dict  # noqa: E402
from mlatr.training.run_log import read_run_log  # noqa: E402
from mlatr.training.trainer import Trainer  # noqa: E402
from toydata import TINY_MODEL, make_toy_manifest  # noqa: E402

REFERENCE = TESTS / "fixtures" / "supclap_rows_reference.json"
METHODS = ("infonce-bi-dynamic", "infonce-bi-dynamic-earlier")


def record_row(root: Path, manifest: Path, method: str) -> dict:
    out = root / method
    cfg = config_from_dict(supclap_config(str(manifest), 2, method), [
        f"out_dir={out}", "data.languages=[eng,fra,deu]", "train.batch_size=6", "data.max_seconds=1.0",
        "data.eval_max_seconds=2.0", "optim.warmup_steps=1", "train.progress=false", *TINY_MODEL])
    Trainer(cfg).fit()
    last = read_checkpoint(out / "last.pt")
    history = [{"epoch": h["epoch"], "step": h["step"], "train_loss": h["train_loss"],
                "train_terms": h["train_terms"]} for h in last["history"]]
    steps = [{k: v for k, v in r.items() if k not in ("time", "elapsed", "seconds")}
             for r in read_run_log(out / "log.jsonl")[0]]
    return {"history": history, "steps": steps, "model": weight_digest(last["model"]),
            "objective": weight_digest(last["objective"])}


def record(root: Path) -> dict:
    threads, dtype = torch.get_num_threads(), torch.get_default_dtype()
    torch.set_num_threads(1)
    torch.set_default_dtype(torch.float64)
    try:
        manifest = unique_captions(make_toy_manifest(root / "toy", n_train=12, n_val=4, n_test=2))
        return {method: record_row(root, manifest, method) for method in METHODS}
    finally:
        torch.set_num_threads(threads)
        torch.set_default_dtype(dtype)


def test_supclap_rows_train_to_the_recorded_losses_and_weights(tmp_path):
    expected = json.loads(REFERENCE.read_text(encoding="utf-8"))["record"]
    found = jsonable(record(tmp_path))
    differences = compare(found, expected)
    assert not differences, f"{len(differences)} difference(s):\n" + "\n".join(differences[:30])
    # the two rows differ: the record would catch the earlier form silently becoming the defined one
    assert found[METHODS[0]]["history"] != found[METHODS[1]]["history"]


if __name__ == "__main__":
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        tree = jsonable(record(Path(tmp)))
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                            cwd=TESTS).stdout.strip()
    Path(sys.argv[1]).write_text(json.dumps({"recorded_at": commit, "record": tree}, indent=1) + "\n",
                                 encoding="utf-8")
