"""What training aiSFX's upper blocks costs on this CPU, against the heads alone (issue 35).

Times one epoch of :func:`mlatr.training.head_training.train_heads` over ``--clips`` clips of ``--blocks`` aiSFX blocks
each (random stage maps, the shapes the prefix cache holds; the near-identity heads, batch 64, one thread as
the head trainer uses), for each number of trained last blocks in ``--train-blocks`` (0 = heads only over
pooled vectors), and extrapolates to ``--corpus`` clips: the epoch time of the real-sound corpus and how many
epochs fit into ``--budget`` minutes. Example::

    python benchmarks/bench_tail_epoch.py --clips 256 --train-blocks 0,1,2 --corpus 7500
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np
import torch
from torch import nn

from mlatr.frozen_prefix import BlockFeatures
from mlatr.models.aisfx import STAGES, AisfxEncoder, AisfxTail
from mlatr.models.projection import ProjectionHead, ResidualHead
from mlatr.training.head_training import HeadTraining, TextBank, train_heads

SHAPES = {0: (1, 100, 96), 1: (64, 50, 48), 2: (128, 25, 24), 3: (256, 12, 12)}


class Model(nn.Module):
    def __init__(self, train_last_blocks: int):
        super().__init__()
        self.audio_encoder = AisfxEncoder(pretrained=False, frozen=train_last_blocks == 0,
                                          train_last_blocks=train_last_blocks or None)
        self.audio_projection = ProjectionHead(512, 512)
        self.text_projection = ResidualHead(512, 512)
        self.temperature = torch.tensor(0.07)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clips", type=int, default=256)
    ap.add_argument("--blocks", type=int, default=2, help="aiSFX blocks per clip (the corpus mean is about 1.5-2)")
    ap.add_argument("--train-blocks", default="0,1")
    ap.add_argument("--corpus", type=int, default=7500)
    ap.add_argument("--budget", type=float, default=15.0, help="minutes")
    args = ap.parse_args()
    print(f"load average {os.getloadavg()[0]:.1f} (the CPU is shared: figures scale with it)")
    rng = np.random.default_rng(0)
    base = None
    for blocks in [int(b) for b in args.train_blocks.split(",")]:
        n = args.clips * (40 if blocks == 0 else 1)  # heads alone are fast: more clips for a measurable epoch
        keys = [("eng", f"caption {i}") for i in range(n)]
        bank = TextBank(keys, rng.standard_normal((n, 512)).astype(np.float32))
        rows = [[[f"caption {i}"]] for i in range(n)]
        times = []
        for epochs in (2, 4):  # two more epochs: the difference over 2 (set-up and first-call costs cancel)
            model = Model(blocks)
            if blocks == 0:
                feats, tail = rng.standard_normal((n, 512)).astype(np.float32), None
            else:
                stage = STAGES - blocks
                maps = rng.random((args.clips * args.blocks, *SHAPES[stage]), dtype=np.float32)
                feats = BlockFeatures([maps], [(0, i * args.blocks, args.blocks) for i in range(args.clips)], stage)
                tail = AisfxTail(model.audio_encoder, stage)
            settings = HeadTraining.at(1e-3, epochs=epochs, batch_size=64, identity_penalty=1.0, tail_lr=1e-4)
            start = time.perf_counter()
            train_heads(model, feats, rows, ["eng"], bank, settings, progress=False, audio_tail=tail)
            times.append(time.perf_counter() - start)
        seconds = max(times[1] - times[0], 1e-6) / 2 * args.clips / n  # per epoch of --clips clips
        base = seconds if blocks == 0 else base
        corpus = seconds * args.corpus / args.clips
        ratio = f", {seconds / base:.0f}x heads only" if base and blocks else ""
        print(f"train last {blocks} block(s): {seconds:.2f} s / epoch of {args.clips} clips{ratio}; "
              f"{args.corpus} clips: {corpus / 60:.1f} min / epoch, {args.budget * 60 / corpus:.1f} epochs in "
              f"{args.budget:g} min")


if __name__ == "__main__":
    main()
