"""Runs you can watch: the line per epoch (loss terms, validation R@1 / MRV, ETA), train.log loggers
(tensorboard, wandb offline), and mlatr plot's curves equal to the log."""

import json
import re

import pytest

from mlatr.cli import main
from mlatr.errors import MlatrError
from mlatr.training.epoch_line import duration, epoch_line, eta_seconds
from mlatr.training.run_curves import draw_runs, read_curves
from mlatr.training.run_log import read_run_log
from mlatr.training.trackers import epoch_scalars, logger_names
from mlatr.training.trainer import Trainer
from toydata import make_toy_manifest, tiny_config


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory):
    """Two tiny runs (InfoNCE, and InfoNCE + SVR: two loss terms) of 2 epochs, and their stderr lines."""
    root = tmp_path_factory.mktemp("watch")
    manifest = make_toy_manifest(root / "toy", n_train=16, n_val=4, n_test=2)
    runs = {}
    for name, extra in (("plain", []), ("svr", ["objective.svr={radius: static}"])):
        cfg = tiny_config(manifest, root / name, *extra)
        runs[name] = (root / name, Trainer(cfg).fit())
    return runs


def test_epoch_line_reads_the_record():
    record = {"epoch": 3, "train_loss": 2.5, "train_terms": {"loss_infonce": 2.25, "loss_svr": 0.25},
              "val": {"t2a": {"avg": {"R1": 12.345}}, "a2t": {"avg": {"R1": 10.0}}, "consistency": {"mrv": 31.25}}}
    line = epoch_line(record, 12, 4.2, eta_seconds([4.0, 6.0], 3, 12), best=True)
    assert line == ("epoch 3/12  loss 2.5000 (infonce 2.2500, svr 0.2500)  val R@1 t2a 12.3 a2t 10.0 MRV 31.2 "
                    "(best)  4s  ETA 45s")
    last = epoch_line({"epoch": 12, "train_loss": 1.0}, 12, 65, 0.0, best=False)
    assert last == "epoch 12/12  loss 1.0000  1m05s  done"
    assert eta_seconds([], 0, 3) is None and duration(7500) == "2h05m"


def test_training_prints_one_line_per_epoch(tmp_path, capsys):
    manifest = make_toy_manifest(tmp_path / "toy", n_train=8, n_val=4, n_test=2)
    Trainer(tiny_config(manifest, tmp_path / "run", epochs=3)).fit()
    lines = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("epoch ")]
    assert [ln.split()[1] for ln in lines] == ["1/3", "2/3", "3/3"]
    epochs = read_run_log(tmp_path / "run" / "log.jsonl")[1]
    for line, record in zip(lines, epochs, strict=True):
        assert f"loss {record['train_loss']:.4f}" in line
        assert f"t2a {record['val']['t2a']['R1']:.1f} a2t {record['val']['a2t']['R1']:.1f}" in line
        assert f"MRV {record['val']['mrv']:.1f}" in line
    assert re.search(r"ETA \d+s$", lines[0]) and lines[-1].endswith("done")


def test_epoch_terms_are_the_mean_of_the_step_terms(two_runs):
    run_dir, _ = two_runs["svr"]
    steps, epochs = read_run_log(run_dir / "log.jsonl")
    assert set(epochs[0]["train_terms"]) == {"loss_contrastive", "loss_svr"}
    for record in epochs:  # log_every=1, no accumulation: every step is logged
        mine = [s for s in steps if s["epoch"] == record["epoch"]]
        for term, mean in record["train_terms"].items():
            assert mean == pytest.approx(sum(s[term] for s in mine) / len(mine))
        assert record["train_loss"] == pytest.approx(sum(s["loss"] for s in mine) / len(mine))


