"""Leave-one-library-out: real-sound heads evaluated on a library they were never trained on.

Every library of the real-sound manifest (a clip's first folder) is held out in turn: the projection
heads over the frozen backbones (aisfx + a frozen multilingual text encoder) train on the other
libraries and are evaluated on every clip of the held-out one: text-to-audio and audio-to-text recall of
the 32 hand-written queries in 8 languages (keyword relevance) with gap / dis / MRV, of the clips'
captions, and zero-shot classification of the folder labels in 8 languages (SupCLAP §4.2.2 prompts),
each with its chance level; the in-library split beside it. One run per text encoder x head option
(--heads: random, both-heads, audio-only, near-identity; kcl-translations once the manifest holds
translations, mlatr data translate). Writes OUT/results.json (resumable),
OUT/report.md and OUT/unseen-recall-by-language.png.

Needs the real sound libraries (scripts/get-real-sounds.sh) and the `real` extra.

Examples:
  mlatr experiment unseen-library
  mlatr experiment unseen-library --text e5-small --heads audio-only --libraries scratch,qabcs
"""

from pathlib import Path

from mlatr.commands._arg_types import positive_float, positive_int, random_seed
from mlatr.commands._grid_args import parse_methods
from mlatr.commands._outputs import Output
from mlatr.errors import MlatrError
from mlatr.lab.experiments.head_options import COMPARED_BY_DEFAULT, HEAD_OPTIONS, TEXT_ENCODERS

HELP = __doc__


#: What the command writes: the CLI checks each one's kind and holds its writer lock (see _outputs).
OUTPUTS = (Output("out", "experiment", folder=True),)


#: Old spellings of options, accepted for this release with a warning (mlatr.commands._deprecated).
OLD_SPELLINGS = {"--out": "--output"}


def add_arguments(parser) -> None:
    parser.add_argument("--manifest", default="data/real-sounds/manifest.jsonl",
                        help="manifest of the real sounds (default: data/real-sounds/manifest.jsonl)")
    parser.add_argument("-o", "--output", dest="out", default="runs/unseen-library",
                        help="output folder (default: runs/unseen-library)")
    parser.add_argument("--text", default=",".join(TEXT_ENCODERS),
                        help=f"comma-separated frozen text encoders (default: {','.join(TEXT_ENCODERS)})")
    parser.add_argument("--heads", default=",".join(COMPARED_BY_DEFAULT),
                        help=f"comma-separated head options among {', '.join(HEAD_OPTIONS)} (default: "
                             f"{','.join(COMPARED_BY_DEFAULT)}; kcl-translations needs a translated manifest)")
    parser.add_argument("--libraries", default=None, help="comma-separated libraries to hold out (default: all)")
    parser.add_argument("--added-groups", type=positive_int, default=None,
                        help="hold the libraries added since the first 12 out this many folds at a time "
                             "(default: each alone)")
    parser.add_argument("--epochs", type=positive_int, default=60)
    parser.add_argument("--embed-dim", type=positive_int, default=256, help="embedding size of the both-heads option")
    parser.add_argument("--seed", type=random_seed, default=0)
    parser.add_argument("--max-seconds", type=positive_float, default=10.0, help="centre crop of long clips")
    parser.add_argument("--cache-dir", default=None, help="feature caches (default: OUT/cache)")
    parser.add_argument("--no-progress", action="store_true")


def run(args) -> int:
    from mlatr.lab.experiments.unseen_library import (
        run_unseen_library,  # loads torch: not paid by every command's parser
    )

    if not Path(args.manifest).is_file():
        raise MlatrError(f"{args.manifest} not found: run scripts/get-real-sounds.sh first (or pass --manifest)")
    encoders = parse_methods(args.text, list(TEXT_ENCODERS), "--text")  # before the library's features
    heads = [x.strip() for x in args.heads.split(",") if x.strip()]  # checked by run_unseen_library, first
    libraries = [x.strip() for x in args.libraries.split(",") if x.strip()] if args.libraries else None
    run_unseen_library(args.manifest, args.out, encoders, heads, libraries=libraries, epochs=args.epochs,
                       embed_dim=args.embed_dim, seed=args.seed, max_seconds=args.max_seconds,
                       cache_dir=args.cache_dir, progress=not args.no_progress, added_groups=args.added_groups)
    print((Path(args.out) / "report.md").read_text(encoding="utf-8"))
    return 0
