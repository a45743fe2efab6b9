from pathlib import Path

from mlatr.commands._deprecated import add_old_positional
from mlatr.commands._model_io import add_model_option, model_path_from_args
from mlatr.errors import MlatrError
from mlatr.file_kinds import special_file
from mlatr.model_registry import REGISTRY_ENV, registered_path
from mlatr.stored_config import WEIGHT_DTYPES

HELP = f"""Write a model as a folder that travels: config.json + model.safetensors + README.md (its model card).

The folder holds the model's config (nothing of the training machine: no absolute path, no cache file),
its weights (safetensors, no pickle), the matching head it ranks with, its data settings and a model
card (training data and licences, metrics with the commands that measured them, intended use, limits,
how to load). mlatr loads it, and only mlatr: mlatr.load(DIR) or --model DIR of every command, with the
same embeddings as the checkpoint. --name NAME writes it into the local registry (${REGISTRY_ENV}, else
~/.local/share/mlatr/models), after which --model NAME and mlatr.load("NAME") find it anywhere;
mlatr models lists the registered names.

Examples:
  mlatr export --model runs/demo-real/model.pt -o models/demo-real
  mlatr export --model runs/demo-real/model.pt --name demo-real --metrics runs/demo-real/metrics.json
"""


def add_arguments(parser):
    add_model_option(parser, "the model to export")
    add_old_positional(parser, "ckpt", dest="model", new="--model", metavar="CKPT")
    target = parser.add_mutually_exclusive_group(required=True)
    target.add_argument("-o", "--output", metavar="DIR", help="folder to write")
    target.add_argument("--name", help="register the model under this name (writes REGISTRY/NAME)")
    parser.add_argument("--metrics", metavar="JSON", action="append", default=[],
                        help="a metrics file the card quotes (mlatr eval --json, demo-real's metrics.json, "
                             "experiment unseen-library's results.json); repeatable")
    parser.add_argument("--training-data", metavar="MANIFEST",
                        help="the manifest the model was trained on, for the card's data and licences (default: the "
                             "one the checkpoint records)")
    parser.add_argument("--force", action="store_true", help="with --name: replace a model registered under NAME")
    parser.add_argument("--notes", metavar="MARKDOWN", help="a Markdown file the model card ends with (how the model "
                        "was chosen, what its training data's licences mean for it)")
    parser.add_argument("--weights-dtype", choices=WEIGHT_DTYPES, default="as-is",
                        help="store the weights as the checkpoint holds them (default) or in float16 (half the bytes; "
                             "loaded back into float32)")


def run(args) -> int:
    from mlatr.inference import export_model  # loads torch: not paid by every command's parser

    model = model_path_from_args(args)
    folder = args.output
    if args.name:
        folder = registered_path(args.name)
        if folder.exists() and not args.force:
            raise MlatrError(f"--name {args.name}: a model is already registered there ({folder}); --force replaces it")
    notes = None
    if args.notes:
        kind = special_file(args.notes)
        if kind:
            raise MlatrError(f"--notes {args.notes}: {kind}, not a text file")
        try:
            notes = Path(args.notes).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise MlatrError(f"--notes {args.notes}: cannot read it as UTF-8 text ({exc})") from None
    folder = export_model(model, folder, name=args.name, metrics=args.metrics, training_data=args.training_data,
                          weights_dtype=args.weights_dtype, notes=notes)
    print(f"wrote {folder}/config.json, {folder}/model.safetensors and {folder}/README.md"
          + (f"; registered as {args.name!r} (--model {args.name})" if args.name else ""))
    return 0
