"""webdataset tar shards in and out: export a manifest, train and validate from shards, import them back.

The layout (the one ML-CLAP's ``tools/prepare_ml_caps_json_to_wds.py`` writes and its loader reads, which
LAION-CLAP's shards share up to the JSON's caption key): each sample is two members of one tar, named
``KEY.EXT`` and ``KEY.json``:

* ``KEY.flac`` / ``.wav`` / ``.mp3`` / ``.ogg``: the audio file's bytes (mlatr exports each clip's file as
  it is, so a shard decodes to exactly the samples the file does; other formats are re-encoded as FLAC);
* ``KEY.json``: ``{"captions": {"eng_Latn": [...], "fra_Latn": [...], ...}}`` (NLLB codes, ML-CLAP's),
  plus mlatr's ``id``, ``audio`` (the manifest's path), ``split``, ``labels``, ``duration`` and ``extra``.
  mlatr keeps its caption lists aligned across languages, so a missing translation is ``null``. Reading
  accepts ISO 639-1/3 codes as keys too, and LAION-CLAP's ``{"text": [...]}`` (English).

``KEY`` is the clip id with every character outside ``[A-Za-z0-9_-]`` replaced by ``_``, then ``_`` and the
clip's position (webdataset cuts a member name at its first dot to find the key); ML-CLAP's own keys are
``STEM_UUID``. Shards are plain tars (``.tar``) or gzipped (``.tar.gz``, ML-CLAP's default); URLs are
anything ``fsspec`` opens (local paths, ``s3://``, ``gs://``, ``https://``) with webdataset's brace ranges
(``DIR/shard-{000000..000099}.tar``).

Training (``data.webdataset``) reads the shards in two passes. The first streams every shard once for its
JSON members and the position of each audio member (a gzipped shard's audio bytes are kept in memory: a
gzip stream has no random access); under torchrun the shards are split over the processes as webdataset's
``split_by_node`` does (shard ``k`` to rank ``k mod world_size``), a process's shards over ``data.workers``
reader threads (``split_by_worker``), and the processes exchange what they read, so every shard is streamed
once per job. The result is a manifest (split, captions, duration) and a
:class:`ShardSource` that reads a clip's audio member by its byte range. Training then follows mlatr's own
plan (the seeded batches of :mod:`mlatr.data.pipeline.batches`, each process reading its part of each global batch
in ``data.workers`` processes), which is what makes a run from shards give the weights a run from the
manifest gives, with any number of processes, and resume bit for bit; webdataset's own stream of
shard-local shuffles would give other batches for another process count.

What a shard may hold is bounded before it is read (:class:`ShardLimits`): an audio or JSON member larger than
``member_bytes`` and a shard whose members add up to more than ``shard_bytes`` are refused from the tar
headers (a 1 MB ``.tar.gz`` can hold a gigabyte of zeros), and a JSON member goes through
:func:`mlatr.json_input.parse_json` (nesting bounded). On import a sample's audio file name is made from its key
alone (:func:`member_file_name`: one name inside the audio folder, no folder part, unique per key).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import tarfile
import tempfile
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from mlatr import languages as _languages
from mlatr.audio.integrity import duration_problem, soundfile
from mlatr.audio.io import load_audio, probe_length
from mlatr.data.importers._common import AUDIO_EXTENSIONS as SOUND_FILE_SUFFIXES
from mlatr.data.importers._common import BadRows
from mlatr.data.manifest import Clip, Manifest, Problem, clip_from_json, split_problem
from mlatr.data.pipeline.file_source import AudioSource
from mlatr.data.pipeline.source import crop_window
from mlatr.errors import InputError, MlatrError
from mlatr.io_utils import atomic_open, atomic_write_with
from mlatr.json_input import parse_json
from mlatr.output_paths import check_output_path

#: Audio member extensions read and written (soundfile decodes them).
AUDIO_EXTENSIONS = ("flac", "wav", "mp3", "ogg")
#: Keys of a sample's JSON that mlatr reads into the clip (the rest goes to ``extra``).
_META_KEYS = ("id", "audio", "captions", "text", "split", "labels", "duration", "extra")
#: Largest JSON member read (a sample's captions and fields; ML-CLAP's are a few kilobytes).
MAX_JSON_BYTES = 16 << 20
#: Longest file name (UTF-8 bytes) an imported member gets before its key is shortened with a digest.
MAX_NAME_BYTES = 200


@dataclass(frozen=True)
class ShardLimits:
    """What one shard may hold, checked from its tar headers before a member is read: ``member_bytes`` per
    audio member (a gzipped shard keeps its audio in memory), ``shard_bytes`` for all its members together
    (what a gzipped shard decompresses to). ``mlatr data import --max-member-mb / --max-shard-mb`` set them."""

    member_bytes: int = 512 << 20
    shard_bytes: int = 16 << 30

    @classmethod
    def from_mb(cls, member_mb: float | None = None, shard_mb: float | None = None) -> ShardLimits:
        default = cls()
        return cls(int(member_mb * 2**20) if member_mb else default.member_bytes,
                   int(shard_mb * 2**20) if shard_mb else default.shard_bytes)


def _wds():
    try:
        import webdataset  # optional extra (mlatr[shards])
    except ImportError as exc:
        raise MlatrError("webdataset shards need the webdataset package: pip install 'mlatr[shards]'") from exc
    return webdataset


#: The file names of webdataset shards (a folder of shards holds these).
SHARD_SUFFIXES = (".tar", ".tar.gz", ".tgz")


def folder_shards(folder: str | os.PathLike) -> list[str]:
    """The shard files directly inside ``folder`` (what ``mlatr data export`` writes there), sorted by name."""
    return sorted(str(p) for p in Path(folder).iterdir()
                  if p.is_file() and p.name.lower().endswith(SHARD_SUFFIXES) and not p.name.startswith("."))


def is_shard_spec(item: str | os.PathLike) -> bool:
    """Whether ``item`` names webdataset shards: a ``.tar`` / ``.tar.gz`` / ``.tgz`` file or URL, a brace range
    (``shard-{000000..000009}.tar``), ``::``-joined specs, or a folder holding shards and no sound file."""
    text = os.fspath(item)
    if Path(text).is_dir():
        return bool(folder_shards(text)) and not any(
            p.suffix.lower() in SOUND_FILE_SUFFIXES for p in Path(text).iterdir())
    return text.lower().endswith(SHARD_SUFFIXES) or "::" in text or bool(re.search(r"\{\d+\.\.\d+\}", text))


def shard_urls(spec: str | Sequence[str]) -> list[str]:
    """The shard URLs of a webdataset spec: brace ranges expanded (``{000000..000009}``), ``::``-joined or
    listed specs concatenated, a local folder replaced by the shards inside it (:func:`folder_shards`)."""
    from braceexpand import braceexpand  # installed with webdataset

    specs = [spec] if isinstance(spec, str) else list(spec)
    urls = [url for s in specs for part in s.split("::") for url in braceexpand(part)]
    urls = [shard for url in urls for shard in (folder_shards(url) if Path(url).is_dir() else [url])]
    if not urls:
        raise MlatrError(f"no shard in {spec!r}")
    return urls


def sample_key(clip_id: str, position: int) -> str:
    """The webdataset key of clip ``position`` (see the module docstring)."""
    return f"{re.sub(r'[^A-Za-z0-9_-]', '_', clip_id)}_{position:08d}"


def _iso(code: str, where: str) -> str:
    try:
        return _languages.normalize(code.split("_", 1)[0])
    except (ValueError, MlatrError) as exc:
        raise InputError(f"unknown caption language {code!r}", where, None, "captions") from exc


def sample_json(clip: Clip) -> dict[str, Any]:
    """A clip's JSON member: ML-CLAP's ``captions`` (NLLB codes) plus mlatr's fields."""
    captions = {_languages.NLLB_CODES.get(lang, lang): list(texts) for lang, texts in clip.captions.items()}
    out: dict[str, Any] = {"id": clip.id, "audio": clip.audio, "captions": captions}
    for key in ("split", "duration"):
        if getattr(clip, key) is not None:
            out[key] = getattr(clip, key)
    if clip.labels:
        out["labels"] = list(clip.labels)
    if clip.extra:
        out["extra"] = dict(clip.extra)
    return out


