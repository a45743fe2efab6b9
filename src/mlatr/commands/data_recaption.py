"""Captions and labels from the clips' paths (folder context, numbering and jargon cleaned, reviewed).

For a manifest made by `mlatr data import --format folder` whose captions are the file names: each
English-only clip gets its captions from its id (the path under the folder) by the rules of
mlatr.data.path_captions, and its label from the folder; a reviewed table replaces the automatic
captions where a person found them wrong and may leave clips out. The default table is mlatr's own for
the Debian sound libraries of scripts/get-real-sounds.sh (src/mlatr/data/real_sound_captions.json).
Captions a person wrote are never replaced: a clip with a sidecar caption file (NAME.txt, NAME.eng.txt)
or with English captions other than the ones its path gives keeps them (counted "kept_own"), and clips
with captions in other languages are kept as they are.

Writes a new manifest: -o OUT, by default MANIFEST_STEM.recaptioned.jsonl beside MANIFEST; --in-place
rewrites MANIFEST (atomically). --dry-run prints every change (clip, captions before -> after, labels)
and writes nothing.

Examples:
  mlatr data recaption my-sounds.jsonl --dry-run
  mlatr data recaption my-sounds.jsonl -o my-sounds.recaptioned.jsonl
  mlatr data recaption data/real-sounds/manifest.jsonl --in-place
"""

import json
from contextlib import nullcontext
from pathlib import Path

from mlatr.commands._outputs import Output, hold_output
from mlatr.data.manifest import Manifest
from mlatr.data.path_captions import DEFAULT_TABLE, CaptionRules, recaption
from mlatr.errors import MlatrError
from mlatr.terminal_text import shown

HELP = __doc__


#: What the command writes: the CLI checks each one's kind and holds its writer lock (see _outputs).
OUTPUTS = (Output("output", "manifest", folder=False),)


def add_arguments(parser) -> None:
    parser.add_argument("manifest", metavar="MANIFEST", help="JSONL manifest (read; rewritten only with --in-place)")
    parser.add_argument("-o", "--output", default=None, metavar="OUT",
                        help="manifest to write (default: MANIFEST_STEM.recaptioned.jsonl beside MANIFEST)")
    parser.add_argument("--in-place", action="store_true", help="rewrite MANIFEST itself")
    parser.add_argument("--dry-run", action="store_true", help="print what would change; write nothing")
    parser.add_argument("--table", default=str(DEFAULT_TABLE),
                        help="JSON table of words, labels and reviewed captions (default: mlatr's own)")


def default_output(manifest: str) -> Path:
    """Where the recaptioned manifest goes without -o: ``STEM.recaptioned.jsonl`` beside it."""
    path = Path(manifest)
    return path.with_name(f"{path.stem}.recaptioned.jsonl")


def _captions(texts) -> str:
    return shown(json.dumps(texts, ensure_ascii=False)) if texts is not None else "(left out)"


def run(args) -> int:
    if args.in_place and args.output is not None:
        raise MlatrError("give -o OUT or --in-place, not both")
    manifest = Manifest.load(args.manifest)
    done = recaption(manifest, CaptionRules.load(args.table))
    summary = ", ".join(f"{k} {v}" for k, v in done.counts.items())
    if args.dry_run:
        for change in done.changes:
            parts = []
            if change.after != change.before:
                parts.append(f"{_captions(change.before)} -> {_captions(change.after)}")
            if change.after is not None and change.labels_before != change.labels_after:
                parts.append(f"labels {_captions(change.labels_before)} -> {_captions(change.labels_after)}")
            print(f"{shown(change.id)}: {'; '.join(parts)}")
        print(f"{args.manifest}: {len(manifest)} clips would remain; {summary} (--dry-run: nothing written)")
        return 0
    target = Path(args.manifest) if args.in_place else Path(args.output or default_output(args.manifest))
    # -o is held by the CLI (OUTPUTS); the manifest itself or the default name is held here
    held = nullcontext() if args.output is not None else hold_output(target, "manifest", wait=args.wait)
    with held:
        manifest.save(target)
    print(f"wrote {target}: {len(manifest)} clips; {summary}")
    return 0

