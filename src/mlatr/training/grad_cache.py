"""Gradient caching: the whole batch's loss and gradients with the activation memory of one chunk.

Gao et al. 2021, "Scaling Deep Contrastive Learning Batch Size under Memory Limited Setup" (GradCache):
a contrastive loss couples every item of the batch, but only through the embeddings, so one step can be
split in three:

1. **Encode without graphs** (:func:`encode_without_graphs`): the clips and the captions in chunks of
   ``optim.grad_cache_chunk`` items under ``torch.no_grad()``, keeping each chunk's random state (dropout).
2. **Loss on the cached embeddings**: the objective runs on leaf tensors built from the embeddings (gathered
   from every process under torchrun); its backward gives ``dL/d embedding`` of every item and the full
   gradients of the loss-side parameters (temperature, SigLIP bias, SVR radius model).
3. **Replay** (:func:`replay`): each chunk is encoded again, with the same random state, now with a graph,
   and back-propagated with its slice of the cached embedding gradient
   (``torch.autograd.backward(embedding, grad)``). The encoders' gradients add up to the plain step's.

The result equals the plain step up to floating-point summation order when the encoders treat items
independently. Two exceptions, both of the plain step's own making: layers with batch statistics (CED's
input batch norm in training mode) see a chunk instead of the batch (a chunk at least as large as the
batch keeps the audio in one chunk), and dropout draws the same distribution of masks but not the same
masks as an unchunked forward. Running statistics are restored after step 1, so they are updated once,
by the replay.

Chunks pair up for the replay (:func:`chunk_schedule`): iteration ``k`` replays at most one audio chunk
and one caption chunk in one forward of the dual encoder, aligned so that the last iteration holds the last
chunk of both; under DistributedDataParallel only that iteration synchronises gradients, and every
parameter takes part in it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext

import torch
from torch import Tensor

from mlatr.models.outputs import EncoderOutput

#: One replay iteration: the audio rows and the caption rows it encodes (None = that side is not in it).
Chunk = tuple[slice | None, slice | None]


def chunk_schedule(n_audio: int, n_text: int, chunk: int) -> list[Chunk]:
    """Iterations over ``n_audio`` clips and ``n_text`` captions in chunks of ``chunk``, end-aligned: with
    ``n`` iterations, audio chunk ``i`` of ``n_a`` runs in iteration ``n - n_a + i`` (likewise captions).

    Example:
        >>> chunk_schedule(4, 10, 4)
        [(None, slice(0, 4, None)), (None, slice(4, 8, None)), (slice(0, 4, None), slice(8, 10, None))]
    """
    n_a, n_t = math.ceil(n_audio / chunk), math.ceil(n_text / chunk)
    n = max(n_a, n_t)

    def part(k: int, count: int, total: int) -> slice | None:
        i = k - (n - count)
        return slice(i * chunk, min((i + 1) * chunk, total)) if i >= 0 else None

    return [(part(k, n_a, n_audio), part(k, n_t, n_text)) for k in range(n)]


class RandomState:
    """The CPU generator's state and, on CUDA, the device's: taken at construction, put back by :meth:`restore`."""

    def __init__(self, device: torch.device):
        self.device = device
        self.cpu = torch.get_rng_state()
        self.cuda = torch.cuda.get_rng_state(device) if device.type == "cuda" else None

    def restore(self) -> None:
        torch.set_rng_state(self.cpu)
        if self.cuda is not None:
            torch.cuda.set_rng_state(self.cuda, self.device)


def cat_outputs(parts: Sequence[EncoderOutput]) -> EncoderOutput:
    """Chunks' outputs as one: rows concatenated, frames / masks padded to the longest chunk (masked out)."""
    pooled = torch.cat([p.pooled for p in parts])
    if parts[0].frames is None:
        return EncoderOutput(pooled)
    length = max(p.frames.shape[1] for p in parts)
    frames, masks = [], []
    for p in parts:
        f, m = p.frames, p.mask if p.mask is not None else torch.ones(p.frames.shape[:2], dtype=torch.bool,
                                                                       device=p.frames.device)
        extra = length - f.shape[1]
        if extra:
            f = torch.cat([f, f.new_zeros(f.shape[0], extra, *f.shape[2:])], dim=1)
            m = torch.cat([m, m.new_zeros(m.shape[0], extra)], dim=1)
        frames.append(f)
        masks.append(m)
    return EncoderOutput(pooled, torch.cat(frames), torch.cat(masks))


