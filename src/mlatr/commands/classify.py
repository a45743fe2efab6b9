import json

from mlatr.commands._arg_types import positive_float, positive_int
from mlatr.commands.embed import audio_files
from mlatr.terminal_text import shown

HELP = """Zero-shot classification of sound files: which of --labels each one sounds like.

Each label becomes the prompt "This is a sound of {label}." in --lang (SupCLAP sec. 4.2.2; the labels
themselves should be in that language), or --template with {label}; the model's own matching head scores
every file against every prompt. Prints the best -k labels per file with their probabilities (a softmax
with a temperature fitted on libraries never trained on) and "none of these" when the best label is below
0.5 (--json: one object, with the raw scores too).
A folder among FILES stands for every sound file under it.

Examples:
  mlatr classify dog.wav rain.ogg --labels "dog,rain,bell" --model runs/demo-real/model.pt
  mlatr classify sounds/ --labels "chien,pluie,cloche" --lang fra --model runs/demo-real/model.pt --json
"""


def add_arguments(parser):
    parser.add_argument("items", nargs="+", metavar="FILES", help="sound files or folders")
    parser.add_argument("--labels", required=True, help="comma-separated class labels")
    parser.add_argument("--model", required=True, help="a checkpoint (mlatr train) or a model folder (mlatr export)")
    parser.add_argument("--lang", default="eng", help="language of the labels and the prompt (default eng)")
    parser.add_argument("--template", default=None, help="prompt with {label} instead of the paper's")
    parser.add_argument("-k", type=positive_int, default=3, help="labels shown per file (default 3)")
    parser.add_argument("--batch-size", type=positive_int, default=16)
    parser.add_argument("--max-seconds", type=positive_float, default=None,
                        help="centre-crop each file to this length (default: the whole file)")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--json", action="store_true", help="print JSON")


def run(args) -> int:
    from mlatr.inference import load  # loads torch: not paid by every command's parser

    files = audio_files(args.items)
    model = load(args.model, args.device)
    result = model.classify(files, args.labels, args.lang, template=args.template, batch_size=args.batch_size,
                            max_seconds=args.max_seconds)
    top = result.top(args.k)
    prob = result.probabilities
    none = result.none_of_these
    index = {c: i for i, c in enumerate(result.classes)}
    if args.json:
        out = {"labels": result.classes, "lang": args.lang, "temperature": result.temperature,
               "min_probability": result.min_probability,
               "results": [{"file": f, "label": best[0][0], "score": best[0][1],
                            "probability": float(prob[n, index[best[0][0]]]), "none_of_these": bool(none[n]),
                            "top": [{"label": lb, "score": s, "probability": float(prob[n, index[lb]])}
                                    for lb, s in best]} for n, (f, best) in enumerate(zip(files, top, strict=True))]}
        print(json.dumps(out, ensure_ascii=False, indent=1))
        return 0
    for n, (f, best) in enumerate(zip(files, top, strict=True)):
        flag = f"  (none of these: best below {result.min_probability:.2f})" if none[n] else ""
        print(f"{shown(f)}\t" + "  ".join(f"{shown(lb)} {prob[n, index[lb]]:.2f}" for lb, _ in best) + flag)
    return 0
