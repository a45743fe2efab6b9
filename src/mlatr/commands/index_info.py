import json

from mlatr.terminal_text import shown

HELP = """Print what an index holds: format, clips (live and deleted), captions, dimension, dtype, shards with
their size and approximate-search structures over the clips and the captions (kind, parameters, recall@10
measured at build), the window of the text ranking and its fused recall@10 measured at build, the segments of
its long clips (how they were cut and how many), the model and the audio settings it was built with, which
calibration gives its relevance (the model's own, fitted for its weights, or none) and below which relevance
an answer says "nothing relevant" (the index's own level, fitted on nonsense queries run against it). --check
also stats every clip's audio file and lists those deleted or changed since they were indexed. --json prints
one JSON object.

Examples:
  mlatr index info sounds.idx
  mlatr index info sounds.idx --check --json
"""


def add_arguments(parser):
    parser.add_argument("index", metavar="INDEX", help="index folder or .npz written by mlatr index build")
    parser.add_argument("--check", action="store_true",
                        help="stat every indexed clip's audio and list those deleted or changed since indexed")
    parser.add_argument("--json", action="store_true", help="print JSON")


def run(args) -> int:
    from mlatr.search.index import Index  # loads torch: not paid by every command's parser

    index = Index.load(args.index)
    info = index.summary(check=args.check)
    if args.json:
        print(json.dumps(info, ensure_ascii=False, indent=1))
        return 0
    print(f"{args.index}: {info['format']}, {info['clips']} clips ({info['deleted']} deleted), "
          f"{info['captions']} captions, dim {info['dim']}, {info['dtype']}, {info['bytes'] / 2**20:.1f} MiB")
    digests = ", ".join(f"{what} sha256 {info[key][:12]}" for what, key in (("file", "checkpoint_sha256"),
                                                                        ("weights", "weights_sha256")) if info[key])
    model = shown(info["checkpoint"]) + (f" ({digests})" if digests else "")
    print(f"  model {model}; {info['sample_rate']} Hz, {info['max_seconds']} s; caption languages "
          f"{shown(', '.join(info['caption_languages']))}")
    cal = info["calibration"]
    if cal["calibrated"]:
        fitted = cal.get("fitted") or {}
        print(f"  relevance: calibration {cal['id']} of the model (fitted for its weights by "
              f"{fitted.get('command', '?')}, commit {fitted.get('commit') or 'unknown'})")
        level = info["nothing_relevant"]
        print(f"  nothing relevant: below relevance {level['min_relevance']:.3f} (this index's level on "
              f"{level['queries']} nonsense queries, seed {level['seed']}, "
              + ("stored at build)" if level["stored"] else "fitted now: not stored since the library or the "
                 "calibration changed; mlatr index compact stores it)"))
    else:
        print(f"  relevance: not calibrated ({cal['why']}): searches rank, without a probability")
    for shard in info["shards"]:
        print(f"  {shard['name']}: {shard['rows']} rows ({shard['deleted']} deleted), {_how(shard.get('ann'))}"
              + (f"; captions {_how(shard['caption_ann'])}" if shard.get("caption_ann") else ""))
    segments = info.get("segments")
    if segments:
        print(f"  segments: {segments['count']} of {segments['clips']} long clip(s) ({segments['seconds']:g} s every "
              f"{segments['hop']:g} s, clips longer than {segments['above']:g} s)")
    fusion = info.get("fusion")
    if fusion:
        print(f"  text ranking: windowed (each source's top {fusion['window']}), fused recall@10 "
              f"{fusion['recall_at_10']:.3f} against the exact fusion ({fusion['queries']} queries, measured at "
              f"{fusion['clips']} clips)")
    if args.check:
        print(f"  audio: {len(info['stale']['deleted'])} deleted and {len(info['stale']['changed'])} changed "
              "since indexed" + (" (mlatr index build --add re-encodes changed clips and drops deleted ones)"
                                 if any(info["stale"].values()) else ""))
        for why, ids in info["stale"].items():
            for cid in ids[:20]:
                print(f"    {why}: {shown(cid)}")
    return 0


def _how(ann: dict | None) -> str:
    """A shard's approximate structure as one phrase."""
    if not ann:
        return "exact search"
    return (f"{ann['kind']} {' '.join(f'{k}={v}' for k, v in ann['params'].items())}, recall@10 "
            f"{ann['recall_at_10']:.3f} ({ann['recall_queries']} queries)")
