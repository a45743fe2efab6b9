"""Score large query x context sets block by block under a memory budget.

Fine-grained heads need ``O(Lq * Lc)`` working memory per pair (LGMM: the local similarity matrix and
its softmax, eq. 1-2 of the fine-grained paper), so a test set of 1000 clips x 5000 captions cannot be
scored in one call. :func:`chunked_scores` splits both sides into blocks whose working set, as bounded
by the head's :meth:`~mlatr.matching.heads.MatchingHead.bytes_per_pair` and
:meth:`~mlatr.matching.heads.MatchingHead.bytes_per_item`, fits the budget, and writes each block into
the ``[Nq, Nc]`` result (which, like the inputs, is not counted in the budget).

Under autograd every block's saved tensors stay alive until backward, so the budget then bounds one
block, not the whole call: use it under ``torch.no_grad()`` for evaluation.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar

import torch

from mlatr.errors import MlatrError
from mlatr.matching.heads import HasFeatures, MatchingHead, side_length, slice_side

#: Preferred working set of one block on CPU. Blocks near the size of the last-level cache run the
#: LGMM element-wise passes (eq. 2's normalisation and softmax) about twice as fast as blocks of a few
#: hundred MB; ``benchmarks/bench_matching.py --compare-targets`` measures it (figures in the README).
CPU_BLOCK_TARGET_MB = 48.0

#: The device type whose block preference :func:`chunked_scores` applies (None: the tensors' own); set by
#: :func:`blocks_as_on`.
_BLOCKS_AS_ON: ContextVar[str | None] = ContextVar("blocks_as_on", default=None)


@contextmanager
def blocks_as_on(device_type: str) -> Iterator[None]:
    """``with blocks_as_on("cuda"): ...``: :func:`chunked_scores` chooses its blocks as it would for tensors
    on ``device_type``, whatever device they are on. The GPU planner (:mod:`mlatr.lab.planning`) traces a GPU
    step with fake tensors on the CPU device, and the GPU's blocks (the largest the budget allows) are what
    it must trace, not the CPU's cache-sized ones."""
    token = _BLOCKS_AS_ON.set(device_type)
    try:
        yield
    finally:
        _BLOCKS_AS_ON.reset(token)