def _audio_member(path: Path) -> tuple[str, bytes]:
    """``(extension, bytes)`` of an audio file for a shard: the file as it is, or FLAC for other formats."""
    ext = path.suffix.lower().lstrip(".")
    if ext in AUDIO_EXTENSIONS:
        return ext, path.read_bytes()
    sf = soundfile()
    data, rate = sf.read(str(path), dtype="float32", always_2d=True)
    buf = io.BytesIO()
    sf.write(buf, data, rate, format="FLAC")
    return "flac", buf.getvalue()


def export_webdataset(manifest: Manifest, pattern: str, maxcount: int = 10_000, maxsize: float = 1e9,
                      progress: bool = True) -> list[str]:
    """Write ``manifest``'s clips (in order) to shards named by ``pattern`` (``DIR/shard-%06d.tar``; a
    ``.tar.gz`` pattern gzips them), a new shard after ``maxcount`` samples or ``maxsize`` bytes. Each shard
    is written atomically (a killed export leaves complete shards and no partial one). Returns the shard
    paths written."""
    wds = _wds()
    first = shard_name(pattern, 0)
    check_output_path(first, "-o")
    Path(first).parent.mkdir(parents=True, exist_ok=True)
    written: list[str] = []
    writing: dict[str, Any] = {}  # shard name -> its atomic_open context, entered, not yet committed

    def opener(name: str):
        writing[name] = atomic_open(name, "wb", encoding=None)
        return writing[name].__enter__()

    def post(name: str) -> None:  # the shard is complete: it replaces NAME
        writing.pop(name).__exit__(None, None, None)
        written.append(name)

    sink = wds.ShardWriter(pattern, maxcount=maxcount, maxsize=maxsize, verbose=0, opener=opener, post=post,
                           compress=pattern.endswith("gz"))
    try:
        for position, clip in enumerate(tqdm(manifest.clips, desc="writing shards", unit="clip",
                                             disable=not progress)):
            path = clip.audio_path(manifest.root)
            if not path.is_file():
                raise InputError(f"clip {clip.id!r}: audio file not found: {path}", str(manifest.path or "manifest"),
                                 clip.line, "audio")
            ext, data = _audio_member(path)
            sink.write({"__key__": sample_key(clip.id, position), ext: data,
                        "json": json.dumps(sample_json(clip), ensure_ascii=False).encode("utf-8")})
        sink.close()
    except BaseException as exc:  # the shard being written is dropped; the complete ones stay
        if getattr(sink, "tarstream", None) is not None:
            sink.tarstream.close()  # ends the tar stream in the temporary file (then removed), never renamed
        for context in writing.values():
            context.__exit__(type(exc), exc, exc.__traceback__)
        raise
    return written


