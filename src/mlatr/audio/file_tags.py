"""What a sound file says about itself in its tags: descriptions, title, keywords, creator, library.

:func:`read_file_tags` reads, by the file's own header (not its extension):

- WAV / RF64 / BW64: the BWF ``bext`` chunk (description, originator, originator reference, origination date
  and time), ``iXML`` (``NOTE``, ``PROJECT``, ``SCENE``, ``TAKE``, ``TAPE`` and the ``USER`` fields sound
  library tools write: ``DESCRIPTION``, ``FXNAME``, ``TRACKTITLE``, ``KEYWORDS``, ``CATID``, ``CATEGORY``,
  ``SUBCATEGORY``, ``DESIGNER``, ``LIBRARY``, ``SHOW``), the RIFF ``LIST/INFO`` texts and an ``id3 `` chunk;
- AIFF: its ``NAME``, ``AUTH``, ``ANNO`` chunks and an ``ID3 `` chunk;
- MP3: its ID3 tag (v2, else v1); FLAC, Ogg Vorbis / Opus / FLAC: the Vorbis comment; MP4 / M4A: the iTunes
  atoms (mutagen).

The chunks are walked by this module (:mod:`mlatr.audio.riff_chunks`): ``bext`` is a fixed struct, and every
chunk's size is checked before it is read, which no reader at hand did (``wavinfo`` reads each chunk whole and
parses iXML in a recovering mode that turns junk into partial data). ID3 frames, Vorbis comments and MP4 atoms
are parsed by ``mutagen`` from bytes whose size was checked first (the Vorbis comment of an Ogg stream is
reassembled from its pages here, so a comment packet spanning thousands of pages is refused unread).

Everything is bounded: a tag (chunk, ID3 tag, comment block or packet, MP4 ``moov``) over
:data:`MAX_TAG_BYTES` (an iXML chunk over :data:`MAX_IXML_BYTES`), a value over :data:`MAX_TEXT_CHARS`, iXML
that is not well-formed or declares a DTD or entities, a malformed chunk or a truncated file: that tag or value
is skipped and said in :attr:`FileTags.skipped`, the rest is kept, and nothing raises (the clip is still
imported from its audio).
"""

from __future__ import annotations

import io
import os
import re
import struct
import xml.etree.ElementTree as ElementTree
from dataclasses import dataclass, field

import mutagen.flac
import mutagen.id3
import mutagen.mp4

from mlatr.audio.riff_chunks import iter_chunks, rf64_sizes

#: Largest tag read (a chunk, an ID3 tag, a Vorbis comment, an MP4 ``moov``): descriptions take a few
#: kilobytes, cover pictures a few megabytes.
MAX_TAG_BYTES = 16 << 20
#: Largest iXML chunk read (a recorder's iXML with every track listed takes tens of kilobytes).
MAX_IXML_BYTES = 1 << 20
#: Longest text value kept (a bext description holds 256 characters; a long library description a few
#: hundred words).
MAX_TEXT_CHARS = 4096
#: Keywords kept per file, and the longest keyword.
MAX_KEYWORDS = 64
MAX_KEYWORD_CHARS = 64

#: Ogg pages read at most for the header packets (they normally fill the first two or three).
MAX_OGG_PAGES = 10_000
#: The tag families, as :attr:`FileTags.kinds` and the caption sources name them.
KINDS = ("bext", "ixml", "info", "id3", "vorbis", "mp4", "aiff")

_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
_SPACE = re.compile(r"\s+")
_KEYWORD_SPLIT = re.compile(r"[,;\n]")
#: bext: Description[256] Originator[32] OriginatorReference[32] OriginationDate[10] OriginationTime[8]
_BEXT = struct.Struct("<256s32s32s10s8s")
#: RIFF INFO ids -> field
_INFO = {b"INAM": "title", b"ICMT": "comment", b"ISBJ": "subject", b"IART": "artist", b"IGNR": "genre",
         b"IKEY": "keywords", b"IPRD": "album", b"ICOP": "copyright"}
