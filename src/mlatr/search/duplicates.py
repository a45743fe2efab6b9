"""Duplicates in an indexed library: the same audio under several names, and near copies of one sound.

``mlatr index duplicates INDEX`` lists two kinds of groups among the live clips:

- **exact**: files that are the same audio (:mod:`mlatr.data.dedup`: decoded, mono, 12 kHz, as long, their
  difference at least 45 dB below the sound: a WAV re-save of an OGG, another sample rate or bit depth), found by
  each file's cached print and a sample comparison of the candidates;
- **near**: clips whose pooled audio embeddings are at least :data:`NEAR_COSINE` apart in cosine and whose
  durations are close (:func:`durations_match`: a trimmed copy differs by its trim) and that are not the same
  audio: re-encoded (MP3, Vorbis), gain-changed or trimmed copies. Each clip's :data:`NEIGHBOURS` nearest clips by
  its pooled vector (the index's clip searcher; a long clip's segments are not used: a recording that contains a
  sound is not a copy of it) are the candidates; pairs are joined into groups (connected components).

The thresholds were measured on copies made from the real corpus (docs/sound-libraries.md gives the command,
precision and recall).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from tqdm import tqdm

from mlatr.audio.io import audio_duration
from mlatr.data.dedup import PrintCache, audio_prints, same_audio_groups

#: The cosine of two clips' pooled embeddings from which they may be near copies.
NEAR_COSINE = 0.95
#: Two near copies' durations differ by at most this many seconds ...
DURATION_SECONDS = 1.5
#: ... or by at most this share of the longer one.
DURATION_SHARE = 0.2
#: Nearest clips of each clip examined.
NEIGHBOURS = 10
#: Clips whose neighbours are searched at once.
BATCH = 256


def durations_match(a: float | None, b: float | None, seconds: float = DURATION_SECONDS,
                    share: float = DURATION_SHARE) -> bool:
    """Whether two clips of ``a`` and ``b`` seconds may be copies of one sound: they differ by at most ``seconds``
    or ``share`` of the longer (an unknown duration matches)."""
    if a is None or b is None:
        return True
    return abs(a - b) <= max(seconds, share * max(a, b))


@dataclass
class Group:
    """One group of duplicates: ``kind`` (exact | near), the clips' ``ids``, ``paths`` and ``seconds``; a near
    group's ``pairs``: ``(i, j, cosine)`` of the members (positions in ``ids``) that joined it."""

    kind: str
    ids: list[str]
    paths: list[str]
    seconds: list[float | None]
    pairs: list[tuple[int, int, float]] = field(default_factory=list)

    def to_dict(self) -> dict:
        out = {"kind": self.kind, "ids": self.ids, "paths": self.paths, "seconds": self.seconds}
        if self.kind == "near":
            out["pairs"] = [{"a": i, "b": j, "cosine": round(c, 6)} for i, j, c in self.pairs]
        return out


@dataclass
class Duplicates:
    """What :func:`find_duplicates` found: ``exact`` and ``near`` groups, the clips ``compared``, the clips
    ``skipped`` (id -> why: a file gone or unreadable: no exact comparison) and the ``thresholds`` used."""

    exact: list[Group]
    near: list[Group]
    compared: int
    skipped: dict[str, str]
    thresholds: dict

    def to_dict(self) -> dict:
        return {"thresholds": self.thresholds, "clips": self.compared, "skipped": self.skipped,
                "exact": [g.to_dict() for g in self.exact], "near": [g.to_dict() for g in self.near]}


