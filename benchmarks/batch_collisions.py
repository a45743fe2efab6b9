"""How often an ML-CLAP training batch holds clips with the same event labels or the same caption.

Checks one suspect for L_IntraC hurting on the synthetic benchmark (docs/experiments.md, fine-grained
Table 3): eq. 10 treats every other clip/caption of a batch as a negative. Samples ``--batches`` random
batches of ``--batch-size`` train clips, one caption per clip in a random language (as ML-CLAP pairing
does), and prints the share of clip pairs with an equal label set and with an identical caption.

Usage: ``python benchmarks/batch_collisions.py MANIFEST [--batches 200] [--batch-size 32]``.
"""

from __future__ import annotations

import argparse
import json
import random

from mlatr.data.manifest import Manifest
from mlatr.languages import DEFAULT_LANGUAGES


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("manifest")
    p.add_argument("--batches", type=int, default=200)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    clips = Manifest.load(args.manifest).split("train")
    rng = random.Random(args.seed)
    pairs = same_labels = same_caption = 0
    for _ in range(args.batches):
        batch = [clips[i] for i in rng.sample(range(len(clips)), args.batch_size)]
        labels = [tuple(sorted(c.labels or [])) for c in batch]
        captions = [rng.choice(c.captions[rng.choice([lang for lang in DEFAULT_LANGUAGES if c.captions.get(lang)])])
                    for c in batch]  # a language the clip has a caption in, as ML-CLAP draws
        for a in range(len(batch)):
            for b in range(a + 1, len(batch)):
                pairs += 1
                same_labels += labels[a] == labels[b]
                same_caption += captions[a] == captions[b]
    print(json.dumps({"batches": args.batches, "batch_size": args.batch_size, "clip_pairs": pairs,
                      "same_label_set_pct": round(100 * same_labels / pairs, 2),
                      "identical_caption_pct": round(100 * same_caption / pairs, 3)}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