def shard_name(pattern: str, number: int) -> str:
    """Shard ``number``'s name from ``pattern`` (``DIR/shard-%06d.tar``: one %-field for the number, ``%%`` for a
    percent sign); a pattern without exactly one such field is refused."""
    try:
        name = pattern % number
    except (TypeError, ValueError, KeyError) as exc:
        raise MlatrError(f"-o {pattern}: the shard pattern needs exactly one %d-style field for the shard number "
                         f"(e.g. DIR/shard-%06d.tar; %% for a percent sign): {exc}") from None
    if name == pattern % (number + 1):
        raise MlatrError(f"-o {pattern}: the shard pattern needs a %d-style field for the shard number "
                         "(e.g. DIR/shard-%06d.tar)")
    return name


@dataclass(frozen=True)
class ShardAudio:
    """Where a sample's audio member is: ``url``, byte ``offset`` and ``size`` in it, the extension, the
    bytes themselves for a gzipped shard (no random access there) and the sample's ``key``."""

    url: str
    offset: int
    size: int
    ext: str
    data: bytes | None = None
    key: str = ""

    def read(self) -> bytes:
        if self.data is not None:
            return self.data
        import fsspec  # optional extra (mlatr[shards])

        with fsspec.open(self.url, "rb") as fh:
            fh.seek(self.offset)
            data = fh.read(self.size)
        if len(data) != self.size:
            raise MlatrError(f"{self.url}: truncated shard (the audio at byte {self.offset} ends early)")
        return data


def _split_name(name: str) -> tuple[str, str]:
    """webdataset's member naming: key = folder + base name up to its first dot, extension = the rest."""
    folder, _, base = name.rpartition("/")
    stem, _, ext = base.partition(".")
    return (f"{folder}/{stem}" if folder else stem), ext.lower()


def _mb(n: int) -> str:
    return f"{n / 2**20:,.1f} MiB"