def find_duplicates(index, *, exact: bool = True, near: bool = True, near_cosine: float = NEAR_COSINE,
                    duration_seconds: float = DURATION_SECONDS, duration_share: float = DURATION_SHARE,
                    neighbours: int = NEIGHBOURS, cache: str | os.PathLike | None = None,
                    progress: bool = False) -> Duplicates:
    """The duplicate groups among ``index``'s live clips (module docstring); ``cache``: a JSON file keeping the
    audio prints between runs (:class:`~mlatr.data.dedup.PrintCache`)."""
    rows = np.asarray(sorted(index.tables.live_rows().values()), np.int64)
    ids = [index.ids[r] for r in rows.tolist()]
    paths = [index.paths[r] for r in rows.tolist()]
    seconds = [_seconds(index, r) for r in rows.tolist()]
    skipped: dict[str, str] = {}
    groups_exact: list[list[int]] = []
    if exact:
        readable = [i for i, p in enumerate(paths) if os.path.isfile(p)]
        skipped.update({ids[i]: "its file is gone" for i in range(len(paths)) if i not in set(readable)})
        prints, bad = audio_prints([paths[i] for i in readable], PrintCache(cache), progress)
        skipped.update({ids[readable[k]]: why for k, why in bad.items()})
        seconds = list(seconds)
        for k, p in enumerate(prints):
            if p is not None:
                seconds[readable[k]] = p.seconds  # the decoded length: exact
        groups_exact = [[readable[k] for k in g] for g in same_audio_groups([paths[i] for i in readable], prints)]
    same = {i: g[0] for g in groups_exact for i in g}
    out_exact = [Group("exact", [ids[i] for i in g], [paths[i] for i in g], [seconds[i] for i in g])
                 for g in groups_exact]
    out_near: list[Group] = []
    if near and len(rows) > 1:
        pairs = _near_pairs(index, rows, seconds, same, near_cosine, duration_seconds, duration_share, neighbours,
                            progress)
        out_near = _components(pairs, ids, paths, seconds)
    return Duplicates(out_exact, out_near, len(rows), skipped,
                      {"same_audio": "decoded, mono, 12 kHz, as long, difference >= 45 dB below the sound",
                       "near_cosine": near_cosine, "duration_seconds": duration_seconds,
                       "duration_share": duration_share, "neighbours": neighbours})


def _seconds(index, row: int) -> float | None:
    """A clip's duration: its facets' (the header's at import), else its file's header."""
    facets = index.clip_columns["facets"][row]
    if isinstance(facets, dict) and isinstance(facets.get("duration"), (int, float)):
        return float(facets["duration"])
    return audio_duration(index.paths[row]) if os.path.isfile(index.paths[row]) else None


def _near_pairs(index, rows: np.ndarray, seconds: Sequence[float | None], same: dict[int, int], cosine: float,
                duration_seconds: float, duration_share: float, neighbours: int, progress: bool
                ) -> dict[tuple[int, int], float]:
    """``{(i, j): cosine}`` (positions into ``rows``, ``i < j``) of the near copies: each clip's ``neighbours``
    nearest by pooled vector at ``cosine`` or more, durations matching, not the same audio."""
    position = {int(r): i for i, r in enumerate(rows.tolist())}
    searcher, ranker = index.searcher("clips"), index.text_ranker()
    found: dict[tuple[int, int], float] = {}
    for start in tqdm(range(0, len(rows), BATCH), desc="near copies", unit="batch", disable=not progress):
        part = rows[start:start + BATCH]
        scores, hits = searcher.top_k(np.asarray(ranker.clip_vectors(part), np.float32), neighbours + 1)
        for a, (s_row, h_row) in enumerate(zip(scores, hits, strict=True)):
            i = start + a
            for s, h in zip(s_row.tolist(), h_row.tolist(), strict=True):
                j = position.get(int(h))
                if j is None or j == i or s < cosine:
                    continue
                if i in same and same.get(j) == same[i]:  # the same audio: an exact group says so
                    continue
                if durations_match(seconds[i], seconds[j], duration_seconds, duration_share):
                    found[(min(i, j), max(i, j))] = max(found.get((min(i, j), max(i, j)), -1.0), float(s))
    return found


def _components(pairs: dict[tuple[int, int], float], ids: list[str], paths: list[str],
                seconds: Sequence[float | None]) -> list[Group]:
    """The connected components of ``pairs`` as near groups (members in clip order)."""
    parent: dict[int, int] = {}

    def find(i: int) -> int:
        parent.setdefault(i, i)
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for i, j in pairs:
        parent[max(find(i), find(j))] = min(find(i), find(j))
    members: dict[int, list[int]] = {}
    for i in parent:
        members.setdefault(find(i), []).append(i)
    groups = []
    for root in sorted(members):
        g = sorted(members[root])
        at = {i: k for k, i in enumerate(g)}
        groups.append(Group("near", [ids[i] for i in g], [paths[i] for i in g], [seconds[i] for i in g],
                            sorted((at[i], at[j], c) for (i, j), c in pairs.items() if i in at)))
    return groups


def default_cache(index_path: str | os.PathLike | None) -> Path | None:
    """Where ``mlatr index duplicates`` keeps audio prints by default: beside a local index
    (``.NAME.audio-prints.json``); None for an index without a local path."""
    if index_path is None:
        return None
    path = Path(index_path)
    return path.parent / f".{path.name}.audio-prints.json"
