"""``mlatr plan``: trace one training step of a config at full size on fake tensors and plan the GPU run."""

import json

from mlatr.commands._arg_types import non_negative_float, positive_int
from mlatr.errors import MlatrError
from mlatr.planning.gpus import GPUS, gpu_named

HELP = """Plan a GPU training run without a GPU: memory, FLOPs, time, the batch and options that fit.

Traces one training step of the config (the real model classes at full size, objective, optimizer, AMP
and memory options) on fake tensors: nothing is allocated, no weights are read. Prints the predicted
peak GPU memory (torch.cuda.max_memory_allocated) by part, FLOPs per step, a time lower bound per step and
per epoch at the GPU's peak throughput, the largest batch that fits and, for a config that does not fit,
the cheapest option set that does. See docs/gpu-planning.md.

  mlatr plan --config configs/atri-kcl-audiocaps.yaml --gpu a100-80gb
  mlatr plan --config configs/atri-kcl-audiocaps.yaml --gpu l4-24gb --sweep train.batch_size=8,16,24
  mlatr plan --config configs/atri-kcl-audiocaps.yaml --sweep languages=1,2,4,8
"""

EXTRA_ARGS = ("overrides", "config overrides KEY=VALUE")


def add_arguments(parser) -> None:
    parser.add_argument("--config", required=True, help="training config (YAML)")
    parser.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="config overrides, as for train")
    parser.add_argument("--gpu", default="a100-80gb", choices=sorted(GPUS), help="target GPU (default a100-80gb)")
    parser.add_argument("--caption-tokens", type=positive_int, default=32,
                        help="padded caption length in tokens (language code and </s> included; default 32)")
    parser.add_argument("--reserve-mib", type=non_negative_float, default=1024.0,
                        help="GPU memory held back for the CUDA context and the allocator's cache (default 1024)")
    parser.add_argument("--train-clips", type=positive_int, default=None,
                        help="clips per epoch (default: the config's manifest, or the dataset's published size)")
    parser.add_argument("--sweep", metavar="KEY=V1,V2,...", default=None,
                        help="trace one step per value (e.g. train.batch_size=8,16,24,32 or languages=1,2,4,8)")
    parser.add_argument("--no-search", action="store_true",
                        help="one trace only: skip the largest batch and the option search")
    parser.add_argument("--json", action="store_true", help="print the plan as JSON")


def run(args) -> int:
    # loads torch: not paid by every command's parser
    from mlatr.planning.plan import format_plan, format_sweep, make_plan, sweep
    from mlatr.training.config import load_config  # loads yaml: not paid by every command's parser

    if args.caption_tokens < 3:
        raise MlatrError("--caption-tokens must be at least 3")
    cfg = load_config(args.config, args.overrides)
    gpu = gpu_named(args.gpu)
    if args.sweep:
        key, _, values = args.sweep.partition("=")
        if not values:
            raise MlatrError(f"--sweep {args.sweep!r}: expected KEY=V1,V2,...")
        rows = sweep(cfg, gpu, key, values.split(","), args.caption_tokens)
        print(json.dumps({"gpu": gpu.name, "sweep": key, "rows": rows}, indent=2) if args.json
              else format_sweep(key, rows))
        return 0
    plan = make_plan(cfg, gpu, args.caption_tokens, args.reserve_mib, args.train_clips, search=not args.no_search)
    print(json.dumps(plan, indent=2) if args.json else format_plan(plan))
    return 0
