"""The planner's traced memory equals the live-tensor peak of really running the step (within 5 %).

Each case traces one step of a config on fake tensors (what ``mlatr plan`` does, at full size) and runs the
same step for real on the CPU with random weights, both measured by the same live-tensor tracker. A
prediction that drifted from the program it traces (a module built differently on the fake device, a
caption tokenised to another length, a step path the trace skips) fails here.
"""

import json
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from clitools import assert_user_error, run_cli
from mlatr.lab.planning.architectures import ArchitectureOnlyText
from mlatr.lab.planning.cuda_kernels import ON_CPU, cuda_choices
from mlatr.lab.planning.gpu_plan import format_sweep, largest_batch, make_plan, sweep
from mlatr.lab.planning.gpus import GPU
from mlatr.lab.planning.step_trace import StepTracer, trace_step
from mlatr.lab.planning.tracker import LiveTensorTracker, cuda_rounded
from mlatr.training.config import load_config

SMALL = ["model.audio={name: small-cnn, channels: [8, 16], dim: 32, num_heads: 2, ff_dim: 64}",
         "model.text={name: small-transformer, dim: 32, num_layers: 1, num_heads: 2, ff_dim: 64, vocab_size: 300}",
         "model.embed_dim=32", "data.languages=[eng,fra,deu]", "data.max_seconds=1.0", "train.batch_size=6"]
#: CED and SONAR's classes at a medium size (the presets' code path, smaller widths), with dropout.
MEDIUM = ["model.audio={name: ced, dim: 64, depth: 2, num_heads: 4, dropout: 0.1}", "model.text={name: sonar}",
          "model.embed_dim=64", "data.languages=[eng,fra,deu,spa]", "data.max_seconds=2.0", "train.batch_size=4",
          "optim.name=adam"]
MEDIUM_TEXT = {"vocab_size": 500, "d_model": 64, "encoder_layers": 2, "encoder_attention_heads": 4,
               "encoder_ffn_dim": 128, "max_position_embeddings": 64}

#: Every scheme, SVR, LGMM and gradient caching, on small and medium models.
CASES = {
    "cacl": SMALL + ["objective.scheme=cacl"],
    "kcl-svr": SMALL + ["objective.scheme=kcl", "objective.svr={radius: dynamic}"],
    "mlclap-lgmm": SMALL + ["objective.scheme=mlclap", "objective.matching={name: lgmm}"],
    "kcl-grad-cache": SMALL + ["objective.scheme=kcl", "optim.grad_cache_chunk=4"],
    "medium-kcl": MEDIUM + ["objective.scheme=kcl"],
    "medium-cacl-grad-cache": MEDIUM + ["objective.scheme=cacl", "optim.grad_cache_chunk=3"],
    # both encoders' eager attention: the score tensors are ordinary operations, traced as they run
    "medium-kcl-eager": MEDIUM + ["objective.scheme=kcl", "model.audio.attention=eager", "model.text.attention=eager"],
}
#: Cases run with the CUDA kernel substitutions a CPU can run for real (cuda_kernels.ON_CPU: the fused dropout
#: and the matching head's score blocks), in the real step and in the trace alike.
KERNEL_CASES = {
    "medium-mlclap-dropout": MEDIUM + ["objective.scheme=mlclap"],
    "mlclap-lgmm-blocks": SMALL + ["objective.scheme=mlclap", "objective.matching={name: lgmm}"],
}
KCL = SMALL + ["objective.scheme=kcl"]
#: Gradient checkpointing of both encoders, with dropout, deep enough that the blocks' activations set the peak.
CHECKPOINTING = ["model.audio.gradient_checkpointing=true", "model.text.gradient_checkpointing=true"]
DEEP = MEDIUM + ["objective.scheme=mlclap", "model.audio.depth=4"]
DEEP_TEXT = {**MEDIUM_TEXT, "encoder_layers": 4}


