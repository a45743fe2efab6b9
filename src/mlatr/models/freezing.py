"""Freezing a pretrained encoder: all of it, or all but its last ``n`` blocks (CED, HTSAT, HF text)."""

from __future__ import annotations

from collections.abc import Sequence

from torch import nn

from mlatr.errors import MlatrError


def freeze_all_but_last(model: nn.Module, blocks: Sequence[nn.Module], n: int | None, freeze: bool,
                        finals: Sequence[nn.Module] = (), owner: str = "encoder",
                        option: str = "train_last_blocks") -> None:
    """Set ``requires_grad`` on ``model``'s parameters for fine-tuning.

    - ``freeze``: every parameter is frozen (``n`` is still range-checked).
    - else ``n`` not None: every parameter is frozen, then the last ``n`` of ``blocks`` and the
      ``finals`` (e.g. the final norm) train again; ``n = 0`` leaves only the ``finals``.
    - else: nothing changes.

    ``n`` outside ``[0, len(blocks)]`` raises :class:`MlatrError` naming ``owner`` and ``option``.
    """
    blocks = list(blocks)
    if n is not None and not 0 <= int(n) <= len(blocks):
        raise MlatrError(f"{owner}: {option} must be in [0, {len(blocks)}], got {n}")
    if not freeze and n is None:
        return
    for p in model.parameters():
        p.requires_grad_(False)
    if freeze:
        return
    for module in [*(blocks[len(blocks) - int(n):] if int(n) else []), *finals]:
        for p in module.parameters():
            p.requires_grad_(True)
