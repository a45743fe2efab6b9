"""Training the projection heads alone, on features of frozen backbones computed once.

With both backbones frozen (aisfx audio, a frozen multilingual sentence encoder: ``mlatr demo-real``),
only the DualEncoder's heads learn (ATRI sec. 3.1: ``g_a(f_a(x))``, ``g_t(f_t(t))`` with ``f`` fixed),
so every epoch can start from the backbones' cached outputs instead of audio and text. The loss is the
project's objective (:func:`mlatr.training.objective.build_objective`): the pairing scheme chooses which
captions of each clip enter a batch and which sets are contrasted (ML-CLAP, KCL over the translations,
CACL), the base loss scores them (InfoNCE, SigLIP), SupCLAP's SVR regularises, exactly as in full
training; there is no second copy of a loss here.

One extra term exists only here: ``text_identity`` (weight ``identity_penalty``), the mean squared
distance ``||g_t(t) - t||^2`` between the text head's output and its input, which keeps a near-identity
text head (:class:`~mlatr.models.projection.ResidualHead`) close to the frozen multilingual space.

Batches: each epoch shuffles the clips with a generator seeded by ``seed`` (one permutation per epoch,
batches in that order, a last batch of one clip skipped); a clip with several source captions uses one
of them per epoch, drawn from a second generator seeded by ``(seed, epoch)``, and the scheme's language
draws come from a third, so adding captions or languages does not move the clip order.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import nn
from tqdm import tqdm

from mlatr.errors import MlatrError
from mlatr.models.outputs import EncoderOutput
from mlatr.training.config import ObjectiveConfig
from mlatr.training.objective import build_objective

HEAD_PREFIXES = ("audio_projection", "text_projection")


class TextBank:
    """Frozen text features by ``(language, text)``: ``vectors [M, D]`` and the row of each pair."""

    def __init__(self, keys: Sequence[tuple[str, str]], vectors: np.ndarray):
        if len(keys) != len(vectors):
            raise MlatrError(f"text bank: {len(keys)} keys but {len(vectors)} vectors")
        self.row = {tuple(k): i for i, k in enumerate(keys)}
        self.vectors = torch.from_numpy(np.ascontiguousarray(vectors, np.float32))

    @classmethod
    def embed(cls, encoder, pairs: Sequence[tuple[str, str]]) -> TextBank:
        """Embed every distinct ``(language, text)`` of ``pairs`` with a frozen encoder's ``embed_numpy``."""
        keys = list(dict.fromkeys((lang, text) for lang, text in pairs))
        if not keys:
            return cls([], np.zeros((0, encoder.output_dim), np.float32))
        return cls(keys, encoder.embed_numpy([t for _, t in keys], [lang for lang, _ in keys]))

    def lookup(self, texts: Sequence[str], langs: Sequence[str]) -> torch.Tensor:
        try:
            rows = [self.row[(lang, text)] for text, lang in zip(texts, langs, strict=True)]
        except KeyError as exc:
            raise MlatrError(f"text bank: no features for {exc.args[0]!r}") from exc
        return self.vectors[rows]


@dataclass
class HeadTraining:
    """Settings of :func:`train_heads` (the objective as in a training config's ``objective`` section)."""

    epochs: int = 60
    batch_size: int = 64
    lr: float = 1e-3
    weight_decay: float = 1e-4
    seed: int = 0
    objective: ObjectiveConfig = field(default_factory=ObjectiveConfig)
    #: Weight of the ``text_identity`` term (0 = off).
    identity_penalty: float = 0.0


def caption_rows(captions: dict[str, list[str | None]], languages: Sequence[str]) -> list[list[str | None]]:
    """One row per source caption ``j`` of a clip: its text in each of ``languages`` (``None`` where
    missing); rows with no text in any of ``languages`` are dropped."""
    n = max((len(v) for v in captions.values()), default=0)
    rows = [[_at(captions.get(lang), j) for lang in languages] for j in range(n)]
    return [row for row in rows if any(t is not None for t in row)]


def _at(texts: list[str | None] | None, j: int) -> str | None:
    return texts[j] if texts is not None and j < len(texts) else None