def planned_and_real(cfg, arch=None, cuda_kernels=()):
    """One step of ``cfg`` (12-token captions) traced on fake tensors and run for real on the CPU, both measured
    by the same tracker."""
    common = {"caption_tokens": 12, "foreach": True, "flops": False, "text_architecture": arch,
              "cuda_kernels": cuda_kernels}
    torch.manual_seed(0)
    real = trace_step(cfg, fake=False, **common)
    return trace_step(cfg, fake=True, **common), real


def assert_peaks_agree(planned, real):
    assert planned.peak == pytest.approx(real.peak, rel=0.05)
    assert planned.phase_peaks["forward-backward"] == pytest.approx(real.phase_peaks["forward-backward"], rel=0.05)


@pytest.mark.parametrize("case", sorted(CASES))
def test_fake_trace_predicts_the_real_step(case):
    planned, real = planned_and_real(load_config(None, CASES[case]), MEDIUM_TEXT if case.startswith("medium") else None)
    for part in ("weights", "optimizer_state"):  # the same tensors (a scalar buffer may differ in sharing)
        assert planned.parts[part] == pytest.approx(real.parts[part], rel=1e-3)
    assert planned.texts == real.texts
    assert_peaks_agree(planned, real)


@pytest.mark.parametrize("case", sorted(KERNEL_CASES))
def test_the_kernel_substitutions_a_cpu_can_run_predict_the_real_step(case):
    assert_peaks_agree(*planned_and_real(load_config(None, KERNEL_CASES[case]),
                                         MEDIUM_TEXT if case.startswith("medium") else None, ON_CPU))


def test_checkpointing_with_dropout_is_traced_as_the_real_step_runs():
    """Checkpointing recomputes each block's forward inside backward, dropout included: the recomputation takes
    the same kernels as the forward (the fused dropout's one-byte mask), in the real step and in the trace, which
    agree; with every substitution (what ``mlatr plan`` and its option search trace, CUDA's attention kernels in
    the recomputation too) the checkpointed step is traced and its forward-backward peak is below the plain one's."""
    assert_peaks_agree(*planned_and_real(load_config(None, DEEP + CHECKPOINTING), DEEP_TEXT, ON_CPU))
    on_gpu = [trace_step(load_config(None, DEEP + options), caption_tokens=12, fake=True, foreach=True, flops=False,
                         text_architecture=DEEP_TEXT, cuda_kernels=True) for options in ([], CHECKPOINTING)]
    assert on_gpu[1].phase_peaks["forward-backward"] < 0.95 * on_gpu[0].phase_peaks["forward-backward"]


def test_a_reused_tracer_traces_other_lengths_as_a_fresh_one():
    """The typical and the worst batch are traced on one build: other caption tokens and clip seconds."""
    cfg = load_config(None, KCL)
    tracer = StepTracer(cfg, caption_tokens=12)
    longer = load_config(None, KCL + ["data.max_seconds=1.5"])
    assert tracer.trace(longer, caption_tokens=20) == trace_step(longer, caption_tokens=20, fake=True)


@pytest.fixture(scope="module")
def kcl_traces():
    """Fake traces of the small KCL config at batch 6 and 12."""
    return [trace_step(load_config(None, KCL + [f"train.batch_size={b}"]), caption_tokens=12, fake=True)
            for b in (6, 12)]


def test_a_reused_tracer_traces_what_a_fresh_one_does(kcl_traces):
    """A tracer built at batch 6 traces batch 12 and gets what a fresh trace of that config gets: every
    part, both phases' peaks, the FLOPs (the plan's doubled batch and its option search reuse the built
    model); a config that changes what is built is not traced on it."""
    tracer = StepTracer(load_config(None, KCL), caption_tokens=12)
    assert tracer.trace() == kcl_traces[0]
    assert tracer.trace(load_config(None, KCL + ["train.batch_size=12"])) == kcl_traces[1]
    assert tracer.reuses(load_config(None, KCL + ["optim.grad_cache_chunk=4", "optim.amp='off'"]))
    assert not tracer.reuses(load_config(None, KCL + ["model.text.num_layers=2"]))
    assert not tracer.reuses(load_config(None, KCL + ["objective.svr={radius: dynamic}"]))


