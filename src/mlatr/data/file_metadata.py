"""What a sound file says about itself, put together for its manifest clip: captions and where each came
from, keywords, and facets (what the file is, where it lies, what its name and tags say).

**Captions** (English), what a person wrote before what a name implies; each caption's source is kept in
``extra["caption_sources"]["eng"]``, aligned with ``captions["eng"]`` (a caption in another language translates
the English caption of its position, so it shares that source):

1. ``sidecar``: the lines of ``NAME.txt`` / ``NAME.eng.txt``;
2. the tags' descriptions (:mod:`mlatr.audio.file_tags`; the source is the tag family: ``bext``, ``ixml``,
   ``info``, ``id3``, ``vorbis``, ``mp4``, ``aiff``): descriptions, notes, comments, then titles;
3. ``ucs``: a UCS file name's FXName with its category's words (:mod:`mlatr.data.ucs`), which then stands for
   the name's words;
4. ``name``: the path's words as ``mlatr data recaption`` makes them (:func:`~mlatr.data.path_captions.path_captions`
   with the shipped table: numbering dropped, jargon replaced, joined words split: ``blackcat`` -> "black
   cat"), else the nearest folder's words;
5. ``folder``: the first caption of 3 or 4 with the words of the folders it lies in (``rec, birds``:
   :func:`~mlatr.data.path_captions.folder_words`), when they say something it does not, so a folder's name
   finds its files.

A caption already present (same text, ignoring case) is not repeated.

**Facets** (``extra["facets"]``, one JSON object; a key is absent where the file does not say):
``duration`` (s), ``sample_rate`` (Hz), ``bit_depth`` (null for compressed audio), ``channels``, ``format``
(container: ``wav``, ``flac``, ``ogg``, ``mp3``, ``aiff`` ...), ``codec`` (``pcm_16``, ``pcm_24``, ``float``,
``vorbis``, ``opus``, ``mp3`` ...), ``file_size`` (bytes); from one decode of the whole file
(:mod:`mlatr.audio.loudness`): ``loudness_lufs`` (null: shorter than 400 ms, or silent), ``true_peak_dbtp``,
``peak_dbfs`` (null for digital silence), ``silent``; from the path: ``folder`` (the clip's folder under the
library root, ``""`` at the top), ``library`` (its first folder, ``""`` at the top); from a UCS name (or an
iXML ``CATID``): ``ucs_cat_id``, ``ucs_category``, ``ucs_subcategory``, and from the name ``ucs_fx_name``,
``ucs_creator``, ``ucs_source``, ``ucs_user_category``, ``ucs_user_data``; from the tags: ``tags`` (the tag
families found), ``keywords`` (keyword and genre tags, and a UCS category and subcategory, lower case),
``title``, ``creator``, ``album``, ``originator_reference``, ``origination_date``, ``project``, ``scene``,
``take``, ``tape``.
"""

from __future__ import annotations

import math
import os
import re
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tqdm import tqdm

from mlatr.audio.file_tags import KINDS, FileTags
from mlatr.audio.integrity import AudioProbe, probe_audio, soundfile
from mlatr.data.manifest import Clip
from mlatr.data.path_captions import (
    PATH_SOURCES,
    CaptionRules,
    path_captions,
    path_sources,
    with_context,
)
from mlatr.data.path_captions import folder_words as folder_words_of
from mlatr.data.sound_names import caption_from_name, name_caption, split_joined
from mlatr.data.ucs import UcsName, parse_ucs_name, ucs_categories
from mlatr.errors import MlatrError

if TYPE_CHECKING:
    from mlatr.audio.loudness import LoudnessFacts

#: Every caption source, in the order of precedence.
CAPTION_SOURCES = ("sidecar", *KINDS, "ucs", *PATH_SOURCES)
#: The tag fields kept as facets, and the tag fields each is read from (first found wins).
TAG_FACETS = {"title": ("title", "fx_name"), "creator": ("originator", "artist"), "album": ("album",),
              "originator_reference": ("originator_reference",), "origination_date": ("origination_date",),
              "project": ("project",), "scene": ("scene",), "take": ("take",), "tape": ("tape",)}

