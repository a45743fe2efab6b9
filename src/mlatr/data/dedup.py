"""The same audio kept once: clips whose decoded samples are the same, found by a print and a comparison (issue 35).

**What "the same audio" means** (here, in ``mlatr data dedup`` and ``mlatr index duplicates``, and for a sound
query's own clip, :meth:`mlatr.search.index.Index.mark_same_audio`): the two sounds decoded, mixed to mono and
resampled to :data:`SAME_RATE` are as long (within one sample) and their difference is at least
:data:`SAME_SNR_DB` below the louder one's energy (two sounds both quieter than :data:`SILENT_RMS` are the same
silence). So a file re-saved in another container (WAV, FLAC), sample format (16-, 24-bit, float) or sample rate
is the same audio as the original (unless the re-save clipped it), and a gain change of 0.1 dB (39 dB), a lossy
re-encode (MP3, Vorbis: mostly under 40 dB) or a trimmed copy is not: those are near duplicates
(:mod:`mlatr.search.duplicates`). 12 kHz and not the models' 16 kHz: a re-save of a 16 kHz file at another rate
passes through a resampler whose filter cuts the top of the band (above 7.3 kHz); below 6 kHz two re-saves
agree. The figures that chose the rate and the threshold are in docs/sound-libraries.md.

Finding them: each file's :class:`AudioPrint` (its length at :data:`SAME_RATE`, the SHA-256 of its samples and the
energy of each second of its first :data:`PROFILE_SECONDS`) is computed once and cached by file state; prints of
equal digest are the same audio at once, and two prints as long and whose per-second energies allow it
(:func:`may_be_same`, a necessary condition of the definition) are compared sample by sample, streamed
(:func:`same_files`). :func:`same_audio_groups` returns the groups.

Game and sound packages reuse each other's recordings (a desktop theme's bell in a game, a drum kit in two
packages). Two copies of one recording in two libraries would put the same sound in a held-out library's
test set and in its training set (:mod:`mlatr.lab.experiments.unseen_library`). :func:`dedup_manifest` keeps, of
every group of the same audio, the copies in the library that comes first in ``order`` (then alphabetically);
the copies in other libraries leave the manifest and are named in the first kept clip's ``duplicates`` field.
Copies inside one library stay (they sit in one fold; a theme's named links to one sound are clips of their own
there). Prints are cached per file state (``.audio-prints.json`` beside the manifest), so a rerun decodes only
new or changed files.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import soundfile as sf
from tqdm import tqdm

from mlatr.audio.io import resample, stream_audio
from mlatr.data.manifest import Manifest, Skip
from mlatr.errors import InputError, MlatrError
from mlatr.io_utils import atomic_write_json

#: The rate at which two sounds are compared (module docstring: why not the models' 16 kHz).
SAME_RATE = 12_000
#: How far below the louder sound's energy the difference of two sounds of the same audio is, at least (dB).
SAME_SNR_DB = 45.0
#: RMS under which a sound is silence (-100 dBFS).
SILENT_RMS = 1e-5
#: Seconds of the start of a sound whose per-second energies a print keeps.
PROFILE_SECONDS = 600
PRINT_CACHE = ".audio-prints.json"
PRINT_FORMAT = 1


def audio_hash(path: str | Path) -> str:
    """SHA-256 of a file's decoded audio (sample rate, channels, int16 samples): bit-identical copies only."""
    data, rate = sf.read(str(path), dtype="int16", always_2d=True)
    h = hashlib.sha256(f"{rate}:{data.shape[1]}:".encode())
    h.update(data.tobytes())
    return h.hexdigest()


@dataclass(frozen=True)
class AudioPrint:
    """What :func:`same_audio_groups` needs of a file without decoding it again: ``frames`` at :data:`SAME_RATE`,
    ``digest`` (SHA-256 of those float32 samples), ``energy`` (sum of squares) and ``profile`` (the sum of squares
    of each second of the first :data:`PROFILE_SECONDS`)."""

    frames: int
    digest: str
    energy: float
    profile: tuple[float, ...]

    @property
    def seconds(self) -> float:
        return self.frames / SAME_RATE


def audio_print(path: str | os.PathLike) -> AudioPrint:
    """The :class:`AudioPrint` of the file at ``path`` (decoded once, streamed); an unreadable file raises
    :class:`~mlatr.errors.MlatrError` naming it."""
    h = hashlib.sha256()
    frames, energy, profile = 0, 0.0, []
    for block in stream_audio(path, SAME_RATE):
        block = np.ascontiguousarray(block, np.float32)
        h.update(block.tobytes())
        squares = block.astype(np.float64) ** 2
        energy += float(squares.sum())
        at = 0
        while at < len(block):  # per-second sums, over the first PROFILE_SECONDS
            second = (frames + at) // SAME_RATE
            upto = min(len(block), (second + 1) * SAME_RATE - frames)
            part = float(squares[at:upto].sum())
            if second < PROFILE_SECONDS:
                if second == len(profile):
                    profile.append(0.0)
                profile[second] += part
            at = upto
        frames += len(block)
    if not frames:
        raise MlatrError(f"{path}: no audio decodes")
    return AudioPrint(frames, h.hexdigest(), energy, tuple(profile))


