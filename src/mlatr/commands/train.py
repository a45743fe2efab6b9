HELP = """Train a dual encoder from a YAML config.

Examples:
  mlatr train --config configs/demo.yaml out_dir=runs/kcl objective.scheme=kcl
  mlatr train --config configs/demo.yaml out_dir=runs/kcl --resume   # continue an interrupted run
  torchrun --nproc_per_node=8 -m mlatr train --config C   # 8 processes share train.batch_size per step

Under torchrun the first process writes the outputs and validates; see docs/guide-audiocaps-clotho.md.

Overrides are dotted keys with YAML values (train.epochs=3, data.languages=[eng,fra]).
Writes config.yaml, last.pt, best.pt, log.jsonl and summary.json to out_dir.
"""


def add_arguments(parser):
    parser.add_argument("--config", help="YAML config file (defaults apply when omitted)")
    parser.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="config overrides")
    parser.add_argument("--resume", action="store_true", help="continue the run in out_dir from last.pt")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")


def run(args) -> int:
    import json

    from mlatr.training import distributed
    from mlatr.training.config import load_config
    from mlatr.training.trainer import Trainer

    overrides = list(args.overrides) + (["train.progress=false"] if args.no_progress else [])
    cfg = load_config(args.config, overrides)
    try:
        trainer = Trainer(cfg, resume=args.resume)
        summary = trainer.fit()
        if trainer.dist.is_main:
            print(json.dumps(summary, indent=2))
    finally:
        distributed.shutdown()
    return 0
