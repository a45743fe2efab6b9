import json

from mlatr.commands._arg_types import positive_float, positive_int
from mlatr.commands._model_io import (
    add_encoding_options,
    add_model_option,
    load_model_from_args,
    runtime_from_args,
    workers_from_args,
)
from mlatr.commands._skipping import add_skip_options, finish_skips, report_path, skip_bad
from mlatr.terminal_text import shown

HELP = """Zero-shot classification of a library's sounds: which of --labels each one sounds like.

Each label becomes the prompt "This is a sound of {label}." in --lang (SupCLAP sec. 4.2.2; the labels
themselves should be in that language), or --template with {label}; the model's own matching head scores
every clip against every prompt. Prints the best -k labels per clip with their probabilities (a softmax
with the temperature of the model's calibration, fitted for its weights on libraries never trained on) and
"none of these" when the best label is below 0.5 (--json: one object, with the raw scores too). A model
without a calibration prints scores only, and says so ("calibrated": false, probabilities null). INPUT is a
sound library, as embed and index build take it: sound files, folders, a manifest (--split) or webdataset
shards; each clip is named by its id (its path under the library's root without extension).

Bad files: from folders and sound files, an unreadable, truncated or non-audio file is skipped and counted on
stderr (--json: "skipped", each with its reason; --skip-report FILE lists them in a file), exit status 3
("done, with skips"; 0 with --skip-bad); --strict stops at the first. A manifest's or shards' bad clip stops
the command unless --skip-bad.

Examples:
  mlatr classify dog.wav rain.ogg --labels "dog,rain,bell" --model runs/demo-real/model.pt
  mlatr classify sounds/ --labels "chien,pluie,cloche" --lang fra --model runs/demo-real/model.pt --json
"""


def add_arguments(parser):
    parser.add_argument("items", nargs="+", metavar="INPUT",
                        help="the library: sound files, folders, a manifest or webdataset shards")
    parser.add_argument("--labels", required=True, help="comma-separated class labels")
    add_model_option(parser)
    parser.add_argument("--lang", default="eng", help="language of the labels and the prompt (default eng)")
    parser.add_argument("--template", default=None, help="prompt with {label} instead of the paper's")
    parser.add_argument("--split", default="all", help="a manifest's or shards' split (default: all clips)")
    parser.add_argument("-k", type=positive_int, default=3, help="labels shown per clip (default 3)")
    parser.add_argument("--batch-size", type=positive_int, default=16)
    parser.add_argument("--max-seconds", type=positive_float, default=None,
                        help="centre-crop each file to this length (default: the whole file)")
    add_encoding_options(parser)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--json", action="store_true", help="print JSON")
    add_skip_options(parser)


def run(args) -> int:
    skipping, report = skip_bad(args, args.items), report_path(args, None)
    model = load_model_from_args(args)
    runtime_from_args(args, model, args.items)
    result = model.classify(args.items, args.labels, args.lang, template=args.template, batch_size=args.batch_size,
                            max_seconds=args.max_seconds, split=args.split, skip_bad=skipping,
                            workers=workers_from_args(args))
    top = result.top(args.k)
    prob = result.probabilities
    none = result.none_of_these
    index = {c: i for i, c in enumerate(result.classes)}
    def p(n: int, label: str) -> float | None:
        return None if prob is None else float(prob[n, index[label]])

    if args.json:
        out = {"labels": result.classes, "lang": args.lang, "calibrated": result.calibrated,
               **({} if result.calibrated else {"uncalibrated": model.calibration_note}),
               "temperature": result.temperature, "min_probability": result.min_probability,
               "results": [{"id": i, "label": best[0][0], "score": best[0][1], "probability": p(n, best[0][0]),
                            "none_of_these": None if none is None else bool(none[n]),
                            "top": [{"label": lb, "score": s, "probability": p(n, lb)} for lb, s in best]}
                           for n, (i, best) in enumerate(zip(result.ids, top, strict=True))],
               "skipped": [s.to_dict() for s in result.skipped]}
        print(json.dumps(out, ensure_ascii=False, indent=1))
        return finish_skips(args, result.skipped, report)
    if not result.calibrated:
        print(f"scores, not probabilities: this model is not calibrated ({model.calibration_note})")
    for n, (i, best) in enumerate(zip(result.ids, top, strict=True)):
        flag = f"  (none of these: best below {result.min_probability:.2f})" if none is not None and none[n] else ""
        cells = [f"{shown(lb)} {p(n, lb):.2f}" if prob is not None else f"{shown(lb)} {s:.3f}" for lb, s in best]
        print(f"{shown(i)}\t" + "  ".join(cells) + flag)
    return finish_skips(args, result.skipped, report)