#: iXML USER fields read (upper case), and the field each becomes
_IXML_USER = {"DESCRIPTION": "description", "FXNAME": "fx_name", "TRACKTITLE": "title", "KEYWORDS": "keywords",
              "CATID": "cat_id", "CATEGORY": "category", "SUBCATEGORY": "subcategory", "DESIGNER": "artist",
              "LIBRARY": "album", "SHOW": "project"}
_IXML_TOP = {"NOTE": "note", "PROJECT": "project", "SCENE": "scene", "TAKE": "take", "TAPE": "tape"}
#: Vorbis comment / MP4 atom -> field
_VORBIS = {"TITLE": "title", "COMMENT": "comment", "DESCRIPTION": "description", "GENRE": "genre",
           "KEYWORDS": "keywords", "ARTIST": "artist", "ALBUM": "album"}
_MP4 = {"\xa9nam": "title", "\xa9cmt": "comment", "desc": "description", "ldes": "description",
        "\xa9gen": "genre", "keyw": "keywords", "\xa9ART": "artist", "\xa9alb": "album"}
#: Fields that describe the sound, in the order they are preferred as captions.
DESCRIBING = ("description", "note", "comment", "subject", "fx_name", "title")


@dataclass
class FileTags:
    """The tags of one file.

    ``texts``: ``(kind, field, text)`` in the order read (``kind`` one of :data:`KINDS`; ``field``: ``description``,
    ``note``, ``comment``, ``subject``, ``title``, ``fx_name``, ``artist``, ``album``, ``genre``, ``originator``,
    ``originator_reference``, ``origination_date``, ``origination_time``, ``project``, ``scene``, ``take``,
    ``tape``, ``cat_id``, ``category``, ``subcategory``, ``copyright``); ``keywords``: lower case, from keyword
    and genre tags; ``kinds``: the tag families that said something (a value kept or skipped); ``skipped``: one
    message per tag or value left out.
    """

    texts: list[tuple[str, str, str]] = field(default_factory=list)
    keywords: list[str] = field(default_factory=list)
    kinds: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)

    def first(self, name: str) -> str | None:
        """The first text of field ``name``, or None."""
        return next((t for _k, f, t in self.texts if f == name), None)

    def descriptions(self) -> list[tuple[str, str]]:
        """``(kind, text)`` of the fields that may describe the sound, in :data:`DESCRIBING` order, each text
        once (whether one does, rather than name the software that wrote the file, is for the caller:
        :func:`mlatr.data.file_metadata.informative`)."""
        out: list[tuple[str, str]] = []
        seen: set[str] = set()
        for name in DESCRIBING:
            for kind, f, text in self.texts:
                if f == name and text.casefold() not in seen:
                    seen.add(text.casefold())
                    out.append((kind, text))
        return out

    def _found(self, kind: str) -> None:
        if kind not in self.kinds:
            self.kinds.append(kind)

    def add(self, kind: str, name: str, value) -> None:
        """One value read (bytes decoded as UTF-8, else Latin-1), cleaned and bounded; keywords and genres also
        split into :attr:`keywords`."""
        if isinstance(value, bytes):
            value = value.split(b"\0", 1)[0]
            try:
                value = value.decode("utf-8")
            except UnicodeDecodeError:
                value = value.decode("latin-1")
        text = _SPACE.sub(" ", _CONTROL.sub(" ", str(value))).strip()
        if not text:
            return
        self._found(kind)
        if len(text) > MAX_TEXT_CHARS:
            self.skipped.append(f"{kind} {name}: {len(text):,} characters (at most {MAX_TEXT_CHARS:,})")
            return
        if name in ("keywords", "genre"):
            for word in _KEYWORD_SPLIT.split(text):
                word = word.strip().lower()
                if word and len(word) <= MAX_KEYWORD_CHARS and word not in self.keywords \
                        and len(self.keywords) < MAX_KEYWORDS:
                    self.keywords.append(word)
        self.texts.append((kind, name, text))