#: Tag texts that say how a file was made rather than what it sounds like: the software it went through
#: (a verb of processing, or a tool's name first: "Processed by SoX", "Made with Sonic Foundry ACID 4",
#: "Audacity 2.0.5"), an address, a licence. Measured on the 8,555 files of the real-sound corpus, whose
#: 730 tag texts are mostly such.
BOILERPLATE = re.compile(
    r"^(processed|made|created|encoded|generated|converted|edited|exported|rendered|mastered)\s+(by|with|in|using)\b"
    r"|^(audacity|sox|lame|lavf|lavc|ffmpeg|libvorbis|xiph|goldwave|sound\s*forge|sonic\s*foundry|wavelab|"
    r"cool\s*edit|adobe\s+audition|ocenaudio|altomp3|itunes)\b"
    r"|https?://|\bwww\.|\S@\S|\b[\w-]+\.(com|org|net)\b"
    r"|^(licen[cs]e|copyright)\b|©|\(c\)|\bgplv?\d|\bcreative commons\b|\bcc[- ]by\b",
    re.IGNORECASE)
_LETTERS = re.compile(r"[^\W\d_]{3}")

_BITS = re.compile(r"^(?:PCM|ALAC|DPCM|DWVW|NMS_ADPCM)_[SU]?(\d+)$")
_CONTAINERS = {"WAVEX": "wav", "MPEG": "mp3"}
_CODECS = {"MPEG_LAYER_III": "mp3", "MPEG_LAYER_II": "mp2", "MPEG_LAYER_I": "mp1"}


@dataclass
class ClipMetadata:
    """What :func:`describe` found for one file: English ``captions`` and their ``sources`` (aligned),
    ``facets`` (without the technical ones: :func:`technical_facets`) and the tags' ``problems``."""

    captions: list[str] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)
    facets: dict[str, Any] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)

    def add(self, text: str, source: str) -> None:
        """Caption ``text`` from ``source``, unless an equal caption (ignoring case) is there."""
        text = text.strip()
        if text and text.casefold() not in {c.casefold() for c in self.captions}:
            self.captions.append(text)
            self.sources.append(source)


def informative(text: str, stem: str) -> bool:
    """Whether a tag's ``text`` may describe the sound of the file named ``stem``: not :data:`BOILERPLATE`,
    holding a word of three letters, and saying more than the file's name (``"bird4 01"`` in
    ``bird4_01.ogg`` does not)."""
    if BOILERPLATE.search(text) or not _LETTERS.search(text):
        return False
    return caption_from_name(text) != caption_from_name(stem)


def bit_depth(subtype: str) -> int | None:
    """Bits per sample of libsndfile ``subtype`` (``PCM_24`` -> 24, ``FLOAT`` -> 32), None for compressed audio."""
    if subtype == "FLOAT":
        return 32
    if subtype == "DOUBLE":
        return 64
    match = _BITS.match(subtype)
    return int(match.group(1)) if match else None


def _rounded(value: float | None, digits: int = 2) -> float | None:
    return None if value is None or not math.isfinite(value) else round(value, digits)


def technical_facets(path: str | os.PathLike, probe: AudioProbe | None, loudness: LoudnessFacts | None,
                     header: dict[str, Any] | None = None) -> dict[str, Any]:
    """The facets of the audio itself: from ``probe`` (a decode) or ``header`` (``samplerate``, ``channels``,
    ``frames``, ``format``, ``subtype`` of an undecoded file), the file's size and ``loudness``."""
    out: dict[str, Any] = {}
    if probe is not None:
        header = {"samplerate": probe.samplerate, "channels": probe.channels, "frames": probe.frames_read,
                  "format": probe.format, "subtype": probe.subtype}
    if header:
        rate = int(header["samplerate"])
        out.update(duration=round(header["frames"] / rate, 6) if rate > 0 else None, sample_rate=rate,
                   bit_depth=bit_depth(header["subtype"]), channels=int(header["channels"]),
                   format=_CONTAINERS.get(header["format"], header["format"].lower()),
                   codec=_CODECS.get(header["subtype"], header["subtype"].lower()))
    try:
        out["file_size"] = os.stat(path).st_size
    except OSError:
        pass
    if loudness is not None:
        out.update(loudness_lufs=_rounded(loudness.lufs), true_peak_dbtp=_rounded(loudness.true_peak_dbtp),
                   peak_dbfs=_rounded(loudness.peak_dbfs), silent=loudness.silent)
    return out


