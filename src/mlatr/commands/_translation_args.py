"""The translation-backend options shared by `mlatr data translate` and `mlatr data translation-qa`."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from mlatr import languages
from mlatr.commands._arg_types import non_negative_float, non_negative_int, positive_float, positive_int
from mlatr.errors import MlatrError
from mlatr.terminal_text import shown
from mlatr.translation import ApertiumBackend, HFBackend, OpenAIBackend, TranslationCache

BACKEND_HELP = """Backends:
  openai    any OpenAI-compatible chat-completions endpoint: --base-url (https://api.deepseek.com/v1, as
            ATRI used, or a local server http://127.0.0.1:8000/v1), --model (deepseek-chat), the key in the
            environment variable named by --api-key-env (default OPENAI_API_KEY; not needed for localhost);
            batches of --batch-size captions (default 20) per request, retries with backoff on 429/5xx and
            timeouts, --max-requests-per-minute
  hf        a local NLLB / M2M100 / Marian model folder (--model DIR; nothing is downloaded), beam search
            with --beams on --device
  apertium  Debian's offline engine: apt-get install apertium-eng-spa apertium-eng-cat (eng<->spa, eng<->cat)

Every translation goes into the cache (--cache, JSON lines, written as translations arrive), keyed by
(text, source, target, backend, model): a rerun sends only what is not in it yet."""

#: Options that only one backend reads (so a typo'd combination is an error, not silently ignored).
ONLY = {"base_url": "openai", "max_requests_per_minute": "openai", "beams": "hf"}


def add_backend_arguments(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("translation backend")
    g.add_argument("--backend", required=True, choices=("openai", "hf", "apertium"), help="see above")
    g.add_argument("--translation-model", dest="model",
                   help="openai: the model name (e.g. deepseek-chat); hf: the local model folder")
    g.add_argument("--base-url", help="openai: the endpoint (…/v1; /chat/completions is appended)")
    g.add_argument("--api-key-env", default="OPENAI_API_KEY", metavar="VAR",
                   help="openai: environment variable holding the API key (default OPENAI_API_KEY)")
    g.add_argument("--batch-size", type=positive_int, default=None,
                   help="captions per request / process / forward pass (default: openai 20, hf 16, apertium 64)")
    g.add_argument("--timeout", type=positive_float, default=None, help="seconds per request (openai, default 60) "
                   "or per process (apertium, default 300)")
    g.add_argument("--retries", type=non_negative_int, default=5,
                   help="openai: retries of a request on 429/5xx/timeouts")
    g.add_argument("--backoff", type=non_negative_float, default=1.0,
                   help="openai: first retry delay in seconds, doubled each retry (at most 60)")
    g.add_argument("--max-requests-per-minute", type=positive_float, default=None, metavar="N",
                   help="openai: space request starts at least 60/N seconds apart")
    g.add_argument("--beams", type=positive_int, default=None, help="hf: beam size (default 4)")
    g.add_argument("--device", default="cpu", help="hf: torch device (default cpu)")
    g.add_argument("--cache", metavar="FILE", help="translation cache (default: translation-cache.jsonl in the "
                                                   "output manifest's folder / the report folder)")
    g.add_argument("--no-progress", action="store_true", help="no progress bar")


def parse_languages(text: str, option: str) -> list[str]:
    """``"fra,de"`` -> ``["fra", "deu"]`` (ISO 639-3), with the option named in the error."""
    try:
        return [languages.normalize(x) for x in text.split(",") if x.strip()]
    except ValueError as exc:
        raise MlatrError(f"{option}: {exc}") from None


def backend_from_args(args: argparse.Namespace):
    """The backend the options describe (built here, where its heavy imports happen)."""
    for opt, backend in ONLY.items():
        if getattr(args, opt) is not None and args.backend != backend:
            raise MlatrError(f"--{opt.replace('_', '-')} applies to --backend {backend} only")
    batch = {"batch_size": args.batch_size} if args.batch_size is not None else {}
    timeout = {"timeout": args.timeout} if args.timeout is not None else {}
    if args.backend == "openai":
        return OpenAIBackend(args.base_url or "", args.model or "", api_key_env=args.api_key_env, retries=args.retries,
                             backoff=args.backoff, max_requests_per_minute=args.max_requests_per_minute,
                             **batch, **timeout)
    if args.backend == "hf":
        if not args.model:
            raise MlatrError("--backend hf needs --model DIR (a local NLLB / M2M100 / Marian folder)")
        beams = {"num_beams": args.beams} if args.beams is not None else {}
        return HFBackend(args.model, device=args.device, **batch, **beams)
    if args.model:
        raise MlatrError("--model does not apply to --backend apertium (the pair picks the Apertium mode)")
    return ApertiumBackend(**batch, **timeout)


def cache_from_args(args: argparse.Namespace, folder: str | Path):
    """The cache of ``--cache``, else ``translation-cache.jsonl`` in ``folder``."""
    path = Path(args.cache) if args.cache else Path(folder) / "translation-cache.jsonl"
    cache = TranslationCache(path)
    if cache.skipped_lines:
        print(f"translation cache {path}: skipped {cache.skipped_lines} unreadable line(s) (a run cut short?)")
    return cache


def print_failures(failures, limit: int = 10) -> None:
    """The first ``limit`` failed captions, one per line, on stderr."""
    for f in failures[:limit]:
        print(f'  failed: {shown(f.clip_id)} {f.lang}[{f.index}] "{shown(f.text, 60)}": {shown(f.reason)}',
              file=sys.stderr)
    if len(failures) > limit:
        print(f"  ... and {len(failures) - limit} more", file=sys.stderr)
