import json

from mlatr.commands._notices import report_skipped
from mlatr.commands._outputs import add_wait_option, check_output_kind
from mlatr.errors import DiskFullError

HELP = """Train a dual encoder from a YAML config.

Examples:
  mlatr train --config configs/demo.yaml out_dir=runs/kcl objective.scheme=kcl
  mlatr train --config configs/demo.yaml out_dir=runs/kcl --resume   # continue an interrupted run
  torchrun --nproc_per_node=8 -m mlatr train --config C   # 8 processes share train.batch_size per step

Under torchrun the first process writes the outputs and validates; see docs/guide-audiocaps-clotho.md.

Overrides are dotted keys with YAML values (train.epochs=3, data.languages=[eng,fra]), anywhere on
the command line. --resume continues with the run's own configuration: an override that changes it is
refused, naming the keys; so is a manifest whose training or validation clips changed since last.pt (the
clips added, removed or changed are named; --allow-data-change goes on with the new data, warning).
Writes config.yaml, last.pt, best.pt, log.jsonl and summary.json to out_dir.
"""


#: KEY=VALUE overrides are taken anywhere on the command line (see mlatr.cli).
EXTRA_ARGS = ("overrides", "config overrides are KEY=VALUE, e.g. train.epochs=3, anywhere after `mlatr train`")


def add_arguments(parser):
    parser.add_argument("--config", help="YAML config file (defaults apply when omitted)")
    parser.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="config overrides")
    parser.add_argument("--resume", action="store_true", help="continue the run in out_dir from last.pt")
    parser.add_argument("--allow-data-change", action="store_true",
                        help="with --resume: go on although the training / validation clips changed since "
                             "last.pt (a warning says what changed; without it the resume is refused)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    add_wait_option(parser)  # out_dir is in the config: the Trainer holds its writer lock


def run(args) -> int:
    from mlatr.inference import process_group  # loads torch: not paid by every command's parser
    from mlatr.training.config import load_config  # loads yaml: not paid by every command's parser
    from mlatr.training.trainer import Trainer  # loads torch: not paid by every command's parser

    overrides = list(args.overrides) + (["train.progress=false"] if args.no_progress else [])
    cfg = load_config(args.config, overrides)
    check_output_kind("out_dir", cfg.out_dir, folder=True)
    try:
        trainer = Trainer(cfg, resume=args.resume, wait=args.wait, allow_data_change=args.allow_data_change)
        summary = trainer.fit()
    except DiskFullError as exc:
        raise DiskFullError(f"training stopped: {exc}. Once there is room, continue the run with the same "
                            "command and --resume (last.pt holds the last epoch saved)") from exc
    finally:
        process_group.shutdown()
    if not trainer.dist.is_main:
        return 0
    if cfg.data.skip_bad:  # data.skip_bad=true: say what was skipped (the epoch records count bad_audio)
        report_skipped(trainer.manifest_problems, "malformed manifest line(s)")
        bad = {**trainer.batches.source.bad, **(trainer.val_source.bad if trainer.val_source else {})}
        report_skipped(bad, "clip(s) with unreadable audio")
    print(json.dumps(summary, indent=2))
    return 0