def decoded_facets(path: str | os.PathLike, loudness: bool = True) -> tuple[AudioProbe, dict[str, Any]]:
    """Decode ``path`` once (:func:`~mlatr.audio.integrity.probe_audio`: it raises
    :class:`~mlatr.errors.MlatrError` when the file does not decode whole) and its technical facets, with
    loudness, peaks and silence measured in that decode unless ``loudness`` is false."""
    # scipy.signal takes seconds to import: not paid by `mlatr data import`'s parser, which imports this module
    from mlatr.audio.loudness import LoudnessMeter

    meters: list[LoudnessMeter] = []

    def measure(block, rate):
        if not meters:
            meters.append(LoudnessMeter(rate, block.shape[1]))
        meters[0].feed(block)

    found = probe_audio(path, measure if loudness else None)
    return found, technical_facets(path, found, meters[0].result() if meters else None)


def header_facets(path: str | os.PathLike) -> dict[str, Any]:
    """The technical facets of ``path``'s header, without decoding (only the file's size when it is
    unreadable: it is refused when it is read)."""
    try:
        info = soundfile().info(os.fspath(path))
        header = {"samplerate": info.samplerate, "channels": info.channels, "frames": info.frames,
                  "format": info.format, "subtype": info.subtype}
    except Exception:  # soundfile raises LibsndfileError / RuntimeError / TypeError on an unreadable file
        header = None
    return technical_facets(path, None, None, header)


def measure_clips(clips: Sequence[Clip], root: str | os.PathLike, progress: bool = False,
                  map_files: Callable[[Callable[[str], dict[str, Any] | None], list[str]], Iterable] | None = None
                  ) -> int:
    """Add loudness, peaks and silence (one decode each) to the facets of those ``clips`` (audio relative to
    ``root``) whose facets lack them: what an index build does for the clips it encodes from a folder, whose
    listing read headers only. A manifest's clip without facets stays without; a file that does not decode
    is left as it is (the encoder reports it). ``map_files(work, paths)``: ``work(path)`` of each path in order,
    how the files are decoded (default: one after the other here; an index build passes its worker processes,
    :func:`mlatr.inference.worker_pool.ordered_map`). Returns the number of clips measured."""
    todo = [c for c in clips if isinstance(c.extra.get("facets"), dict) and "silent" not in c.extra["facets"]]
    paths = [str(c.audio_path(Path(root))) for c in todo]
    found = map_files(measured_facets, paths) if map_files is not None else map(measured_facets, paths)
    done = 0
    for clip, facets in tqdm(zip(todo, found, strict=True), total=len(todo), desc="loudness", unit="file",
                             disable=not progress or not todo):
        if facets is not None:
            clip.extra["facets"].update(facets)
            done += 1
    return done


def measured_facets(path: str) -> dict[str, Any] | None:
    """The technical facets of one decode of ``path`` (:func:`decoded_facets`), None when it does not decode
    whole."""
    try:
        return decoded_facets(path)[1]
    except MlatrError:
        return None


def path_facets(rel: Path) -> dict[str, str]:
    """``folder`` and ``library`` of a file at ``rel`` under its library's root."""
    folders = rel.parent.parts
    return {"folder": "/".join(folders), "library": folders[0] if folders else ""}


def _ucs_facets(ucs: UcsName | None, tags: FileTags) -> dict[str, str]:
    if ucs is not None:
        facets = {"ucs_cat_id": ucs.category.cat_id, "ucs_category": ucs.category.category,
                  "ucs_subcategory": ucs.category.subcategory, "ucs_fx_name": ucs.fx_name,
                  "ucs_creator": ucs.creator_id, "ucs_source": ucs.source_id}
        facets.update({k: v for k, v in (("ucs_user_category", ucs.user_category),
                                         ("ucs_user_data", ucs.user_data)) if v})
        return facets
    category = ucs_categories().get(tags.first("cat_id") or "")
    if category is None:
        return {}
    return {"ucs_cat_id": category.cat_id, "ucs_category": category.category,
            "ucs_subcategory": category.subcategory}


def name_captions(ident: str, rel: Path, rules: CaptionRules, folders: bool) -> list[tuple[str, str]]:
    """``(caption, source)`` the path gives (items 4 and 5 of the module docstring); ``folders``: split joined
    words and add the folders' words (:func:`~mlatr.data.path_captions.path_captions`'s ``folders``)."""
    captions = path_captions(ident, rules, folders=folders)[0] or []
    if not captions:
        text = name_caption(rel)
        captions = [split_joined(text) if folders else text] if text else []
    return list(zip(captions, path_sources(captions), strict=True))


