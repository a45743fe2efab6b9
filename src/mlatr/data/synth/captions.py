"""Scene -> captions in every language, aligned by index.

A :class:`CaptionPlan` fixes everything a caption chooses (the template variant, which attributes it
mentions, whether it spells out counts, which synonym it uses); every language realises the same plan
with its own grammar, so caption ``j`` in one language translates caption ``j`` in another. Plans omit
attributes as people do (pitch mentioned 70% of the time, loudness 60%, a count above one spelled out
80%), so that several scenes can fit one caption and a caption is not a full description.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from mlatr.data.synth.languages import GRAMMARS, N_VARIANTS, Mention
from mlatr.data.synth.scene import Scene

P_PITCH = 0.7
P_LOUDNESS = 0.6
P_COUNT = 0.8
N_SYNONYMS = 2


@dataclass(frozen=True)
class CaptionPlan:
    """One caption's choices: a template ``variant`` and one mention per event of ``scene.events``."""

    variant: int
    mentions: tuple[Mention, ...]
    n_foreground: int
    #: (pitch, loudness) of each event as it sounds, whether or not the caption mentions it.
    truth: tuple[tuple[str, str], ...] = ()

    @property
    def foreground(self) -> list[Mention]:
        return list(self.mentions[: self.n_foreground])

    @property
    def background(self) -> Mention | None:
        return self.mentions[self.n_foreground] if len(self.mentions) > self.n_foreground else None


def sample_plan(scene: Scene, rng: np.random.Generator) -> CaptionPlan:
    """Draw the choices of one caption of ``scene``."""
    variant = int(rng.integers(N_VARIANTS))
    mentions = []
    for e in scene.events:
        pitch = e.pitch if rng.random() < P_PITCH else None
        loud = e.loudness if rng.random() < P_LOUDNESS else None
        show_count = bool(rng.random() < P_COUNT)
        mentions.append(Mention(e.kind, pitch, loud, e.count, show_count, int(rng.integers(N_SYNONYMS))))
    truth = tuple((e.pitch, e.loudness) for e in scene.events)
    return CaptionPlan(variant, tuple(mentions), len(scene.sequence), truth)


def realise(plan: CaptionPlan, lang: str) -> str:
    """The caption of ``plan`` in language ``lang`` (an ISO 639-3 code of :data:`GRAMMARS`)."""
    return GRAMMARS[lang].realise(plan.foreground, plan.background, plan.variant)


def sample_plans(
    scene: Scene, rng: np.random.Generator, k: int, tries_per_caption: int = 10
) -> list[CaptionPlan]:
    """``k`` plans whose English captions differ where the scene allows (up to ``10 k`` draws)."""
    plans: list[CaptionPlan] = []
    seen: set[str] = set()
    for _ in range(k * tries_per_caption):
        plan = sample_plan(scene, rng)
        text = realise(plan, "eng")
        if text not in seen:
            plans.append(plan)
            seen.add(text)
            if len(plans) == k:
                return plans
    while len(plans) < k:  # a scene with few possible captions: repeat some
        plans.append(sample_plan(scene, rng))
    return plans


def captions_for_plans(plans: Sequence[CaptionPlan], languages: Sequence[str]) -> dict[str, list[str]]:
    """``{lang: [caption of plan 0, caption of plan 1, ...]}``: equal-length lists aligned by index."""
    return {lang: [realise(p, lang) for p in plans] for lang in languages}


def plan_fits(plan: CaptionPlan, scene: Scene) -> bool:
    """Whether the caption of ``plan`` is a true description of ``scene``.

    True when the scene has the same structure and kinds in the same order, and every attribute the
    caption states holds: a mentioned pitch or loudness, a spelled-out count, and singular vs plural.
    A clean caption fits its own scene; how many other clips it fits measures its ambiguity.
    """
    events = scene.events
    if len(events) != len(plan.mentions) or len(scene.sequence) != plan.n_foreground:
        return False
    for m, e in zip(plan.mentions, events, strict=True):
        if m.kind != e.kind or (m.pitch and m.pitch != e.pitch) or (m.loudness and m.loudness != e.loudness):
            return False
        if e.count is not None and (m.plural != (e.count > 1) or (m.numeral and m.numeral != e.count)):
            return False
    return True
