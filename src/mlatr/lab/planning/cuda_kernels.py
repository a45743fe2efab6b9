"""On a fake CPU trace, the kernels a CUDA run would choose where CPU and CUDA save different tensors.

A fake trace runs on the CPU device (PyTorch's CPU-only build cannot index fake CUDA tensors). Two
composite operations pick their kernel by device, and the CPU and CUDA kernels keep different tensors for
backward; :func:`cuda_choices` makes the CUDA choice instead:

* ``F.dropout`` in training: CUDA runs the fused ``native_dropout``, which keeps a boolean mask (one byte
  per element); the CPU composite keeps a noise tensor in the input's dtype.
* ``F.scaled_dot_product_attention``: CUDA runs flash attention (fp16 / bf16 inputs, no mask) or
  memory-efficient attention (a mask, or fp32), which keep the output and the per-row log-sum-exp; on the
  CPU a dropout probability sends it to the math fallback, which keeps the attention probabilities.
  (PyTorch's ``sdp_kernel`` selection, ``torch/backends/cuda``; the flash kernel needs sm80+, every GPU
  in :data:`~mlatr.lab.planning.gpus.GPUS`.)

One choice of mlatr's own is made by device as well: :func:`~mlatr.matching.chunked_scores` (a matching
head's scores in training) takes cache-sized blocks on the CPU and the largest blocks its budget allows on
a GPU; :func:`cuda_choices` makes it take the GPU's (fewer, larger blocks, each kept for backward).

Which of them a CPU can run for real (:data:`ON_CPU`): the fused dropout (``native_dropout`` has a CPU kernel)
and the score blocks; the CPU validation (tests/test_planning.py) runs the real step with those and compares
it with the fake trace. CUDA's attention kernels exist on CUDA only: ``benchmarks/gpu_suite.sh`` checks them
against ``torch.cuda.max_memory_allocated``. An encoder's ``attention: eager`` takes no substitution at all
(its score tensors are ordinary operations, traced as they run).

How: for the duration of the ``with`` block, ``torch.nn.functional.dropout`` and
``torch.nn.functional.scaled_dot_product_attention`` are replaced by functions that call CUDA's kernels (every
caller looks them up at call time: ``nn.Dropout``, ``F.multi_head_attention_forward``, ``transformers``' attention
code, CED's blocks). A ``TorchFunctionMode`` would not do: gradient checkpointing recomputes a block's forward
inside backward, where the autograd engine runs without the forward's function modes (``torch.utils.checkpoint``
restores only a device context), so the recomputation would take the CPU kernels and save other tensors than the
forward did. The replacement is process-wide while the block runs (a plan traces on one thread).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager, nullcontext

import torch
import torch.nn.functional as F

from mlatr.matching.chunked import blocks_as_on

_LOW = (torch.float16, torch.bfloat16)

#: The substitutions :func:`cuda_choices` makes, by name, and those a CPU can also run for real.
SUBSTITUTIONS = ("dropout", "attention", "score_blocks")
ON_CPU = ("dropout", "score_blocks")


def _autocast_dtype(t: torch.Tensor) -> torch.dtype:
    """The dtype CUDA autocast would give a floating input of an op on its lower-precision list."""
    if torch.is_autocast_enabled("cpu") and t.is_floating_point():
        return torch.get_autocast_dtype("cpu")
    return t.dtype


def _dropout(x: torch.Tensor, p: float = 0.5, training: bool = True, inplace: bool = False) -> torch.Tensor:
    if not training or p == 0.0:
        return x
    out, _ = torch.ops.aten.native_dropout(x, p, True)
    return out


def _attention(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    dtype = _autocast_dtype(query)
    q, k, v = (t.to(dtype) for t in (query, key, value))
    if attn_mask is None and dtype in _LOW:
        out = torch.ops.aten._scaled_dot_product_flash_attention(q, k, v, dropout_p, is_causal, False, scale=scale)
        return out[0]
    bias = attn_mask
    if bias is not None and bias.dtype == torch.bool:  # CUDA turns a boolean mask into an additive bias
        bias = torch.zeros(bias.shape, dtype=dtype, device=bias.device).masked_fill(~bias, float("-inf"))
    elif bias is not None:
        bias = bias.to(dtype)
    if bias is not None:
        bias = bias.expand(q.shape[0], q.shape[1], q.shape[2], k.shape[2])
    out = torch.ops.aten._scaled_dot_product_efficient_attention(q, k, v, bias, True, dropout_p, is_causal,
                                                                 scale=scale)
    return out[0]


#: The ``torch.nn.functional`` names each substitution replaces, with what.
_REPLACEMENTS = {"dropout": ("dropout", _dropout), "attention": ("scaled_dot_product_attention", _attention)}


@contextmanager
def _functional_replaced(which: Sequence[str]) -> Iterator[None]:
    """``torch.nn.functional``'s dropout and / or attention replaced by CUDA's kernels (module docstring)."""
    names = dict(_REPLACEMENTS[w] for w in which if w in _REPLACEMENTS)
    saved = {name: getattr(F, name) for name in names}
    try:
        for name, fn in names.items():
            setattr(F, name, fn)
        yield
    finally:
        for name, fn in saved.items():
            setattr(F, name, fn)


@contextmanager
def cuda_choices(which: Sequence[str] = SUBSTITUTIONS) -> Iterator[None]:
    """``with cuda_choices(): ...``: dropout, attention and the matching head's score blocks take what a CUDA
    run would (module docstring); ``which`` names the substitutions to make (:data:`SUBSTITUTIONS`)."""
    unknown = set(which) - set(SUBSTITUTIONS)
    if unknown:
        raise ValueError(f"unknown kernel substitutions {sorted(unknown)}; known: {SUBSTITUTIONS}")
    with _functional_replaced(which), (blocks_as_on("cuda") if "score_blocks" in which else nullcontext()):
        yield