def read_shard(url: str, skip_bad: bool = False, limits: ShardLimits = ShardLimits()
               ) -> tuple[list[tuple[str, dict[str, Any], ShardAudio]], list[Problem]]:
    """``(key, json, audio)`` of every complete sample of one shard, in order, and the problems skipped: a
    sample without JSON or audio, whose JSON is no object (or not UTF-8 JSON, or nested too deeply), whose
    member is larger than ``limits.member_bytes``, or whose key leads out of a folder (``..``, a leading
    ``/``) is refused naming the shard and key, or with ``skip_bad`` skipped and listed. A shard whose members
    add up to more than ``limits.shard_bytes`` is refused whole (from its tar headers, before more is read)."""
    import fsspec  # optional extra (mlatr[shards])

    compressed = url.endswith((".gz", ".tgz"))
    samples: dict[str, dict[str, Any]] = {}
    bad = BadRows(skip_bad)
    refused: set[str] = set()
    total = 0
    try:
        with fsspec.open(url, "rb") as fh, tarfile.open(fileobj=fh, mode="r|*") as tar:
            for member in tar:
                if not member.isfile():
                    continue
                total += member.size
                if total > limits.shard_bytes:
                    raise MlatrError(f"{url}: the shard's members add up to more than {_mb(limits.shard_bytes)} "
                                     "(--max-shard-mb); not read further")
                key, ext = _split_name(member.name)
                if key in refused or ext not in ("json", *AUDIO_EXTENSIONS):
                    continue
                cap = MAX_JSON_BYTES if ext == "json" else limits.member_bytes
                if member.size > cap:
                    refused.add(key)
                    samples.pop(key, None)
                    bad.report(url, None, "size", f"sample {key!r}: member {member.name!r} holds {_mb(member.size)}, "
                                                  f"more than {_mb(cap)}"
                                                  + ("" if ext == "json" else " (--max-member-mb)"))
                    continue
                entry = samples.setdefault(key, {})
                if ext == "json":
                    entry["json"] = _member_json(tar.extractfile(member).read(), url, key)
                else:
                    data = tar.extractfile(member).read() if compressed else None
                    entry["audio"] = ShardAudio(url, member.offset_data, member.size, ext, data, key)
    except FileNotFoundError as exc:
        raise MlatrError(f"{url}: shard not found") from exc
    except (tarfile.TarError, OSError, EOFError) as exc:
        raise MlatrError(f"{url}: not a readable tar shard ({type(exc).__name__}: {exc})") from exc
    out = []
    for key, entry in samples.items():
        if isinstance(entry.get("json"), InputError):
            bad.report(url, None, "json", entry["json"].message)
            continue
        missing = [p for p in ("json", "audio") if p not in entry]
        if missing:
            what = "JSON" if missing[0] == "json" else f"audio ({'/'.join(AUDIO_EXTENSIONS)})"
            bad.report(url, None, missing[0], f"sample {key!r} has no {what} member")
        elif not isinstance(entry["json"], dict):
            bad.report(url, None, "json", f"sample {key!r}: the JSON member is not an object")
        elif key.startswith("/") or ".." in key.split("/"):
            bad.report(url, None, "key", f"sample {key!r}: a member name may not start with '/' or have a "
                                         f"'..' part (it names a file on import)")
        else:
            out.append((key, entry["json"], entry["audio"]))
    return out, bad.problems


def _member_json(data: bytes, url: str, key: str) -> Any:
    """A JSON member's value, or the :class:`InputError` saying why it is none (reported with the sample)."""
    try:
        return parse_json(data.decode("utf-8"), url, field=f"{key}.json")
    except UnicodeDecodeError as exc:
        return InputError(f"sample {key!r}: the JSON member is not UTF-8 (byte {exc.start})", url, field="json")
    except InputError as exc:
        return InputError(f"sample {key!r}: {exc.message}", url, field="json")


def member_file_name(key: str, ext: str) -> str:
    """The file name a sample's audio gets on import: its ``key`` with every character but letters, digits,
    ``_``, ``-`` and ``.`` (a ``/``, a ``\\``, a ``#``, a control character) replaced by ``_``, leading dots
    dropped (no hidden, ``.`` or ``..`` name), shortened with a digest past :data:`MAX_NAME_BYTES`, then
    ``.EXT``: one file name, no folder part, so it lies inside the audio folder whatever the key; two keys
    differing in that way only can map to one name (the import refuses that, naming both)."""
    name = re.sub(r"[^\w.-]", "_", key).lstrip(".") or "_"
    if len(name.encode("utf-8")) > MAX_NAME_BYTES:
        digest = hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()[:16]
        name = name.encode("utf-8")[:MAX_NAME_BYTES - 17].decode("utf-8", "ignore") + "_" + digest
    return f"{name}.{re.sub(r'[^a-z0-9]', '', ext) or 'audio'}"