def test_plot_draws_each_term_and_the_validation_curves_as_logged(two_runs, tmp_path, capsys):
    dirs = [str(two_runs["plain"][0]), str(two_runs["svr"][0])]
    out = tmp_path / "curves.png"
    assert main(["plot", *dirs, "-o", str(out)]) == 0
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and f"wrote {out}" in capsys.readouterr().out
    fig = draw_runs([read_curves(d) for d in dirs])
    panels = {ax.get_title(): {ln.get_label(): (list(ln.get_xdata()), list(ln.get_ydata())) for ln in ax.lines}
              for ax in fig.axes if ax.get_visible()}
    assert set(panels) == {"loss", "loss: contrastive", "loss: svr", "val t2a R@1 (%)", "val t2a R@10 (%)",
                           "val a2t R@1 (%)", "val MRV"}
    for name in ("plain", "svr"):
        steps, epochs = read_run_log(two_runs[name][0] / "log.jsonl")
        assert panels["loss"][name] == ([s["step"] for s in steps], [s["loss"] for s in steps])
        assert panels["val MRV"][name] == ([e["epoch"] for e in epochs], [e["val"]["mrv"] for e in epochs])
        assert panels["val t2a R@1 (%)"][name][1] == [e["val"]["t2a"]["R1"] for e in epochs]
        assert panels["val t2a R@10 (%)"][name][1] == [e["val"]["t2a"]["R10"] for e in epochs]
    steps = read_run_log(two_runs["svr"][0] / "log.jsonl")[0]
    assert panels["loss: svr"] == {"svr": ([s["step"] for s in steps], [s["loss_svr"] for s in steps])}
    with pytest.raises(MlatrError, match="log.jsonl: no such file"):
        read_curves(tmp_path)


def test_default_output_is_in_the_first_run(two_runs, capsys):
    run_dir = two_runs["plain"][0]
    assert main(["plot", str(run_dir)]) == 0
    assert (run_dir / "curves.png").is_file()


def test_loggers_tensorboard_and_wandb_offline(tmp_path, monkeypatch):
    pytest.importorskip("wandb")
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    manifest = make_toy_manifest(tmp_path / "toy", n_train=8, n_val=4, n_test=2)
    Trainer(tiny_config(manifest, tmp_path / "run", "train.log=[tensorboard, wandb]")).fit()
    _, epochs = read_run_log(tmp_path / "run" / "log.jsonl")
    events = EventAccumulator(str(tmp_path / "run" / "tensorboard")).Reload()
    mrv = [e.value for e in events.Scalars("val/mrv")]
    assert mrv == pytest.approx([e["val"]["mrv"] for e in epochs])
    assert len(events.Scalars("train/loss")) == epochs[-1]["step"]
    offline = list((tmp_path / "run" / "wandb").glob("offline-run-*"))
    assert len(offline) == 1 and list(offline[0].glob("run-*.wandb"))
    with pytest.raises(MlatrError, match="unknown logger 'mlflow'"):
        logger_names(["mlflow"])
    assert logger_names([], tensorboard=True) == ["tensorboard"]


def test_epoch_scalars_name_the_curves():
    record = {"epoch": 1, "step": 4, "train_loss": 1.5, "epoch_time_s": 2.0, "train_terms": {"loss_a": 1.5},
              "val_score": 5.0, "val": {"t2a": {"avg": {"R1": 4.0}}, "a2t": {"avg": {"R1": 6.0}},
                                        "consistency": {"mrv": 9.0}}}
    assert epoch_scalars(record) == {"epoch/train_loss": 1.5, "epoch/time_s": 2.0, "epoch/loss_a": 1.5,
                                     "val/t2a_R1": 4.0, "val/a2t_R1": 6.0, "val/avg_R1": 5.0, "val/mrv": 9.0}
    assert json.dumps(record)


def test_sparse_step_logs_fall_back_to_the_epoch_means(tmp_path):
    """train.log_every larger than an epoch: the loss panels use each epoch's mean loss and terms."""
    val = {"t2a": {"R1": 1.0}, "a2t": {"R1": 2.0}, "mrv": 3.0}
    lines = [{"type": "step", "step": 10, "epoch": 2, "loss": 9.0, "loss_a": 5.0, "loss_b": 4.0}]
    lines += [{"type": "epoch", "epoch": e, "step": 6 * e, "train_loss": 3.0 / e,
               "train_terms": {"loss_a": 2.0 / e, "loss_b": 1.0 / e}, "val": val} for e in (1, 2, 3)]
    (tmp_path / "log.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    curves = read_curves(tmp_path)
    assert curves.losses == {"loss": ([6, 12, 18], [3.0, 1.5, 1.0]), "loss_a": ([6, 12, 18], [2.0, 1.0, 2 / 3]),
                             "loss_b": ([6, 12, 18], [1.0, 0.5, 1 / 3])}
    assert curves.val["val MRV"] == ([1, 2, 3], [3.0, 3.0, 3.0])