def _threshold(a: float, b: float) -> float:
    """The largest difference energy two sounds of energies ``a`` and ``b`` (over as many samples) may have."""
    return 10 ** (-SAME_SNR_DB / 10) * max(a, b)


def same_samples(a: np.ndarray, b: np.ndarray, rate: int = SAME_RATE) -> bool:
    """Whether two mono waveforms at ``rate`` are the same audio (module docstring; compared over the shorter)."""
    if rate != SAME_RATE:
        a, b = resample(a, rate, SAME_RATE), resample(b, rate, SAME_RATE)
    if abs(len(a) - len(b)) > 1:
        return False
    n = min(len(a), len(b))
    x, y = np.asarray(a[:n], np.float64), np.asarray(b[:n], np.float64)
    ea, eb = float(x @ x), float(y @ y)
    if max(ea, eb) <= n * SILENT_RMS ** 2:
        return True
    d = x - y
    return float(d @ d) <= _threshold(ea, eb)


def may_be_same(a: AudioPrint, b: AudioPrint) -> bool:
    """A necessary condition of :func:`same_files` from the prints alone: as long within one sample, and the
    per-second energies not further apart than the definition allows (the difference of two sounds has at least
    ``sum_s n_s (rms_a,s - rms_b,s)^2`` energy)."""
    if abs(a.frames - b.frames) > 1:
        return False
    if max(a.energy, b.energy) <= a.frames * SILENT_RMS ** 2:
        return True
    n = [min(SAME_RATE, a.frames - SAME_RATE * s) for s in range(min(len(a.profile), len(b.profile)))]
    spread = sum(k * (math.sqrt(pa / k) - math.sqrt(pb / k)) ** 2
                 for k, pa, pb in zip(n, a.profile, b.profile, strict=False) if k > 0)
    return spread <= _threshold(a.energy, b.energy) * 1.01 + 1e-12


def same_files(a: str | os.PathLike, b: str | os.PathLike) -> bool:
    """Whether two sound files are the same audio (module docstring), both streamed side by side."""
    streams = [stream_audio(a, SAME_RATE), stream_audio(b, SAME_RATE)]
    held = [np.zeros(0, np.float64), np.zeros(0, np.float64)]
    ended = [False, False]
    ea = eb = ed = 0.0
    n = 0
    while True:
        for k in (0, 1):
            while not ended[k] and not len(held[k]):
                block = next(streams[k], None)
                ended[k] = block is None
                if block is not None:
                    held[k] = block.astype(np.float64)
        if not len(held[0]) or not len(held[1]):
            break
        m = min(len(held[0]), len(held[1]))
        x, y = held[0][:m], held[1][:m]
        ea, eb, ed, n = ea + float(x @ x), eb + float(y @ y), ed + float((x - y) @ (x - y)), n + m
        held = [held[0][m:], held[1][m:]]
    rest = sum(len(h) for h in held) + sum(len(block) for k in (0, 1) if not ended[k] for block in streams[k])
    if rest > 1:
        return False
    if max(ea, eb) <= n * SILENT_RMS ** 2:
        return True
    return ed <= _threshold(ea, eb)