def test_parts_are_the_model_and_adam_sizes(kcl_traces):
    """Weights = 4 bytes per parameter (+ buffers); Adam's state = two fp32 moments per trained parameter
    (+ a scalar step each); FLOPs counted."""
    t = kcl_traces[0]
    assert 4 * t.parameters <= t.parts["weights"] < 4 * t.parameters + 2**17  # + the mel filterbank buffers
    assert 8 * t.trainable <= t.parts["optimizer_state"] < 8 * t.trainable + 2**12
    assert t.flops > 0 and kcl_traces[1].flops > t.flops


def test_the_substitutions_end_with_their_block_even_on_an_error():
    """``cuda_choices`` replaces ``torch.nn.functional``'s dropout and attention for the process: they are the
    fused dropout inside the block (a boolean mask is what it saves) and torch's own again after it."""
    dropout, attention = F.dropout, F.scaled_dot_product_attention
    with pytest.raises(RuntimeError, match="inside"), cuda_choices():
        assert F.dropout is not dropout and F.scaled_dot_product_attention is not attention
        x = torch.ones(8, 8, requires_grad=True)
        saved = []
        with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t.dtype) or t, lambda t: t):
            F.dropout(x, 0.5, True)
        assert torch.bool in saved
        raise RuntimeError("inside")
    assert F.dropout is dropout and F.scaled_dot_product_attention is attention
    with cuda_choices(ON_CPU):
        assert F.dropout is not dropout and F.scaled_dot_product_attention is attention


def test_tracker_counts_live_storages():
    tracker = LiveTensorTracker()
    with tracker:
        a = torch.zeros(1000)  # 4000 bytes
        b = torch.ones(500)  # 2000
        view = a[:10]  # same storage: not counted again
        del b
        c = torch.zeros(250)  # 1000
    assert tracker.peak == 6000 and tracker.current == 5000
    assert view.shape == (10,) and c.numel() == 250
    assert cuda_rounded(1) == 512 and cuda_rounded(512) == 512 and cuda_rounded(513) == 1024


def test_full_size_sonar_has_its_published_parameter_count():
    with torch.device("meta"):
        text = ArchitectureOnlyText("sonar", caption_tokens=10)
    assert sum(p.numel() for p in text.parameters()) == pytest.approx(766e6, rel=0.005)


def test_largest_batch_meets_the_budget_on_the_traced_line(kcl_traces):
    small, large = kcl_traces
    gpu = GPU("toy", 1, 1.0, 1.0)
    slope = (large.phase_peaks["forward-backward"] - small.phase_peaks["forward-backward"]) / 6
    budget = int(small.phase_peaks["forward-backward"] + 10.5 * slope) + small.rounding + int(8.125 * 2**20)
    assert largest_batch(small, large, budget, gpu) == 16


def test_plan_reports_a_config_that_does_not_fit():
    cfg = load_config(None, SMALL)
    plan = make_plan(cfg, GPU("tiny-gpu", 10, 1.0, 1.0), caption_tokens=12, reserve_mib=0.0, search=False,
                     say=lambda m: None)
    assert not plan["fits"] and plan["predicted_mib"] > 10
    assert plan["step_time_lower_bound_s"] == pytest.approx(plan["flops_per_step"] / 1e12)


def test_plan_command_prints_the_plan_as_json(capsys):
    config = Path(__file__).resolve().parents[1] / "configs" / "demo.yaml"
    result = run_cli(capsys, "plan", "--config", str(config), "train.batch_size=4", "data.max_seconds=1.0",
                     "--gpu", "l4-24gb", "--no-search", "--json")
    assert result.code == 0, result.err
    plan = json.loads(result.out)
    assert plan["gpu"] == "l4-24gb" and plan["batch_size"] == 4 and plan["fits"]
    assert plan["predicted_mib"] == pytest.approx(sum(plan["parts_mib"].values()) + plan["rounding_mib"]
                                                  + plan["workspace_mib"])


