"""Translate a manifest's English captions into other languages (ATRI §5.1), through the cache.

:class:`Translator` pairs a backend with a :class:`~mlatr.translation.cache.TranslationCache`: each
distinct text is looked up first and only the misses go to the backend, in batches of the backend's
size; every batch's translations are written to the cache before the next batch is sent, so an
interrupted run resumes without paying twice.

:func:`translate_manifest` fills ``captions[L][j]`` with the translation of ``captions["eng"][j]`` (the
manifest's alignment rule), for each target ``L``. A slot that already holds a translation is kept
unless ``overwrite``. A caption whose translation failed stays ``null`` and is listed in the summary
with the reason: the source text is never put in its place.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from tqdm import tqdm

from mlatr.data.manifest import PIVOT, Manifest
from mlatr.errors import MlatrError
from mlatr.translation.backend import TranslationBackend, TranslationFailure
from mlatr.translation.cache import TranslationCache


@dataclass(frozen=True)
class Outcome:
    """What became of one distinct text: its translation (or None) and where it came from."""

    translation: str | None
    origin: str  # "cache" | "backend" | "failed"
    reason: str = ""


@dataclass(frozen=True)
class FailedCaption:
    clip_id: str
    lang: str
    index: int
    text: str
    reason: str


@dataclass
class TranslationSummary:
    """Caption slots of a run: ``translated`` by the backend now, taken from the ``cached`` translations,
    ``failed`` (left missing), ``kept`` (already translated in the manifest)."""

    translated: int = 0
    cached: int = 0
    failed: int = 0
    kept: int = 0
    failures: list[FailedCaption] = field(default_factory=list)

    def count(self, outcome: Outcome) -> None:
        if outcome.origin == "cache":
            self.cached += 1
        elif outcome.origin == "backend":
            self.translated += 1
        else:
            self.failed += 1

    def describe(self) -> str:
        return (f"{self.translated} translated, {self.cached} from the cache, {self.failed} failed"
                + (f", {self.kept} already translated (kept)" if self.kept else ""))


def _batches(items: Sequence[str], size: int) -> Iterable[list[str]]:
    for start in range(0, len(items), size):
        yield list(items[start:start + size])


class Translator:
    """A backend behind the cache (see the module docstring)."""

    def __init__(self, backend: TranslationBackend, cache: TranslationCache | None = None):
        self.backend = backend
        self.cache = cache if cache is not None else TranslationCache()

    def key(self, text: str, source: str, target: str) -> tuple[str, str, str, str, str]:
        return text, source, target, self.backend.name, self.backend.model_for(source, target)

    def pending(self, texts: Iterable[str], source: str, target: str) -> list[str]:
        """The distinct ``texts`` the cache does not hold yet, in first-seen order."""
        return [t for t in dict.fromkeys(texts) if self.key(t, source, target) not in self.cache]

    def translate(self, texts: Iterable[str], source: str, target: str, bar: tqdm | None = None
                  ) -> dict[str, Outcome]:
        """Every distinct text of ``texts`` -> its :class:`Outcome` (the bar advances one per distinct text)."""
        outcomes: dict[str, Outcome] = {}
        todo: list[str] = []
        for text in dict.fromkeys(texts):
            hit = self.cache.get(self.key(text, source, target))
            if hit is None:
                todo.append(text)
            else:
                outcomes[text] = Outcome(hit, "cache")
                if bar is not None:
                    bar.update(1)
        for batch in _batches(todo, self.backend.batch_size):
            reason = ""
            try:
                results = list(self.backend.translate_batch(batch, source, target))
                if len(results) != len(batch):
                    raise TranslationFailure(f"the backend returned {len(results)} translations for "
                                             f"{len(batch)} captions")
            except TranslationFailure as exc:
                results, reason = [None] * len(batch), str(exc) or type(exc).__name__
            self.cache.put_many((self.key(t, source, target), r) for t, r in zip(batch, results, strict=True)
                                if r is not None)
            for text, result in zip(batch, results, strict=True):
                outcomes[text] = (Outcome(result, "backend") if result is not None
                                  else Outcome(None, "failed", reason or "no translation returned"))
            if bar is not None:
                bar.update(len(batch))
        return outcomes


def check_targets(targets: Sequence[str], source: str = PIVOT) -> list[str]:
    """Distinct targets in order; the source language itself is refused."""
    out = list(dict.fromkeys(targets))
    if not out:
        raise MlatrError("no target language given (--to fra,deu,...)")
    if source in out:
        raise MlatrError(f"{source} is the source language, not a target: captions[L][j] translates "
                         f"captions[{source!r}][j]")
    return out


def translate_manifest(manifest: Manifest, targets: Sequence[str], translator: Translator, *,
                       overwrite: bool = False, progress: bool = True) -> tuple[Manifest, TranslationSummary]:
    """A copy of ``manifest`` with ``captions[L][j]`` = translation of ``captions["eng"][j]`` for each
    target ``L``, and the run's summary (see the module docstring)."""
    targets = check_targets(targets)
    for target in targets:  # every pair is checked before anything is sent
        translator.backend.check_pair(PIVOT, target)
    out = Manifest(clips=copy.deepcopy(manifest.clips), root=manifest.root, path=manifest.path)
    summary = TranslationSummary()
    work: dict[str, list[tuple[int, int, str]]] = {}
    for target in targets:
        slots = work[target] = []
        for c, clip in enumerate(out.clips):
            have = clip.captions.get(target, [])
            for j, text in enumerate(clip.captions.get(PIVOT, [])):
                if not overwrite and j < len(have) and have[j] is not None:
                    summary.kept += 1
                else:
                    slots.append((c, j, text))
    total = sum(len(dict.fromkeys(t for _, _, t in slots)) for slots in work.values())
    with tqdm(total=total, unit="caption", disable=not progress, desc="translate") as bar:
        for target, slots in work.items():
            bar.set_description(f"translate {PIVOT}->{target}")
            outcomes = translator.translate([t for _, _, t in slots], PIVOT, target, bar)
            for c, j, text in slots:
                clip, outcome = out.clips[c], outcomes[text]
                summary.count(outcome)
                caps = clip.captions.setdefault(target, [])
                caps.extend([None] * (len(clip.captions[PIVOT]) - len(caps)))
                caps[j] = outcome.translation
                if outcome.translation is None:
                    summary.failures.append(FailedCaption(clip.id, target, j, text, outcome.reason))
    return out, summary
