"""Batches of similar sounds from different libraries: hard negatives for the contrastive heads (issue 35).

With random batches, the negatives of a clip are mostly easy: another library's kind of sound entirely. A
model that must tell a door from a gate on a library it never saw learns that from batches where the door's
negatives are gates, hatches and lids, recorded elsewhere. :func:`caption_clusters` groups the training
clips by their caption's frozen text features (k-means, cosine); :func:`group_batches` regroups an epoch's
planned clips (the same clips and captions, :func:`mlatr.data.pipeline.epoch_plan.plan_epoch`) so that each batch
holds whole clusters: clusters in an order drawn from the ``(seed, epoch, "hard")`` generator, a cluster's
clips together, batches of the plan's size. Every clip still comes once per epoch; resume stays bit-exact.
Clips with the very same caption text in one batch would be false negatives: a batch takes at most one clip
per caption text, the others move on to later batches.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence

import numpy as np
import torch

from mlatr.data.pipeline.epoch_plan import PlannedClip
from mlatr.seeds import derive_seed


def caption_clusters(vectors: np.ndarray, k: int, seed: int = 0, iterations: int = 20) -> np.ndarray:
    """Cluster ids ``[N]`` of unit-normalised ``vectors [N, D]``: spherical k-means, ``iterations`` rounds, from
    ``k`` rows chosen farthest-first (the first drawn with ``seed``, each next the row least similar to those
    chosen)."""
    x = vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
    k = max(1, min(k, len(x)))
    chosen = [int(np.random.default_rng(seed).integers(len(x)))]
    nearest = x @ x[chosen[0]]
    for _ in range(k - 1):
        chosen.append(int(nearest.argmin()))
        nearest = np.maximum(nearest, x @ x[chosen[-1]])
    centres = x[chosen].copy()
    labels = np.zeros(len(x), dtype=np.int64)
    for _ in range(iterations):
        labels = (x @ centres.T).argmax(axis=1)
        for c in range(k):
            members = x[labels == c]
            if len(members):
                m = members.sum(axis=0)
                centres[c] = m / max(np.linalg.norm(m), 1e-12)
    return labels


def group_batches(plan: list[list[PlannedClip]], cluster_of: Sequence[int], text_of: Callable[[PlannedClip], str],
                  seed: int, epoch: int) -> list[list[PlannedClip]]:
    """The clips of ``plan`` regrouped into as many batches of whole clusters (see the module docstring);
    ``cluster_of[i]`` the cluster of clip ``i``, ``text_of(planned)`` its planned caption."""
    if not plan:
        return plan
    size = len(plan[0])
    g = torch.Generator().manual_seed(derive_seed(seed, epoch, "hard"))
    by_cluster: dict[int, list[PlannedClip]] = {}
    for p in (p for batch in plan for p in batch):
        by_cluster.setdefault(int(cluster_of[p.index]), []).append(p)
    names = list(by_cluster)
    pending = deque(p for i in torch.randperm(len(names), generator=g).tolist() for p in by_cluster[names[i]])
    batches = []
    for _ in plan:
        batch, seen, held = [], set(), []
        while pending and len(batch) < size:
            p = pending.popleft()
            if text_of(p) in seen:
                held.append(p)  # the same caption twice in a batch would be a false negative
                continue
            batch.append(p)
            seen.add(text_of(p))
        while held and len(batch) < size:  # only repeated captions are left
            batch.append(held.pop(0))
        pending.extendleft(reversed(held))
        batches.append(batch)
    return batches