def describe(ident: str, rel: Path, tags: FileTags, sidecar: Sequence[str], rules: CaptionRules,
             folder_words: bool = True, tag_captions: bool = True) -> ClipMetadata:
    """Captions, sources and the non-technical facets of the file at ``rel`` (clip id ``ident``) with its
    ``tags`` and ``sidecar`` captions (see the module docstring); ``folder_words``: split joined words and add
    the folders' words; ``tag_captions``: captions from the tags' descriptions (their keywords and facets are
    read either way)."""
    meta = ClipMetadata(problems=list(tags.skipped))
    stem = rel.with_suffix("").name
    used: list[str] = []  # the tag families that gave something
    for text in sidecar:
        meta.add(text, "sidecar")
    for kind, text in tags.descriptions() if tag_captions else ():
        if informative(text, stem):
            meta.add(text, kind)
            used.append(kind)
    ucs = parse_ucs_name(stem)
    if ucs is not None:
        meta.add(ucs.caption(), "ucs")
        context = folder_words_of(ident) if folder_words else ""
        if context:
            for text in with_context([ucs.caption()], context)[1:]:
                meta.add(text, "folder")
    else:
        for text, source in name_captions(ident, rel, rules, folder_words):
            meta.add(text, source)
    facets: dict[str, Any] = {**path_facets(rel), **_ucs_facets(ucs, tags)}
    keywords = list(tags.keywords)
    used += [kind for kind, name, _text in tags.texts if name in ("keywords", "genre")]
    for word in (facets.get("ucs_category", ""), facets.get("ucs_subcategory", "")):
        if word and word.lower() not in keywords and word != "MISC":
            keywords.append(word.lower())
    if keywords:
        facets["keywords"] = keywords
    for name, fields in TAG_FACETS.items():
        found = next(((kind, text) for kind, f, text in tags.texts if f in fields
                      and (name != "title" or informative(text, stem))), None)
        if found:
            facets[name] = found[1]
            used.append(found[0])
    if used:
        facets["tags"] = [kind for kind in KINDS if kind in used]
    meta.facets = facets
    return meta


def caption_sources(clip: Clip) -> list[str] | None:
    """The sources of ``clip``'s English captions (``extra["caption_sources"]["eng"]``), None when the manifest
    does not say."""
    sources = clip.extra.get("caption_sources")
    if isinstance(sources, dict) and isinstance(sources.get("eng"), list):
        return sources["eng"]
    return None


def source_of(sources: dict | None, captions: dict, lang: str, text: str) -> str | None:
    """Where caption ``text`` of language ``lang`` came from, given a clip's ``caption_sources`` and
    ``captions`` (a manifest clip's, or an index row's ``caption_sources`` and ``captions`` columns): the
    source of the English caption at its position (a translation shares it); None when not recorded."""
    texts = captions.get(lang) or []
    eng = (sources or {}).get("eng") if isinstance(sources, dict) else None
    if text not in texts or not isinstance(eng, list):
        return None
    j = texts.index(text)
    return eng[j] if j < len(eng) else None


def metadata_counts(clips: Iterable[Clip]) -> Counter:
    """How many ``clips`` got a caption from each source or carry each tag family (a clip counts once per
    source), and ``tags_skipped``: tags or values skipped (``extra["tag_problems"]``)."""
    counts: Counter = Counter()
    for clip in clips:
        facets = clip.extra.get("facets") if isinstance(clip.extra.get("facets"), dict) else {}
        found = set(caption_sources(clip) or []) | set(facets.get("tags", []))
        if "ucs_cat_id" in facets:
            found.add("ucs")
        counts.update(found)
        counts["tags_skipped"] += len(clip.extra.get("tag_problems", []))
    return counts


def metadata_report(clips: Sequence[Clip]) -> str:
    """One line: ``metadata: 3 sidecar, 12 bext, 30 id3, 5 ucs, 120 from names, 8 from folders; 2 tags
    unreadable (skipped)`` (an empty string for clips whose manifest records no metadata)."""
    counts = metadata_counts(clips)
    words = {"name": "from names", "folder": "with folder words"}
    parts = [f"{counts[s]} {words.get(s, s)}" for s in CAPTION_SOURCES if counts[s]]
    line = "metadata: " + ", ".join(parts) if parts else ""
    if counts["tags_skipped"]:
        line += f"{'; ' if line else 'metadata: '}{counts['tags_skipped']} tag(s) unreadable or too large (skipped)"
    return line