def clip_of_sample(key: str, meta: dict[str, Any], audio: ShardAudio, audio_path: str) -> Clip:
    """The manifest clip of one sample (``audio_path``: what its ``audio`` field is to say)."""
    where = audio.url
    captions: dict[str, list[str | None]] = {}
    raw = meta.get("captions")
    if isinstance(raw, dict):
        for code, texts in raw.items():
            lang = _iso(str(code), where)
            texts = [texts] if isinstance(texts, str) else texts
            captions.setdefault(lang, []).extend(texts if isinstance(texts, list) else [texts])
    elif raw is not None:
        raise InputError(f"sample {key!r}: captions must be an object of language -> list", where, None, "captions")
    if "text" in meta and "eng" not in captions:  # LAION-CLAP: {"text": [...]}
        text = meta["text"]
        captions["eng"] = [text] if isinstance(text, str) else list(text)
    obj = {"id": meta.get("id", key), "audio": audio_path, "captions": captions,
           **{k: meta[k] for k in ("split", "labels", "duration") if k in meta},
           **(meta.get("extra") or {}), **{k: v for k, v in meta.items() if k not in _META_KEYS}}
    clip, problems = clip_from_json(obj, where, None)
    if problems:
        raise problems[0].to_error()
    return clip


@dataclass
class ShardIndex:
    """What the first pass over a set of shards found: the manifest (clips in shard order) and each clip
    id's audio member."""

    manifest: Manifest
    audio: dict[str, ShardAudio]
    urls: list[str]


def index_shards(spec: str | Sequence[str], rank: int = 0, world_size: int = 1, gather=None,
                 progress: bool = False, workers: int = 0, skip_bad: bool = False,
                 limits: ShardLimits = ShardLimits()) -> ShardIndex:
    """Stream every shard of ``spec`` once (shard ``k`` by rank ``k mod world_size``, a rank's shards read by
    ``workers`` threads, as webdataset's ``split_by_node`` / ``split_by_worker``; ``gather(obj) -> list``
    exchanges the ranks' findings, e.g. ``torch.distributed.all_gather_object``) into a :class:`ShardIndex`
    (clips in shard order, whoever read them). A bad sample (:func:`read_shard`, :func:`clip_of_sample`, a clip
    id seen twice) is refused, or with ``skip_bad`` skipped and listed in the manifest's ``problems``; ``limits``:
    what a shard may hold (:class:`ShardLimits`)."""
    urls = shard_urls(spec)
    ranks_shards = list(range(rank, len(urls), world_size))
    with ThreadPoolExecutor(max(1, workers)) as pool:  # reading shards waits on storage, not on Python
        read = pool.map(lambda url: read_shard(url, skip_bad, limits), [urls[k] for k in ranks_shards])
        mine = dict(zip(ranks_shards, tqdm(read, total=len(ranks_shards), desc="reading shards", unit="shard",
                                           disable=not progress), strict=True))
    found: dict[int, list] = {}
    for part in (gather(mine) if gather is not None else [mine]):
        found.update(part)
    clips: list[Clip] = []
    audio: dict[str, ShardAudio] = {}
    bad = BadRows(skip_bad)
    for k in range(len(urls)):
        samples, skipped = found[k]
        bad.problems.extend(skipped)
        for key, meta, member in samples:
            try:
                clip = clip_of_sample(key, meta, member, f"{urls[k]}#{key}.{member.ext}")
            except InputError as exc:
                bad.report(exc.file or urls[k], exc.line, exc.field, f"sample {key!r}: {exc.message}")
                continue
            if clip.id in audio:
                bad.report(urls[k], None, "id", f"clip id {clip.id!r} appears twice")
                continue
            audio[clip.id] = member
            clips.append(clip)
    if not clips:
        skipped = f" ({len(bad.problems)} bad sample(s) skipped)" if bad.problems else ""
        raise MlatrError(f"no sample in {len(urls)} shard(s) of {spec!r}{skipped}")
    return ShardIndex(Manifest(clips=clips, root=Path.cwd(), path=None, problems=bad.problems), audio, urls)