def project(model, audio_feats: np.ndarray, text_feats: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Projected unit-norm embeddings of precomputed backbone features (the DualEncoder's heads)."""
    with torch.no_grad():
        a = model.audio_projection(torch.from_numpy(audio_feats))
        t = model.text_projection(torch.from_numpy(text_feats))
    return _unit(a.numpy()), _unit(t.numpy())


def _unit(x: np.ndarray) -> np.ndarray:
    return x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)


def head_parameters(model) -> list[nn.Parameter]:
    return [p for n, p in model.named_parameters() if n.startswith(HEAD_PREFIXES)]


def train_heads(model, audio_feats: np.ndarray, clip_rows: Sequence[Sequence[Sequence[str | None]]],
                languages: Sequence[str], bank: TextBank, settings: HeadTraining,
                validate: Callable[[nn.Module], float] | None = None, progress: bool = True) -> list[dict]:
    """Train ``model``'s projection heads on fixed features; returns the per-epoch log.

    ``audio_feats [N, Da]`` frozen audio features; ``clip_rows[i]`` the caption rows of clip ``i``
    (:func:`caption_rows`: one row per source caption, one text per language of ``languages``, English
    first for CACL); ``bank`` holds the frozen text features of every caption. ``validate(model)`` (a
    score, higher is better) is called after each epoch and the heads of the best epoch are kept.
    """
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # [64, 512] matrices: thread hand-offs cost more than they save on a busy CPU
    try:
        return _train(model, audio_feats, clip_rows, list(languages), bank, settings, validate, progress)
    finally:
        torch.set_num_threads(threads)


def _train(model, audio_feats, clip_rows, languages, bank, s: HeadTraining, validate, progress):
    if len(clip_rows) != len(audio_feats):
        raise MlatrError(f"train heads: {len(clip_rows)} clips of captions for {len(audio_feats)} audio features")
    empty = [i for i, rows in enumerate(clip_rows) if not rows]
    if empty:
        raise MlatrError(f"train heads: clip {empty[0]} has no caption")
    objective = build_objective(s.objective, s.batch_size)
    gen = torch.Generator().manual_seed(s.seed)
    params = head_parameters(model) + list(objective.parameters())
    opt = torch.optim.AdamW(params, lr=s.lr, weight_decay=s.weight_decay)
    a_all = torch.from_numpy(np.ascontiguousarray(audio_feats, np.float32))
    n = len(clip_rows)
    log, best, best_state = [], -float("inf"), None
    for epoch in tqdm(range(s.epochs), desc="train heads", unit="epoch", disable=not progress):
        model.audio_projection.train()
        model.text_projection.train()
        order = torch.randperm(n, generator=gen)
        caption_gen = torch.Generator().manual_seed(s.seed * 100_003 + epoch)
        scheme_gen = torch.Generator().manual_seed(s.seed * 100_019 + epoch)
        pick = [int(torch.randint(len(rows), (1,), generator=caption_gen)) if len(rows) > 1 else 0
                for rows in clip_rows]
        total, terms_sum, seen = 0.0, {}, 0
        for start in range(0, n - 1, s.batch_size):
            idx = order[start:start + s.batch_size]
            if len(idx) < 2:
                continue
            rows = [clip_rows[i][pick[i]] for i in idx.tolist()]
            selection = objective.scheme.select(rows, languages, scheme_gen)
            text_in = bank.lookup(selection.texts, selection.langs)
            text_out = model.text_projection(text_in)
            audio = EncoderOutput(pooled=model.audio_projection(a_all[idx]))
            out = objective(audio, EncoderOutput(pooled=text_out), selection, model.temperature)
            if s.identity_penalty > 0:
                out.terms["text_identity"] = s.identity_penalty * ((text_out - text_in) ** 2).sum(dim=1).mean()
            loss = out.total
            opt.zero_grad()
            loss.backward()
            opt.step()
            total += float(loss.detach()) * len(idx)
            for name, value in out.terms.items():
                terms_sum[name] = terms_sum.get(name, 0.0) + float(value.detach()) * len(idx)
            seen += len(idx)
        entry = {"epoch": epoch + 1, "loss": total / max(seen, 1)}
        if len(terms_sum) > 1:
            entry.update({f"loss_{k}": v / max(seen, 1) for k, v in terms_sum.items()})
        if validate is not None:
            score = float(validate(model))
            entry["val"] = score
            if score > best:
                best = score
                best_state = copy.deepcopy({k: v for k, v in model.state_dict().items() if k.startswith(HEAD_PREFIXES)})
        log.append(entry)
    if best_state is not None:
        model.load_state_dict(best_state, strict=False)
    return log