def test_plan_command_refuses_bad_input(capsys):
    config = Path(__file__).resolve().parents[1] / "configs" / "demo.yaml"
    assert_user_error(run_cli(capsys, "plan", "--config", str(config), "--caption-tokens", "1"), "--caption-tokens")
    assert_user_error(run_cli(capsys, "plan", "--config", str(config), "--sweep", "train.batch_size"), "--sweep")


def test_plan_finds_the_option_set_that_fits():
    """A budget between the plain step's prediction and gradient caching's: the search reports an option set
    that fits, traced, with its FLOPs against the plain step's (caching re-encodes: more FLOPs)."""
    cfg = load_config(None, KCL[:-1] + ["train.batch_size=16"])
    plain = make_plan(cfg, GPU("big", 1 << 20, 1.0, 1.0), caption_tokens=12, search=False, say=lambda m: None)
    cached = make_plan(load_config(None, KCL[:-1] + ["train.batch_size=16", "optim.grad_cache_chunk=8"]),
                       GPU("big", 1 << 20, 1.0, 1.0), caption_tokens=12, search=False, say=lambda m: None)
    assert cached["predicted_mib"] < plain["predicted_mib"]
    memory = (plain["predicted_mib"] + cached["predicted_mib"]) / 2
    plan = make_plan(cfg, GPU("mid", memory, 1.0, 1.0), caption_tokens=12, reserve_mib=0.0, say=lambda m: None)
    assert not plan["fits"]
    option = plan["fitting_options"]
    assert option is not None and option["predicted_mib"] <= memory
    assert option["flops_ratio"] > 1.0


def test_sweep_over_the_batch_grows_the_forward_backward_peak():
    rows = sweep(load_config(None, KCL), GPU("big", 1 << 20, 1.0, 1.0), "train.batch_size", ["2", "4"],
                 caption_tokens=12, say=lambda m: None)
    assert [r["texts_per_step"] for r in rows] == [6, 12]
    assert rows[1]["phase_peaks_mib"]["forward-backward"] > rows[0]["phase_peaks_mib"]["forward-backward"]
    assert "fwd-bwd peak" in format_sweep("train.batch_size", rows)


def test_plan_command_plans_both_batches_from_a_manifest_in_each_precision(capsys, tmp_path):
    rows = [{"id": f"c{i}", "audio": f"c{i}.wav", "split": "train", "duration": 0.5 + 0.1 * i,
             "captions": {"eng": ["a dog " * (1 + i % 5)], "fra": ["un chien " * (1 + i % 3)]}} for i in range(12)]
    manifest = tmp_path / "m.jsonl"
    manifest.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    config = Path(__file__).resolve().parents[1] / "configs" / "demo.yaml"
    result = run_cli(capsys, "plan", "--config", str(config), *[o for o in SMALL if not o.startswith("train.")],
                     "data.languages=[eng,fra]", "train.batch_size=3", "objective.scheme=kcl", "--manifest",
                     str(manifest), "--precision", "fp32,bf16", "--no-search", "--json")
    assert result.code == 0, result.err
    plans = json.loads(result.out)["plans"]
    assert [p["precision"] for p in plans] == ["fp32", "bf16 autocast"]
    for plan in plans:
        lengths = plan["lengths"]
        assert plan["caption_tokens"] == lengths["worst"]["caption_tokens"] >= lengths["typical"]["caption_tokens"]
        assert plan["typical_batch"]["predicted_mib"] <= plan["predicted_mib"]
        assert plan["audio_seconds"] == lengths["worst"]["audio_seconds"] <= 1.0


def test_plan_without_a_manifest_says_what_it_assumed(capsys):
    config = Path(__file__).resolve().parents[1] / "configs" / "demo.yaml"
    result = run_cli(capsys, "plan", "--config", str(config), "train.batch_size=4", "data.max_seconds=1.0",
                     "--no-search", "--json", "--caption-tokens", "20")
    assert result.code == 0, result.err
    assert "every caption 20 tokens" in json.loads(result.out)["lengths"]["assumed"]