def _through_a_file(data: bytes, ext: str, read):
    """``read(path)`` on ``data`` written to a temporary ``.ext`` file: a shard's audio goes through the same
    decoder (and integrity checks) as a manifest's files, so both give the same samples."""
    with tempfile.TemporaryDirectory(prefix="mlatr-shard-") as folder:
        path = Path(folder) / f"audio.{ext}"
        path.write_bytes(data)
        return read(path)


class ShardSource(AudioSource):
    """An :class:`AudioSource` whose clips' audio are members of webdataset shards (by clip id)."""

    def __init__(self, manifest: Manifest, shards: ShardIndex, sample_rate: int = 16000, cache: bool = False,
                 skip_bad: bool = False):
        super().__init__(manifest, sample_rate, cache, skip_bad)
        self.members = {c.id: shards.audio[c.id] for c in manifest.clips}

    def _decode(self, index: int) -> np.ndarray:
        clip = self.manifest[index]
        member = self.members[clip.id]
        try:
            wave = _through_a_file(member.read(), member.ext, lambda p: load_audio(p, self.sample_rate))
        except MlatrError as exc:
            raise InputError(f"clip {clip.id!r}: {exc}", member.url, None, "audio") from exc
        problem = duration_problem(wave.shape[0] / self.sample_rate, clip.duration)
        if problem:
            raise InputError(f"clip {clip.id!r}: {problem}", member.url, None, "duration")
        return wave

    def _decode_centre(self, index: int, count: int) -> np.ndarray:
        return crop_window(self._decode(index), count, None)  # a member is decoded whole from its bytes

    def _probe(self, index: int) -> int:
        member = self.members[self.manifest[index].id]
        return _through_a_file(member.read(), member.ext, lambda p: probe_length(p, self.sample_rate))


def import_webdataset(spec: str | Sequence[str], output: str | os.PathLike, audio_dir: str | None = None,
                      split: str | None = None, progress: bool = True, skip_bad: bool = False,
                      limits: ShardLimits = ShardLimits()) -> Manifest:
    """A manifest of the shards' samples, their audio members written as files directly under ``audio_dir``
    (default: ``OUTPUT_STEM-audio`` beside the manifest), each named by :func:`member_file_name` from its key
    alone; ``split`` sets the split of clips whose JSON has none; ``limits``: what a shard may hold. The
    manifest is returned (the caller saves it). A bad sample (two keys mapping to one file name included) is
    refused, naming it, or with ``skip_bad`` skipped and listed in the manifest's ``problems`` (as every
    importer does)."""
    out = Path(output)
    folder = Path(audio_dir) if audio_dir else out.parent / f"{out.stem}-audio"
    if split is not None and (found := split_problem(split)):
        raise InputError(found, field="--split")
    check_output_path(folder, "--audio-dir", folder=True)
    index = index_shards(spec, progress=progress, skip_bad=skip_bad, limits=limits)
    bad = BadRows(skip_bad)
    bad.problems.extend(index.manifest.problems)
    named: dict[str, ShardAudio] = {}  # file name (case folded: some file systems ignore case) -> its member
    chosen = []
    for clip in index.manifest.clips:
        member = index.audio[clip.id]
        name = member_file_name(member.key, member.ext)
        first = named.setdefault(name.casefold(), member)
        if first is not member:
            bad.report(member.url, None, "key", f"samples {first.key!r} ({first.url}) and {member.key!r} map to one "
                                                f"audio file name {name!r}; rename one of them")
            continue
        chosen.append((clip, member, name))
    folder.mkdir(parents=True, exist_ok=True)
    rel = Path(os.path.relpath(folder.resolve(), out.resolve().parent)).as_posix()
    clips = []
    for clip, member, name in tqdm(chosen, desc="writing audio files", unit="clip", disable=not progress):
        target = folder / name
        if not target.is_file() or target.stat().st_size != member.size:  # a rerun keeps what is written
            data = member.read()
            atomic_write_with(target, lambda fh, data=data: fh.write(data))
        clip.audio = f"{rel}/{name}"
        if clip.split is None and split is not None:
            clip.split = split
        clips.append(clip)
    return Manifest(clips=clips, root=out.resolve().parent, path=out, problems=bad.problems)