def read_file_tags(path: str | os.PathLike) -> FileTags:
    """The tags of the sound file ``path`` (see the module docstring); never raises for what the file holds
    (an unreadable file gives empty tags and one skipped message)."""
    path = os.fspath(path)
    tags = FileTags()
    try:
        with open(path, "rb") as fh:
            magic = fh.read(12)
            if magic[:4] in (b"RIFF", b"RF64", b"BW64") and magic[8:12] == b"WAVE":
                _read_wave(fh, magic[:4] != b"RIFF", tags)
            elif magic[:4] == b"FORM" and magic[8:12] in (b"AIFF", b"AIFC"):
                _read_aiff(fh, tags)
            elif magic[:4] == b"fLaC":
                _read_flac(fh, tags)
            elif magic[:4] == b"OggS":
                _read_ogg(fh, tags)
            elif magic[4:8] == b"ftyp":
                _read_mp4(fh, path, tags)
            elif magic[:3] == b"ID3" or magic[:2] in _MPEG_SYNC:
                _read_mp3(fh, path, tags)
    except Exception as exc:  # noqa: BLE001 (a truncated or damaged file's tags never stop an import)
        tags.skipped.append(f"tags: unreadable ({type(exc).__name__}: {exc})")
    return tags


_MPEG_SYNC = tuple(bytes([0xFF, b]) for b in range(0xE0, 0x100))


def _too_big(tags: FileTags, what: str, size: int, limit: int | None = None) -> bool:
    limit = MAX_TAG_BYTES if limit is None else limit
    if size > limit:
        tags.skipped.append(f"{what}: {size:,} bytes (at most {limit:,}), not read")
        return True
    return False


def _read_exact(fh, size: int, what: str) -> bytes:
    data = fh.read(size)
    if len(data) < size:
        raise EOFError(f"{what}: the file ends {size - len(data):,} bytes into it")
    return data


# ---- WAV ------------------------------------------------------------------------------------------------
def _read_wave(fh, rf64: bool, tags: FileTags) -> None:
    sizes = rf64_sizes(fh) if rf64 else None
    for kind, size in iter_chunks(fh, "<", sizes):
        if kind == b"bext":
            if not _too_big(tags, "bext", size):
                _read_bext(_read_exact(fh, size, "bext"), tags)
        elif kind == b"iXML":
            if not _too_big(tags, "ixml", size, MAX_IXML_BYTES):
                _read_ixml(_read_exact(fh, size, "iXML"), tags)
        elif kind == b"LIST":
            if size >= 4 and fh.read(4) == b"INFO" and not _too_big(tags, "info", size):
                _read_info(_read_exact(fh, size - 4, "LIST/INFO"), tags)
        elif kind in (b"id3 ", b"ID3 "):
            if not _too_big(tags, "id3", size):
                _read_id3_bytes(_read_exact(fh, size, "id3"), tags)


def _read_bext(data: bytes, tags: FileTags) -> None:
    if len(data) < _BEXT.size:
        tags.skipped.append(f"bext: a chunk of {len(data)} bytes (the fixed part alone takes {_BEXT.size})")
        return
    names = ("description", "originator", "originator_reference", "origination_date", "origination_time")
    for name, value in zip(names, _BEXT.unpack_from(data), strict=True):
        tags.add("bext", name, value)


def _read_ixml(data: bytes, tags: FileTags) -> None:
    if b"<!DOCTYPE" in data or b"<!ENTITY" in data:
        tags.skipped.append("ixml: declares a DTD or entities (not read)")
        return
    try:
        root = ElementTree.fromstring(data.rstrip(b"\0 \r\n\t"))
    except (ElementTree.ParseError, ValueError, LookupError, RecursionError) as exc:
        tags.skipped.append(f"ixml: not well-formed XML ({exc})")
        return
    for child in root:
        name = child.tag.upper() if isinstance(child.tag, str) else ""
        if name in _IXML_TOP and len(child) == 0:
            tags.add("ixml", _IXML_TOP[name], child.text or "")
        elif name == "USER":
            for sub in child:
                key = sub.tag.upper() if isinstance(sub.tag, str) else ""
                if key in _IXML_USER and len(sub) == 0:
                    tags.add("ixml", _IXML_USER[key], sub.text or "")


