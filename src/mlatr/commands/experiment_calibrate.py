"""Fit the text-search ranking, relevance, "nothing relevant" threshold and classification temperature.

Reads the fold embeddings `mlatr experiment unseen-library` keeps (OUT/embeddings/ENC/HEADS), measures
every ranking (sound only, captions only, the old reciprocal-rank fusion, a cascade, the monotone
logistic model that is the default, boosted trees) cross-fitted over the held-out libraries, with file
names and with meaningless names, with relevance calibration (ECE, reliability diagram), "nothing
relevant" rates and classification figures, and writes them to --out (report.md, results.json,
reliability.png). --write also refits on every library and writes the shipped calibration
(mlatr/data/calibration.json): refitting after a new model is this one command.

Examples:
  mlatr experiment calibrate --embeddings runs/unseen-library/embeddings/use-multilingual/near-identity --write
"""

from pathlib import Path

from mlatr.commands._outputs import Output
from mlatr.errors import MlatrError

HELP = __doc__

#: What the command writes: the CLI checks each one's kind and holds its writer lock (see _outputs).
OUTPUTS = (Output("out", "experiment", folder=True),)


def add_arguments(parser) -> None:
    parser.add_argument("--embeddings", required=True, help="a run's OUT/embeddings/ENC/HEADS folder")
    parser.add_argument("--manifest", default="data/real-sounds/manifest.jsonl",
                        help="the real-sound manifest the run used (default: data/real-sounds/manifest.jsonl)")
    parser.add_argument("--cache-dir", default=None, help="feature caches (default: the run's OUT/cache)")
    parser.add_argument("--out", default="runs/calibrate", help="output folder (default: runs/calibrate)")
    parser.add_argument("--write", action="store_true", help="refit on every library and write the shipped "
                        "calibration (mlatr/data/calibration.json)")


def run(args) -> int:
    # loads torch and scikit-learn: not paid by every command's parser
    from mlatr.experiments.relevance_fit import calibrate_command

    folder = Path(args.embeddings)
    if not folder.is_dir():
        raise MlatrError(f"{folder}: not a folder of fold embeddings (run mlatr experiment unseen-library first)")
    cache = Path(args.cache_dir) if args.cache_dir else folder.parents[2] / "cache"
    print(calibrate_command(folder, args.manifest, cache, Path(args.out), args.write))
    return 0
