from mlatr.commands._arg_types import fraction, non_negative_int, positive_int, random_seed
from mlatr.commands._outputs import Output
from mlatr.errors import MlatrError
from mlatr.languages import normalize, parse_language_list

HELP = """Build the synthetic multilingual benchmark (the offline default to train and demo on).

Writes DIR/audio/*.wav (16 kHz mono, 2-6 s), DIR/manifest.jsonl (splits train/val/test, captions in
every language aligned by index, labels = event kinds) and DIR/synth.json (the build settings).
Clips are procedural sound scenes (17 kinds of event with pitch, loudness and count; sequences
"A followed by B" and backgrounds "A while B"); captions come from hand-written grammars of
eng, fra, deu, spa, nld, cat, jpn and zho. The same seed gives byte-identical files; an interrupted
build resumes (wavs already written are kept).

Example: mlatr data synth -o data/synth --noise fra=0.1,jpn=0.2
"""


#: What the command writes: the CLI checks each one's kind and holds its writer lock (see _outputs).
OUTPUTS = (Output("out", "synthetic benchmark", folder=True),)


#: Old spellings of options, accepted for this release with a warning (mlatr.commands._deprecated).
OLD_SPELLINGS = {"--out": "--output", "--quiet": "--no-progress"}


def add_arguments(parser) -> None:
    parser.add_argument("-o", "--output", dest="out", required=True, metavar="DIR", help="output folder")
    parser.add_argument("--train", type=non_negative_int, default=800, metavar="N", help="train clips (default 800)")
    parser.add_argument("--val", type=non_negative_int, default=100, metavar="N", help="validation clips (default 100)")
    parser.add_argument("--test", type=non_negative_int, default=100, metavar="N", help="test clips (default 100)")
    parser.add_argument("--seed", type=random_seed, default=0, help="random seed (default 0)")
    parser.add_argument("--languages", default=None, metavar="L1,L2",
                        help="comma-separated language codes (ISO 639-3, or 639-1 such as fr), must include "
                             "eng (default: all eight)")
    parser.add_argument("--train-captions", type=positive_int, default=1, metavar="K",
                        help="captions per train clip (default 1, like AudioCaps)")
    parser.add_argument("--eval-captions", type=positive_int, default=5, metavar="K",
                        help="captions per val/test clip (default 5)")
    parser.add_argument("--noise", default=None, metavar="L=P,...",
                        help="per-language rate of translation-like caption errors, e.g. fra=0.1,jpn=0.2")
    parser.add_argument("--noise-splits", default="train", metavar="S1,S2",
                        help="splits the noise applies to (default: train; evaluation stays clean)")
    parser.add_argument("--hard-negatives", type=fraction, default=0.3, metavar="P",
                        help="fraction of clips that vary an earlier clip: same kinds, other attributes "
                             "or order (default 0.3)")
    parser.add_argument("--workers", type=positive_int, default=2, help="processes rendering audio (default 2)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bars")


def parse_noise(text: str | None) -> dict[str, float]:
    """``"fra=0.1,jpn=0.2"`` -> ``{"fra": 0.1, "jpn": 0.2}`` (codes normalised to ISO 639-3)."""

    out: dict[str, float] = {}
    for item in (text or "").split(","):
        if not item.strip():
            continue
        lang, sep, value = item.partition("=")
        try:
            if not sep:
                raise MlatrError("expected LANG=RATE")
            out[normalize(lang)] = float(value)
        except ValueError as exc:
            raise MlatrError(f"--noise: bad item {item!r}: {exc}") from None
    return out


def run(args) -> int:
    # loads scipy.signal: not paid by every command's parser
    from mlatr.data.synth.build import SPLITS, build_synthetic_benchmark, describe
    from mlatr.data.synth.languages import SUPPORTED  # loads scipy.signal: not paid by every command's parser

    languages = parse_language_list(args.languages, "--languages") if args.languages else list(SUPPORTED)
    splits = [s.strip() for s in args.noise_splits.split(",") if s.strip()]
    bad = [s for s in splits if s not in SPLITS]
    if bad:
        raise MlatrError(f"--noise-splits: unknown split(s) {', '.join(bad)} (use {', '.join(SPLITS)})")
    manifest = build_synthetic_benchmark(
        args.out, n_train=args.train, n_val=args.val, n_test=args.test, seed=args.seed,
        languages=languages, captions_train=args.train_captions, captions_eval=args.eval_captions,
        noise=parse_noise(args.noise), noise_splits=splits, hard_negatives=args.hard_negatives,
        workers=args.workers, progress=not args.no_progress,
    )
    print(describe(manifest))
    print(f"wrote {manifest.path}")
    return 0