def _read_info(data: bytes, tags: FileTags) -> None:
    pos = 0
    while pos + 8 <= len(data):
        kind, size = data[pos:pos + 4], struct.unpack("<I", data[pos + 4:pos + 8])[0]
        if kind in _INFO:
            tags.add("info", _INFO[kind], data[pos + 8:pos + 8 + size])
        pos += 8 + size + (size & 1)


# ---- AIFF -----------------------------------------------------------------------------------------------
def _read_aiff(fh, tags: FileTags) -> None:
    names = {b"NAME": "title", b"AUTH": "artist", b"ANNO": "comment"}
    for kind, size in iter_chunks(fh, ">"):
        if kind in names and not _too_big(tags, "aiff", size):
            tags.add("aiff", names[kind], _read_exact(fh, size, kind.decode("latin-1")))
        elif kind in (b"ID3 ", b"id3 ") and not _too_big(tags, "id3", size):
            _read_id3_bytes(_read_exact(fh, size, "ID3"), tags)


# ---- ID3 ------------------------------------------------------------------------------------------------
def _id3_size(head: bytes) -> int:
    """Bytes of an ID3v2 tag from its 10-byte header (footer included)."""
    size = (head[6] & 0x7F) << 21 | (head[7] & 0x7F) << 14 | (head[8] & 0x7F) << 7 | (head[9] & 0x7F)
    return 10 + size + (10 if head[5] & 0x10 else 0)


def _read_mp3(fh, path: str, tags: FileTags) -> None:
    fh.seek(0)
    head = fh.read(10)
    if head[:3] == b"ID3" and len(head) == 10 and _too_big(tags, "id3", _id3_size(head)):
        return
    try:
        id3 = mutagen.id3.ID3(path)
    except mutagen.id3.ID3NoHeaderError:
        return
    except Exception as exc:  # mutagen raises its own errors and struct / value errors on damaged tags
        tags.skipped.append(f"id3: unreadable ({exc})")
        return
    _read_id3(id3, tags)


def _read_id3_bytes(data: bytes, tags: FileTags) -> None:
    try:
        id3 = mutagen.id3.ID3(io.BytesIO(data), load_v1=False)
    except Exception as exc:  # see _read_mp3
        tags.skipped.append(f"id3: unreadable ({exc})")
        return
    _read_id3(id3, tags)


#: ID3 frames -> field (COMM and TXXX are read by their descriptions)
_ID3 = {"TIT2": "title", "TIT3": "description", "TCON": "genre", "TPE1": "artist", "TALB": "album",
        "TCOP": "copyright"}
_ID3_TXXX = {"DESCRIPTION": "description", "KEYWORDS": "keywords", "COMMENT": "comment"}


def _read_id3(id3, tags: FileTags) -> None:
    for frame in id3.values():
        fid = frame.FrameID
        if fid in _ID3:
            for text in frame.text:
                tags.add("id3", _ID3[fid], text)
        elif fid == "COMM" and not frame.desc.lower().startswith("itun"):  # iTunNORM etc.: encoder numbers
            for text in frame.text:
                tags.add("id3", "comment", text)
        elif fid == "TXXX" and frame.desc.upper() in _ID3_TXXX:
            for text in frame.text:
                tags.add("id3", _ID3_TXXX[frame.desc.upper()], text)


