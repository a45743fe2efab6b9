"""Translate a manifest's English captions into other languages (ATRI §5.1).

captions[L][j] becomes the translation of captions["eng"][j], so the manifest's alignment holds. Slots that
already hold a translation are kept (--overwrite translates them again). A caption whose translation
failed is reported and left missing (null), never replaced by the English text; the exit status is then 1.
Rerunning the same command sends only what the cache does not hold yet, so an interrupted run resumes
without paying twice.

{backends}

Examples:
  export DEEPSEEK_API_KEY=...
  mlatr data translate data/audiocaps/manifest.jsonl --languages fra,deu,spa,nld,cat,jpn,zho --backend openai \\
      --base-url https://api.deepseek.com/v1 --translation-model deepseek-chat --api-key-env DEEPSEEK_API_KEY \\
      --max-requests-per-minute 60 -o data/audiocaps/manifest.8lang.jsonl
  mlatr data translate M.jsonl --languages spa,cat --backend apertium -o M.es-ca.jsonl
  mlatr data translate M.jsonl --languages fra,jpn --backend hf --translation-model weights/nllb-200-distilled-600M \\
      -o M.fr-ja.jsonl
"""

from pathlib import Path

from mlatr.commands._outputs import Output
from mlatr.commands._translation_args import (
    BACKEND_HELP,
    add_backend_arguments,
    backend_from_args,
    cache_from_args,
    parse_languages,
    print_failures,
)
from mlatr.data.manifest import Manifest
from mlatr.translation import Translator, translate_manifest

HELP = __doc__.format(backends=BACKEND_HELP)


#: What the command writes: the CLI checks each one's kind and holds its writer lock (see _outputs).
OUTPUTS = (Output("output", "manifest", folder=False),)


#: Old spellings of options, accepted for this release with a warning (mlatr.commands._deprecated).
OLD_SPELLINGS = {"--model": "--translation-model", "--to": "--languages"}


def add_arguments(parser) -> None:
    parser.add_argument("manifest", metavar="MANIFEST", help="JSONL manifest with English captions")
    parser.add_argument("--languages", dest="to", required=True, metavar="LANGS",
                        help="target languages, e.g. fra,deu,spa,nld,cat,jpn,zho")
    parser.add_argument("-o", "--output", required=True, metavar="OUT", help="manifest to write (JSONL)")
    parser.add_argument("--overwrite", action="store_true", help="translate slots that already hold a translation")
    add_backend_arguments(parser)


def run(args) -> int:
    targets = parse_languages(args.to, "--languages")
    manifest = Manifest.load(args.manifest)
    translator = Translator(backend_from_args(args), cache_from_args(args, Path(args.output).parent))
    out, summary = translate_manifest(manifest, targets, translator, overwrite=args.overwrite,
                                      progress=not args.no_progress)
    out.rebase(Path(args.output).resolve().parent)  # relative audio paths stay right in another folder
    out.save(args.output)
    print(f"wrote {args.output}: {summary.describe()} ({translator.backend.describe()}; "
          f"cache {translator.cache.path}, {len(translator.cache)} entries)")
    if summary.failures:
        print(f"{summary.failed} caption(s) left missing (null); rerun the command to try them again:")
        print_failures(summary.failures)
        return 1
    return 0