class PrintCache:
    """Prints of files by path and file state (size, mtime), kept in a JSON file (``path`` None: in memory)."""

    def __init__(self, path: str | os.PathLike | None):
        self.path = Path(path) if path is not None else None
        self.prints: dict[str, dict] = {}
        if self.path is not None and self.path.is_file():
            try:
                stored = json.loads(self.path.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                stored = {}  # a damaged cache is computed again, not trusted
            if isinstance(stored, dict) and stored.get("format") == PRINT_FORMAT:
                self.prints = stored.get("prints", {})

    @staticmethod
    def key(path: str | os.PathLike) -> str:
        st = os.stat(path)
        return f"{os.path.abspath(path)}:{st.st_size}:{st.st_mtime_ns}"

    def get(self, path: str | os.PathLike) -> AudioPrint:
        key = self.key(path)
        found = self.prints.get(key)
        if found is None:
            found = self.prints[key] = asdict(audio_print(path))
        return AudioPrint(found["frames"], found["digest"], found["energy"], tuple(found["profile"]))

    def save(self) -> None:
        if self.path is not None:
            atomic_write_json(self.path, {"format": PRINT_FORMAT, "prints": self.prints}, indent=None)


def audio_prints(paths: Sequence[str | os.PathLike], cache: PrintCache, progress: bool = False
                 ) -> tuple[list[AudioPrint | None], dict[int, str]]:
    """The print of each file (None where it cannot be read: ``{position: why}``), from ``cache`` or computed."""
    out: list[AudioPrint | None] = []
    bad: dict[int, str] = {}
    for i, path in enumerate(tqdm(paths, desc="audio prints", unit="file", disable=not progress)):
        try:
            out.append(cache.get(path))
        except FileNotFoundError:
            out.append(None)
            bad[i] = f"{path}: file not found (a sound file)"
        except (MlatrError, OSError) as exc:
            out.append(None)
            bad[i] = str(exc)
    cache.save()
    return out, bad


def same_audio_groups(paths: Sequence[str | os.PathLike], prints: Sequence[AudioPrint | None],
                      same: Callable[[str, str], bool] = same_files) -> list[list[int]]:
    """Groups (positions into ``paths``, ascending; two or more each) of files that are the same audio: equal
    digests at once, then files as long whose prints allow it, compared by ``same`` (each pair once; a file joins
    a group when it is the same audio as one member)."""
    parent = list(range(len(paths)))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    def join(i: int, j: int) -> None:
        parent[max(find(i), find(j))] = min(find(i), find(j))

    by_digest: dict[str, int] = {}
    for i, p in enumerate(prints):
        if p is not None:
            if p.digest in by_digest:
                join(i, by_digest[p.digest])
            else:
                by_digest[p.digest] = i
    firsts = sorted(by_digest.values(), key=lambda i: prints[i].frames)
    for a, i in enumerate(firsts):
        for j in firsts[a + 1:]:
            if prints[j].frames - prints[i].frames > 1:
                break
            if find(i) != find(j) and may_be_same(prints[i], prints[j]) and same(str(paths[i]), str(paths[j])):
                join(i, j)
    groups: dict[int, list[int]] = {}
    for i, p in enumerate(prints):
        if p is not None:
            groups.setdefault(find(i), []).append(i)
    return sorted((g for g in groups.values() if len(g) > 1), key=lambda g: g[0])


def library_of(clip_id: str) -> str:
    return clip_id.split("/", 1)[0]


@dataclass
class DedupReport:
    clips: int
    removed: dict[str, str]  # removed clip id -> kept clip id
    #: Clips whose audio could not be read, left out of the comparison and kept (``skip_bad``).
    skipped: list[Skip] = field(default_factory=list)


def dedup_manifest(manifest: Manifest, order: Sequence[str] = (), progress: bool = False,
                   skip_bad: bool = False) -> DedupReport:
    """Remove the clips whose audio another clip of another library already has (in place); see the module
    docstring. Libraries not in ``order`` come after those in it, alphabetically. A clip whose audio cannot be
    read is an :class:`~mlatr.errors.InputError` naming the manifest's line (as every reader of a manifest's audio
    names it: :func:`mlatr.data.clip_audio.load_clip_audio`); with ``skip_bad`` it is left out of the comparison,
    kept in the manifest (nothing says it is a copy) and listed in the report's ``skipped``."""
    paths = [clip.audio_path(manifest.root) for clip in manifest.clips]
    prints, bad = audio_prints(paths, PrintCache(manifest.root / PRINT_CACHE), progress)
    skipped: list[Skip] = []
    for i, why in bad.items():
        clip = manifest.clips[i]
        problem = InputError(f"clip {clip.id!r}: {why}", str(manifest.path), clip.line, "audio") \
            if manifest.path is not None else MlatrError(f"clip {clip.id!r}: {why}")
        if not skip_bad:
            raise problem
        skipped.append(Skip(str(paths[i]), str(problem), clip.id))
    rank = {lib: k for k, lib in enumerate(order)}
    group_of = {i: g[0] for g in same_audio_groups(paths, prints) for i in g}
    ranked = sorted(range(len(manifest.clips)), key=lambda i: (rank.get(library_of(manifest.clips[i].id), len(rank)),
                                                             library_of(manifest.clips[i].id), manifest.clips[i].id))
    first: dict[int, object] = {}
    removed: dict[str, str] = {}
    for i in ranked:
        clip = manifest.clips[i]
        kept = first.setdefault(group_of.get(i, -1 - i), clip)
        if library_of(kept.id) != library_of(clip.id):
            removed[clip.id] = kept.id
            kept.extra.setdefault("duplicates", []).append(clip.id)
    manifest.clips = [c for c in manifest.clips if c.id not in removed]
    return DedupReport(len(manifest.clips), removed, skipped)