def leaves(out: EncoderOutput, frames: bool) -> EncoderOutput:
    """Detached copies of ``out``'s embeddings that collect gradients (frames only when ``frames``)."""
    pooled = out.pooled.detach().requires_grad_(True)
    if not frames or out.frames is None:
        return EncoderOutput(pooled)
    return EncoderOutput(pooled, out.frames.detach().requires_grad_(True), out.mask)


def encode_without_graphs(model, waveform: Tensor, lengths: Tensor, texts: Sequence[str], langs: Sequence[str],
                          schedule: Sequence[Chunk], autocast: Callable[[], AbstractContextManager],
                          device: torch.device) -> tuple[EncoderOutput, EncoderOutput, list[RandomState]]:
    """Step 1: ``(audio, text, states)``, the embeddings of every chunk (concatenated, no graph) and the
    random state each iteration started from. Buffers (batch-norm running statistics) are left as found."""
    buffers = [b.detach().clone() for b in model.buffers()]
    audio_parts, text_parts, states = [], [], []
    with torch.no_grad():
        for a, t in schedule:
            states.append(RandomState(device))
            with autocast():
                audio, text = model(None if a is None else waveform[a], None if a is None else lengths[a],
                                    None if t is None else list(texts[t]), None if t is None else list(langs[t]))
            if audio is not None:
                audio_parts.append(audio)
            if text is not None:
                text_parts.append(text)
        for b, saved in zip(model.buffers(), buffers, strict=True):
            b.copy_(saved)
    return cat_outputs(audio_parts), cat_outputs(text_parts), states


def _with_grads(out: EncoderOutput | None, grad: EncoderOutput, rows: slice) -> tuple[list[Tensor], list[Tensor]]:
    """The chunk's embeddings that need a gradient and their slices of the cached gradient."""
    if out is None:
        return [], []
    tensors, grads = [], []
    if out.pooled.requires_grad and grad.pooled is not None:
        tensors.append(out.pooled)
        grads.append(grad.pooled[rows].to(out.pooled.dtype))
    if out.frames is not None and out.frames.requires_grad and grad.frames is not None:
        tensors.append(out.frames)
        grads.append(grad.frames[rows, :out.frames.shape[1]].to(out.frames.dtype))
    return tensors, grads


def replay(net, waveform: Tensor, lengths: Tensor, texts: Sequence[str], langs: Sequence[str],
           schedule: Sequence[Chunk], states: Sequence[RandomState], audio_grad: EncoderOutput,
           text_grad: EncoderOutput, autocast: Callable[[], AbstractContextManager],
           no_sync: Callable[[], AbstractContextManager] | None, sync: bool) -> None:
    """Step 3: every iteration of ``schedule`` encoded again from its random state, with a graph, and
    back-propagated with its rows of ``audio_grad`` / ``text_grad`` (``[n, ...]`` gradients of this
    process's embeddings). ``no_sync`` (DistributedDataParallel's) wraps every iteration but the last, and
    the last too unless ``sync``."""
    after = RandomState(states[0].device)  # the stream continues from where step 1 left it
    last = len(schedule) - 1
    for k, (a, t) in enumerate(schedule):
        states[k].restore()
        quiet = no_sync is not None and (k < last or not sync)
        with no_sync() if quiet else nullcontext():
            with autocast():
                audio, text = net(None if a is None else waveform[a], None if a is None else lengths[a],
                                  None if t is None else list(texts[t]), None if t is None else list(langs[t]))
            ta, ga = _with_grads(audio, audio_grad, a) if a is not None else ([], [])
            tt, gt = _with_grads(text, text_grad, t) if t is not None else ([], [])
            if ta or tt:
                torch.autograd.backward(ta + tt, ga + gt)
    after.restore()
