"""Hard-negative batches (mlatr.training.hard_batches): whole clusters per batch, each clip once, no repeated
caption in a batch while another clip can take its place."""

import numpy as np

from mlatr.data.pipeline.epoch_plan import plan_epoch
from mlatr.training.hard_batches import caption_clusters, group_batches


def test_kmeans_finds_well_separated_groups():
    rng = np.random.default_rng(0)
    centres = np.eye(4, 16)
    x = np.concatenate([c + 0.05 * rng.standard_normal((10, 16)) for c in centres])
    labels = caption_clusters(x, 4, seed=1)
    assert all(len(set(labels[g * 10:(g + 1) * 10])) == 1 for g in range(4)) and len(set(labels)) == 4


def test_batches_hold_whole_clusters_every_clip_once():
    n, size = 40, 8
    cluster = [i // 4 for i in range(n)]  # 10 clusters of 4
    texts = [f"t{i // 2}" if i < 8 else f"t{i}" for i in range(n)]  # clips 0-7: captions repeated in pairs
    plan = plan_epoch(range(n), [[0]] * n, None, size, 0, seed=3, epoch=1)
    grouped = group_batches(plan, cluster, lambda p: texts[p.index], seed=3, epoch=1)
    assert [len(b) for b in grouped] == [size] * (n // size)
    assert sorted(p.index for b in grouped for p in b) == sorted(p.index for b in plan for p in b)
    for batch in grouped:
        assert len({texts[p.index] for p in batch}) == size  # no false negative: a caption once per batch
    # a cluster stays together: its clips lie in one batch, or across one batch boundary
    where = {}
    for k, batch in enumerate(grouped):
        for p in batch:
            where.setdefault(cluster[p.index], set()).add(k)
    assert all(len(b) == 1 or (len(b) == 2 and max(b) - min(b) == 1) for c, b in where.items() if c >= 2)
    again = group_batches(plan, cluster, lambda p: texts[p.index], seed=3, epoch=1)
    assert [[p.index for p in b] for b in again] == [[p.index for p in b] for b in grouped]
    other = group_batches(plan, cluster, lambda p: texts[p.index], seed=3, epoch=2)
    assert [[p.index for p in b] for b in other] != [[p.index for p in b] for b in grouped]
