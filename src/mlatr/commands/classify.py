import json

from mlatr.commands._arg_types import positive_float, positive_int
from mlatr.commands._model_io import add_model_option, load_model_from_args
from mlatr.commands.embed import audio_files
from mlatr.terminal_text import shown

HELP = """Zero-shot classification of sound files: which of --labels each one sounds like.

Each label becomes the prompt "This is a sound of {label}." in --lang (SupCLAP sec. 4.2.2; the labels
themselves should be in that language), or --template with {label}; the model's own matching head scores
every file against every prompt. Prints the best -k labels per file with their scores (--json: one object).
A folder among FILES stands for every sound file under it.

Examples:
  mlatr classify dog.wav rain.ogg --labels "dog,rain,bell" --model runs/demo-real/model.pt
  mlatr classify sounds/ --labels "chien,pluie,cloche" --lang fra --model runs/demo-real/model.pt --json
"""


def add_arguments(parser):
    parser.add_argument("items", nargs="+", metavar="FILES", help="sound files or folders")
    parser.add_argument("--labels", required=True, help="comma-separated class labels")
    add_model_option(parser)
    parser.add_argument("--lang", default="eng", help="language of the labels and the prompt (default eng)")
    parser.add_argument("--template", default=None, help="prompt with {label} instead of the paper's")
    parser.add_argument("-k", type=positive_int, default=3, help="labels shown per file (default 3)")
    parser.add_argument("--batch-size", type=positive_int, default=16)
    parser.add_argument("--max-seconds", type=positive_float, default=None,
                        help="centre-crop each file to this length (default: the whole file)")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--json", action="store_true", help="print JSON")


def run(args) -> int:
    files = audio_files(args.items)
    model = load_model_from_args(args)
    result = model.classify(files, args.labels, args.lang, template=args.template, batch_size=args.batch_size,
                            max_seconds=args.max_seconds)
    top = result.top(args.k)
    if args.json:
        out = {"labels": result.classes, "lang": args.lang,
               "results": [{"file": f, "label": best[0][0], "score": best[0][1],
                            "top": [{"label": lb, "score": s} for lb, s in best]} for f, best in zip(files, top,
                                                                                                      strict=True)]}
        print(json.dumps(out, ensure_ascii=False, indent=1))
        return 0
    for f, best in zip(files, top, strict=True):
        print(f"{shown(f)}\t" + "  ".join(f"{shown(lb)} {s:.3f}" for lb, s in best))
    return 0
