"""Fit a model's calibration: its text-search relevance, "nothing relevant" rule and classification temperature.

Reads the fold embeddings of the model's recipe on libraries it never trained on (mlatr demo-real keeps them in
OUT/unseen/embeddings; mlatr experiment unseen-library in OUT/embeddings/ENC/HEADS), measures every ranking
(sound only, captions only, the old reciprocal-rank fusion, the default) and the default's relevance
calibration (ECE pooled, over the hits of relevance >= 0.1 and per library; the first hit's AUC), "nothing
relevant" rates with their trade-off and classification figures, cross-fitted over the held-out libraries and
over two halves of the hand-written queries (no library and no query text is both fitted and measured), and
writes them to -o (report.md, results.json, reliability.png, nothing-relevant-tradeoff.png). --model MODEL
also refits on every library and query and stores the calibration in MODEL (a checkpoint or a model folder of
that recipe; the calibration records its weights' SHA-256 and is used only with them). --translated-queries
measures and fits on what searches see where Apertium's pairs are installed: Spanish and Catalan queries
translated into English (the fold embeddings' Apertium translations), recorded in the calibration.

Examples:
  mlatr experiment calibrate --embeddings runs/demo-real/unseen/embeddings --cache-dir runs/demo-real/cache \
    --model runs/demo-real/model.pt
"""

from pathlib import Path

from mlatr.commands._outputs import Output
from mlatr.errors import MlatrError

HELP = __doc__

#: What the command writes: the CLI checks each one's kind and holds its writer lock (see _outputs).
OUTPUTS = (Output("out", "experiment", folder=True),)

#: Old spellings of options, accepted for this release with a warning (mlatr.commands._deprecated).
OLD_SPELLINGS = {"--out": "--output"}


def add_arguments(parser) -> None:
    parser.add_argument("--embeddings", required=True, help="a run's OUT/embeddings/ENC/HEADS folder")
    parser.add_argument("--manifest", default="data/real-sounds/manifest.jsonl",
                        help="the real-sound manifest the run used (default: data/real-sounds/manifest.jsonl)")
    parser.add_argument("--cache-dir", default=None, help="feature caches (default: the run's OUT/cache)")
    parser.add_argument("-o", "--output", dest="out", default="runs/calibrate",
                        help="output folder (default: runs/calibrate)")
    parser.add_argument("--model", default=None, help="refit on every library and store the calibration in this "
                        "model (a checkpoint or model folder whose recipe made the embeddings)")
    parser.add_argument("--translated-queries", action="store_true",
                        help="measure and fit on the features of searches that translate Spanish and Catalan "
                        "queries into English (the fold embeddings' Apertium translations), as searches do where "
                        "Apertium's pairs are installed")


def run(args) -> int:
    # loads torch and scikit-learn: not paid by every command's parser
    from mlatr.lab.experiments.relevance_fit import calibrate_command

    folder = Path(args.embeddings)
    if not folder.is_dir():
        raise MlatrError(f"{folder}: not a folder of fold embeddings (run mlatr experiment unseen-library first)")
    cache = Path(args.cache_dir) if args.cache_dir else _run_cache(folder)
    print(calibrate_command(folder, args.manifest, cache, Path(args.out), args.model, args.translated_queries))
    return 0


def _run_cache(folder: Path) -> Path:
    """The feature cache of the run whose fold embeddings are ``folder``: ``OUT/cache`` beside ``OUT/unseen``
    (demo-real) or ``OUT/embeddings/ENC/HEADS`` (unseen-library)."""
    for parent in folder.parents:
        if (parent / "cache" / "aisfx.npz").is_file():
            return parent / "cache"
    raise MlatrError(f"{folder}: no feature cache (cache/aisfx.npz) above it; give --cache-dir")
