"""Peak memory of one training step: ML-CLAP vs KCL (K = 8) vs KCL with gradient caching (ATRI Table 4).

The text encoder is XLM-R-base sized (12 layers, width 768, 12 heads, feed-forward 3072; randomly
initialised from a ``transformers`` config, nothing downloaded) with a character-level vocabulary, so its
parameters are the real model's minus most of the embedding table and the activations of 8 captions per
clip dominate the step, as in ATRI's KCL. Audio: the demo's small CNN on 5 s clips of the synthetic
benchmark (8 languages). Same batch for every method (``--batch`` clips; KCL encodes 8 captions per clip).

Each method runs in a fresh process: the model, its gradients and Adam's state are made first (one step
on two clips), then the peak resident set size (``VmHWM``, reset through ``/proc/self/clear_refs``) is
measured over one full-batch step: forward and backward (what the methods change), then the optimizer
step (the same for all: Adam's temporaries). On CPU this is the process's memory, the analogue of
``torch.cuda.max_memory_allocated`` that ATRI's GMO column reports. No GPU was used here.

    python benchmarks/bench_step_memory.py --batch 24
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

METHODS = {"ML-CLAP": ["objective.scheme=mlclap"], "KCL": ["objective.scheme=kcl"],
           "KCL + grad cache": ["objective.scheme=kcl", "optim.grad_cache_chunk={chunk}"]}
LANGUAGES = "[eng,fra,deu,spa,nld,cat,jpn,zho]"


def status_kb(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise KeyError(field)


def make_inputs(folder: Path, batch: int, layers: int = 12, width: int = 768) -> tuple[Path, Path]:
    """The synthetic benchmark (enough clips for one batch) and a random model folder of XLM-R's architecture,
    ``layers`` x ``width`` (XLM-R base: 12 x 768)."""
    import transformers

    from mlatr.models.hf_text import write_tiny_model

    data = folder / "synth"
    if not (data / "manifest.jsonl").exists():
        subprocess.run([sys.executable, "-m", "mlatr", "data", "synth", "-o", str(data), "--train", str(2 * batch),
                        "--val", "4", "--test", "4", "--quiet"], check=True)
    model = folder / f"xlmr-random-{layers}x{width}"
    if not (model / "done").exists():
        write_tiny_model("xlmr", model)  # the character-level tokenizer
        tiny = transformers.XLMRobertaConfig.from_pretrained(model)
        config = transformers.XLMRobertaConfig(
            vocab_size=tiny.vocab_size, hidden_size=width, num_hidden_layers=layers,
            num_attention_heads=max(1, width // 64), intermediate_size=4 * width, max_position_embeddings=514,
            pad_token_id=tiny.pad_token_id, hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1)
        transformers.XLMRobertaModel(config).save_pretrained(model)
        (model / "done").write_text("")
    return data / "manifest.jsonl", model


def run_method(args) -> dict:
    import torch

    from mlatr.data.pipeline.batches import TrainBatch
    from mlatr.training.config import load_config
    from mlatr.training.step import step_inputs
    from mlatr.training.trainer import Trainer

    torch.set_num_threads(args.threads)
    extra = [o.format(chunk=args.chunk) for o in METHODS[args.run]]
    cfg = load_config(Path(__file__).resolve().parents[1] / "configs" / "demo.yaml", [
        f"data.manifest={args.manifest}", f"out_dir={args.out}", f"data.languages={LANGUAGES}",
        "data.max_seconds=5.0", f"train.batch_size={args.batch}", "train.eval_every=0", "train.progress=false",
        "data.workers=0", f"model.text={{name: xlmr, path: {args.model}, max_length: {args.max_tokens}}}",
        "model.embed_dim=1024", "optim.name=adam", "optim.lr=5e-6", *extra])
    trainer = Trainer(cfg)
    batch = next(iter(trainer.batches.epoch(0)))
    generator = torch.Generator().manual_seed(0)

    two = TrainBatch(batch.waveform[:2], batch.lengths[:2], batch.clip_index[:2], batch.rows[:2], batch.position[:2],
                     batch.planned)
    inputs = step_inputs(two, trainer.batches, trainer.objective.scheme, cfg.data.languages, generator, trainer.dist)
    trainer.run_step(inputs, 1, True, "bench")
    trainer.optimizer_step()  # gradients and Adam's state exist from here on
    trainer.optimizer.zero_grad(set_to_none=False)  # the gradients stay allocated, as in the step below
    before = status_kb("VmRSS")
    Path("/proc/self/clear_refs").write_text("5")  # resets VmHWM to the current RSS
    start = time.perf_counter()
    inputs = step_inputs(batch, trainer.batches, trainer.objective.scheme, cfg.data.languages, generator,
                         trainer.dist)
    trainer.run_step(inputs, 1, True, "bench")
    seconds = time.perf_counter() - start
    forward_backward = status_kb("VmHWM")
    trainer.optimizer_step()
    peak = status_kb("VmHWM")
    params = sum(p.numel() for p in trainer.model.parameters())
    return {"method": args.run, "before_mb": before / 1024, "peak_mb": peak / 1024,
            "step_mb": (forward_backward - before) / 1024, "optimizer_mb": (peak - forward_backward) / 1024,
            "texts": len(inputs.texts), "seconds": seconds, "parameters_m": params / 1e6}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch", type=int, default=24)
    parser.add_argument("--chunk", type=int, default=None, help="grad_cache_chunk (default: the batch size)")
    parser.add_argument("--max-tokens", type=int, default=32, help="caption length cap in tokens")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--dir", default="/tmp/mlatr-bench-memory")
    parser.add_argument("--methods", default=",".join(METHODS), help="comma-separated methods (ratios: to ML-CLAP)")
    parser.add_argument("--text-layers", type=int, default=12, help="the text encoder's layers (XLM-R base: 12)")
    parser.add_argument("--text-width", type=int, default=768, help="its width (XLM-R base: 768)")
    parser.add_argument("--run", choices=list(METHODS), help=argparse.SUPPRESS)
    parser.add_argument("--manifest", help=argparse.SUPPRESS)
    parser.add_argument("--model", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    args.chunk = args.chunk or args.batch
    if args.run:
        print(json.dumps(run_method(args)), flush=True)
        return
    folder = Path(args.dir)
    manifest, model = make_inputs(folder, args.batch, args.text_layers, args.text_width)
    print(f"batch {args.batch}, captions capped at {args.max_tokens} tokens, grad cache chunk {args.chunk}; "
          f"load average {os.getloadavg()[0]:.1f}; no GPU: CPU peak RSS", flush=True)
    results = {}
    for method in args.methods.split(","):
        command = [sys.executable, __file__, "--run", method, "--manifest", str(manifest), "--model", str(model),
                   "--out", str(folder / "runs" / str(time.time_ns())), "--batch", str(args.batch), "--chunk",
                   str(args.chunk), "--max-tokens", str(args.max_tokens), "--threads", str(args.threads)]
        out = subprocess.run(command, check=True, capture_output=True, text=True)
        r = results[method] = json.loads(out.stdout.strip().splitlines()[-1])
        print(f"{method:17s} {r['texts']:4d} captions  model+grads+Adam {r['before_mb']:7.0f} MB  step peak "
              f"{r['peak_mb']:7.0f} MB, of which forward+backward +{r['step_mb']:6.0f} MB  forward+backward "
              f"{r['seconds']:6.1f} s  ({r['parameters_m']:.1f} M parameters)", flush=True)
    if "ML-CLAP" not in results:
        return
    ref = results["ML-CLAP"]
    print("\nratios to ML-CLAP (ATRI Table 4, CED-Base + SONAR on an A100: KCL 68 GB / 22 GB = 3.1x):")
    for method, r in results.items():
        print(f"{method:17s} step peak x{r['peak_mb'] / ref['peak_mb']:.2f}   forward+backward memory "
              f"x{r['step_mb'] / ref['step_mb']:.2f}   time x{r['seconds'] / ref['seconds']:.2f}")


if __name__ == "__main__":
    main()