def plan_chunks(n_query: int, n_context: int, bytes_per_pair: int, bytes_per_query: int,
                bytes_per_context: int, budget_bytes: int, target_bytes: int | None = None) -> tuple[int, int]:
    """Block sizes ``(block_q, block_c)`` with
    ``block_q * block_c * bytes_per_pair + block_q * bytes_per_query + block_c * bytes_per_context``
    at most ``budget_bytes`` (a hard bound) and, when ``target_bytes`` is given and one pair fits in it,
    at most ``target_bytes`` too (a preference: smaller, cache-sized blocks).

    Without a target, contexts are kept whole when possible (fewer, wider blocks), otherwise halved until
    at least one query fits. With a target, blocks are balanced (about as many queries as contexts) and
    then widened along whichever side is left over. Raises :class:`MlatrError` if a single pair does not
    fit the budget."""
    if n_query <= 0 or n_context <= 0:
        return max(n_query, 1), max(n_context, 1)

    def cost(bq: int, bc: int) -> int:
        return bq * bc * bytes_per_pair + bq * bytes_per_query + bc * bytes_per_context

    limit = budget_bytes
    if target_bytes is not None and cost(1, 1) <= min(target_bytes, budget_bytes):
        limit = min(target_bytes, budget_bytes)
        side = max(1, math.isqrt(max(limit // max(bytes_per_pair, 1), 1)))
        block_c = min(n_context, side)
        while block_c > 1 and cost(1, block_c) > limit:
            block_c //= 2
        block_q = _most_queries(n_query, block_c, limit, bytes_per_pair, bytes_per_query, bytes_per_context)
        if block_q == n_query:  # queries exhausted: give the rest of the room to contexts
            wider = (limit - n_query * bytes_per_query) // (n_query * bytes_per_pair + bytes_per_context)
            block_c = min(n_context, max(block_c, int(wider)))
        return int(block_q), int(block_c)
    block_c = n_context
    while True:
        block_q = _most_queries(n_query, block_c, limit, bytes_per_pair, bytes_per_query, bytes_per_context)
        if block_q >= 1:
            return int(block_q), int(block_c)
        if block_c == 1:
            need = cost(1, 1)
            raise MlatrError(f"memory budget of {budget_bytes / 2**20:.3f} MB is too small: one pair needs "
                             f"{need / 2**20:.3f} MB")
        block_c = max(1, block_c // 2)


def _most_queries(n_query: int, block_c: int, limit: int, bytes_per_pair: int, bytes_per_query: int,
                  bytes_per_context: int) -> int:
    """The largest ``block_q <= n_query`` that fits ``limit`` next to ``block_c`` contexts (0 if none)."""
    room = limit - block_c * bytes_per_context
    if room <= 0:
        return 0
    return int(min(room // (block_c * bytes_per_pair + bytes_per_query), n_query))


def chunked_scores(head: MatchingHead, query: HasFeatures, context: HasFeatures,
                   memory_budget_mb: float = 2048.0,
                   on_block: Callable[[int, int], None] | None = None,
                   block_target_mb: float | None = None) -> torch.Tensor:
    """``head.scores(query, context)`` computed block by block: ``[Nq, Nc]``, equal to the unchunked
    result up to floating-point summation order.

    Args:
        head: any :class:`MatchingHead`.
        query, context: objects with ``pooled`` / ``frames`` / ``mask`` (see :mod:`mlatr.matching.heads`).
        memory_budget_mb: bound on the working memory of one block (inputs and the result excluded).
        on_block: optional callback ``on_block(done_blocks, total_blocks)`` after each block (e.g. to
            advance a progress bar); the function itself prints nothing.
        block_target_mb: preferred working set of one block, below the budget (see :func:`plan_chunks`);
            None = :data:`CPU_BLOCK_TARGET_MB` for tensors on the CPU and no preference elsewhere (GPUs
            favour the largest blocks the budget allows; :func:`blocks_as_on` overrides the device type);
            ``float("inf")`` turns the preference off.
    """
    if memory_budget_mb <= 0:
        raise MlatrError(f"memory budget must be positive, got {memory_budget_mb} MB")
    head._check(query, "query")
    head._check(context, "context")
    nq, nc = side_length(query), side_length(context)
    ref = query.frames if head.needs_frames else query.pooled
    if block_target_mb is None and (_BLOCKS_AS_ON.get() or ref.device.type) == "cpu":
        block_target_mb = CPU_BLOCK_TARGET_MB
    target = None if block_target_mb is None or math.isinf(block_target_mb) else int(block_target_mb * 2**20)
    block_q, block_c = plan_chunks(nq, nc, head.bytes_per_pair(query, context), head.bytes_per_item(query),
                                   head.bytes_per_item(context), int(memory_budget_mb * 2**20), target)
    q_starts, c_starts = range(0, nq, block_q), range(0, nc, block_c)
    total, done = len(q_starts) * len(c_starts), 0
    if torch.is_grad_enabled():
        rows = []
        for qs in q_starts:
            q_part = slice_side(query, qs, qs + block_q)
            row = []
            for cs in c_starts:
                row.append(head.scores(q_part, slice_side(context, cs, cs + block_c)))
                done += 1
                if on_block is not None:
                    on_block(done, total)
            rows.append(torch.cat(row, dim=1))
        return torch.cat(rows, dim=0) if rows else ref.new_zeros((nq, nc))
    out = ref.new_empty((nq, nc))
    for qs in q_starts:
        q_part = slice_side(query, qs, qs + block_q)
        for cs in c_starts:
            out[qs:qs + block_q, cs:cs + block_c] = head.scores(q_part, slice_side(context, cs, cs + block_c))
            done += 1
            if on_block is not None:
                on_block(done, total)
    return out
