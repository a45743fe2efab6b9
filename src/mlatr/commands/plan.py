"""``mlatr plan``: trace one training step of a config at full size on fake tensors and plan the GPU run."""

import json
import sys
from pathlib import Path

from mlatr.commands._arg_types import non_negative_float, positive_int
from mlatr.errors import MlatrError
from mlatr.lab.planning.gpus import GPUS, gpu_named

HELP = """Plan a GPU training run without a GPU: memory, FLOPs, time, the batch and options that fit.

Traces one training step of the config (the real model classes at full size, objective, optimizer, AMP
and memory options) on fake tensors: nothing is allocated, no weights are read. Prints the predicted
peak GPU memory (torch.cuda.max_memory_allocated) by part, FLOPs per step, a time lower bound per step and
per epoch at the GPU's peak throughput, the largest batch that fits and, for a config that does not fit,
the cheapest option set that does. With --manifest (default: the config's data.manifest when it is here)
the captions are tokenised and the clips' durations read, and the plan traces the worst batch of an epoch
(the run's peak) and a typical one; without, every caption is --caption-tokens long. See docs/gpu-planning.md.

  mlatr plan --config configs/atri-kcl-audiocaps.yaml --manifest data/audiocaps/test.jsonl
  mlatr plan --config configs/atri-kcl-audiocaps.yaml --manifest M --precision fp32,bf16
  mlatr plan --config configs/atri-kcl-audiocaps.yaml --text-attention eager --audio-attention sdpa
  mlatr plan --config configs/atri-kcl-audiocaps.yaml --gpu l4-24gb --sweep train.batch_size=8,16,24
  mlatr plan --config configs/atri-kcl-audiocaps.yaml --sweep languages=1,2,4,8
"""

EXTRA_ARGS = ("overrides", "config overrides KEY=VALUE")
ATTENTION = ("eager", "sdpa")


def add_arguments(parser) -> None:
    parser.add_argument("--config", required=True, help="training config (YAML)")
    parser.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="config overrides, as for train")
    parser.add_argument("--gpu", default="a100-80gb", choices=sorted(GPUS), help="target GPU (default a100-80gb)")
    parser.add_argument("--manifest", default=None, metavar="M",
                        help="manifest whose captions and durations set the batches' lengths (its training "
                             "split, or every clip when it has none; default: the config's data.manifest if here)")
    parser.add_argument("--tokenizer", default=None, metavar="PATH",
                        help="tokenizer to count caption tokens with: a model folder or a SentencePiece .model "
                             "(default: the config's model.text.path if here, else a stated substitute)")
    parser.add_argument("--caption-tokens", type=positive_int, default=32,
                        help="without a manifest (and in --sweep): padded caption length in tokens (language code "
                             "and </s> included; default 32)")
    parser.add_argument("--precision", default="config", metavar="P[,P]",
                        help="config (the config's optim.amp), fp32 (optim.amp off; TF32 per optim.tf32), bf16 "
                             "(autocast), or several: fp32,bf16")
    parser.add_argument("--text-attention", choices=ATTENTION, default=None,
                        help="the text encoder's attention (model.text.attention): eager keeps the score tensors")
    parser.add_argument("--audio-attention", choices=ATTENTION, default=None,
                        help="the audio encoder's attention (model.audio.attention; CED)")
    parser.add_argument("--reserve-mib", type=non_negative_float, default=1024.0,
                        help="GPU memory held back for the CUDA context and the allocator's cache (default 1024)")
    parser.add_argument("--train-clips", type=positive_int, default=None,
                        help="clips per epoch (default: the config's manifest, or the dataset's published size)")
    parser.add_argument("--sweep", metavar="KEY=V1,V2,...", default=None,
                        help="trace one step per value (e.g. train.batch_size=8,16,24,32 or languages=1,2,4,8)")
    parser.add_argument("--no-search", action="store_true",
                        help="one trace only: skip the largest batch and the option search")
    parser.add_argument("--json", action="store_true", help="print the plan as JSON")


def _precisions(value: str) -> list[str]:
    # loads torch: not paid by every command's parser
    from mlatr.lab.planning.gpu_plan import PRECISIONS

    names = [v.strip() for v in value.split(",") if v.strip()]
    bad = [n for n in names if n != "config" and n not in PRECISIONS]
    if not names or bad:
        raise MlatrError(f"--precision {value!r}: expected config, {', '.join(PRECISIONS)} or a comma list of them")
    return names


def run(args) -> int:
    # loads torch: not paid by every command's parser
    from mlatr.data.manifest import Manifest
    from mlatr.lab.planning.caption_lengths import length_plan
    from mlatr.lab.planning.gpu_plan import (
        PRECISIONS,
        Tracers,
        format_plan,
        format_precisions,
        format_sweep,
        make_plan,
        sweep,
        train_clips,
        with_overrides,
    )
    from mlatr.training.config import load_config  # loads yaml: not paid by every command's parser

    if args.caption_tokens < 3:
        raise MlatrError("--caption-tokens must be at least 3")
    overrides = list(args.overrides)
    if args.text_attention:
        overrides.append(f"model.text.attention={args.text_attention}")
    if args.audio_attention:
        overrides.append(f"model.audio.attention={args.audio_attention}")
    cfg = load_config(args.config, overrides)
    gpu = gpu_named(args.gpu)
    precisions = _precisions(args.precision)
    if args.sweep:
        key, _, values = args.sweep.partition("=")
        if not values:
            raise MlatrError(f"--sweep {args.sweep!r}: expected KEY=V1,V2,...")
        rows = sweep(cfg, gpu, key, values.split(","), args.caption_tokens)
        print(json.dumps({"gpu": gpu.name, "sweep": key, "rows": rows}, indent=2) if args.json
              else format_sweep(key, rows))
        return 0
    manifest_path = args.manifest or (cfg.data.manifest if cfg.data.manifest and Path(cfg.data.manifest).is_file()
                                      else None)
    lengths = None
    if manifest_path:
        manifest = Manifest.load(manifest_path, skip_bad=True)
        lengths = length_plan(cfg, manifest, args.tokenizer, train_clips(cfg, args.train_clips)[0])
    elif args.tokenizer:
        raise MlatrError("--tokenizer counts a manifest's caption tokens: give --manifest too")
    tracers = Tracers(args.caption_tokens, lambda m: print(m, file=sys.stderr))
    plans = []
    for precision in precisions:
        config = cfg if precision == "config" else with_overrides(cfg, PRECISIONS[precision])
        plans.append(make_plan(config, gpu, args.caption_tokens, args.reserve_mib, args.train_clips,
                               search=not args.no_search, lengths=lengths, tracers=tracers))
    if args.json:
        print(json.dumps(plans[0] if len(plans) == 1 else {"plans": plans}, indent=2))
    else:
        print("\n\n".join(format_plan(p) for p in plans))
        if len(plans) > 1:
            print("\n" + format_precisions(plans))
    return 0