# ---- Vorbis comments: FLAC and Ogg ---------------------------------------------------------------------
def _read_vorbis(data: bytes, tags: FileTags) -> None:
    try:
        comments = mutagen.flac.VCFLACDict(data)
    except Exception as exc:  # mutagen's error on a damaged comment
        tags.skipped.append(f"vorbis: unreadable ({exc})")
        return
    for key, value in comments:
        name = _VORBIS.get(key.upper())
        if name:
            tags.add("vorbis", name, value)


def _read_flac(fh, tags: FileTags) -> None:
    """The VORBIS_COMMENT block of a FLAC stream (metadata block headers walked from the ``fLaC`` marker)."""
    fh.seek(4)
    for _ in range(1024):
        head = fh.read(4)
        if len(head) < 4:
            return
        kind, size = head[0] & 0x7F, int.from_bytes(head[1:4], "big")
        if kind == 4:
            if not _too_big(tags, "vorbis", size):
                _read_vorbis(_read_exact(fh, size, "FLAC comment"), tags)
            return
        if head[0] & 0x80:
            return
        fh.seek(size, os.SEEK_CUR)


def _ogg_packets(fh, count: int, limit: int) -> list[bytes] | int:
    """The first ``count`` packets of an Ogg file's first logical stream, or the bytes read when they exceed
    ``limit`` (refused)."""
    packets: list[bytes] = []
    current = bytearray()
    serial = None
    read = 0
    fh.seek(0)
    for _ in range(MAX_OGG_PAGES):
        if len(packets) >= count:
            return packets
        head = fh.read(27)
        if len(head) < 27 or head[:4] != b"OggS":
            raise EOFError("Ogg: the stream ends inside its header packets")
        lacing = _read_exact(fh, head[26], "Ogg page")
        body = sum(lacing)
        page_serial = struct.unpack("<I", head[14:18])[0]
        if serial is None:
            serial = page_serial
        if page_serial != serial:
            fh.seek(body, os.SEEK_CUR)
            continue
        read += body
        if read > limit:
            return read
        payload = _read_exact(fh, body, "Ogg page")
        pos = 0
        for value in lacing:
            current += payload[pos:pos + value]
            pos += value
            if value < 255:
                packets.append(bytes(current))
                current = bytearray()
                if len(packets) == count:
                    break
    raise EOFError(f"Ogg: no {count} header packets in the first {MAX_OGG_PAGES:,} pages")


def _read_ogg(fh, tags: FileTags) -> None:
    packets = _ogg_packets(fh, 2, MAX_TAG_BYTES)
    if isinstance(packets, int):
        _too_big(tags, "vorbis", packets)
        return
    first, comment = packets
    if first.startswith(b"\x01vorbis") and comment.startswith(b"\x03vorbis"):
        _read_vorbis(comment[7:], tags)
    elif first.startswith(b"OpusHead") and comment.startswith(b"OpusTags"):
        _read_vorbis(comment[8:], tags)
    elif first.startswith(b"\x7fFLAC") and len(comment) >= 4 and comment[0] & 0x7F == 4:
        _read_vorbis(comment[4:], tags)


# ---- MP4 ------------------------------------------------------------------------------------------------
def _read_mp4(fh, path: str, tags: FileTags) -> None:
    fh.seek(0)
    for _ in range(1024):
        head = fh.read(8)
        if len(head) < 8:
            return
        size, kind = struct.unpack(">I4s", head)
        if size == 1:
            size = struct.unpack(">Q", _read_exact(fh, 8, "MP4 atom"))[0] - 8
        if kind == b"moov":
            break
        if size < 8:
            return
        fh.seek(size - 8, os.SEEK_CUR)
    else:
        return
    if _too_big(tags, "mp4", size):
        return
    try:
        mp4 = mutagen.mp4.MP4(path)
    except Exception as exc:  # see _read_mp3
        tags.skipped.append(f"mp4: unreadable ({exc})")
        return
    for key, values in (mp4.tags or {}).items():
        name = _MP4.get(key)
        if name:
            for value in values if isinstance(values, list) else [values]:
                if isinstance(value, str):
                    tags.add("mp4", name, value)
