import json

HELP = """Train a dual encoder from a YAML config.

Examples:
  mlatr train --config configs/demo.yaml out_dir=runs/kcl objective.scheme=kcl
  mlatr train --config configs/demo.yaml out_dir=runs/kcl --resume   # continue an interrupted run

Overrides are dotted keys with YAML values (train.epochs=3, data.languages=[eng,fra]).
Writes config.yaml, last.pt, best.pt, log.jsonl and summary.json to out_dir.
"""


def add_arguments(parser):
    parser.add_argument("--config", help="YAML config file (defaults apply when omitted)")
    parser.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="config overrides")
    parser.add_argument("--resume", action="store_true", help="continue the run in out_dir from last.pt")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")


def run(args) -> int:
    from mlatr.training.config import load_config
    from mlatr.training.trainer import Trainer

    overrides = list(args.overrides) + (["train.progress=false"] if args.no_progress else [])
    cfg = load_config(args.config, overrides)
    summary = Trainer(cfg, resume=args.resume).fit()
    print(json.dumps(summary, indent=2))
    return 0
