"""A small sound library as sound designers keep one, made from the real-sound corpus, for the README's figure.

Files as they are found on a disk: a BWF file described in its ``bext`` chunk, an MP3 with ID3 tags, an Ogg
with Vorbis comments, UCS names, names that say nothing (``take_0042.wav``), a folder that names its sounds
(``birds/``), a two-minute field recording with a dog barking at 1:40, a WAV re-save of an Ogg (a duplicate)
and a digital silence. Its clips come from the corpus's manifest (never the reserved tuxpaint-stamps packages).

Usage:
  python scripts/make-sound-library.py data/real-sounds/manifest.jsonl /tmp/my-sounds
  mlatr index build /tmp/my-sounds -o /tmp/my-sounds.idx
  mlatr serve /tmp/my-sounds.idx --port 8765
"""

from __future__ import annotations

import argparse
import json
import struct
import sys
from pathlib import Path

import mutagen.id3
import mutagen.oggvorbis
import numpy as np
import soundfile as sf

RATE = 48000

#: (corpus file ending, where it goes in the library, how it is described)
PLACES = [
    ("freedroidrpg/sound/effects/Glass_Break.ogg", "GLASBrk_Bottle smash on concrete_MLATR_DEMO.wav", None),
    ("flare/fantasycore/door_open.ogg", "DOORWood_Creaky door opens slowly_MLATR_DEMO.wav", None),
    ("bzflag/explosion.wav", "take_0042.wav", {"bext": "Distant explosion, deep rumble tail"}),
    ("0ad/ambient/weather/thunder_10.ogg", "rec_0117.mp3", {"id3": ("Thunder clap", "storm, thunder, rumble")}),
    ("megaglest/tilesets/autumn/sounds/rooster.ogg", "farm/a0193.ogg", {"vorbis": "Rooster crowing at dawn"}),
    ("freedink/bird1.wav", "birds/bird1.wav", None),
    ("flare/fantasycore/environment/bird_twitter_loop.ogg", "birds/twitter_loop.ogg", None),
    ("qabcs/dog.ogg", "animals/blackdog.ogg", None),
    ("scorched3d/apoc/data/wav/misc/dog2.wav", "animals/dog2.wav", None),
    ("qabcs/dog.ogg", "copies/blackdog_resaved.wav", None),
]
LONG = ("0ad/ambient/weather/rain_11.ogg", "scorched3d/apoc/data/wav/misc/dog.wav", "field/walk_2024-06-01.flac", 100.0)


def _riff_chunk(kind: bytes, body: bytes) -> bytes:
    return kind + struct.pack("<I", len(body)) + body + (b"\0" if len(body) % 2 else b"")


def add_bext(path: Path, description: str) -> None:
    """Insert a BWF ``bext`` chunk (EBU Tech 3285: description, originator, ...) after ``fmt ``."""
    raw = path.read_bytes()
    fmt = raw.index(b"fmt ")
    fmt_end = fmt + 8 + struct.unpack("<I", raw[fmt + 4:fmt + 8])[0]
    bext = struct.pack("<256s32s32s10s8s", description.encode(), b"mlatr", b"", b"2024-06-01", b"12:00:00")
    body = raw[12:fmt_end] + _riff_chunk(b"bext", bext + bytes(602 - len(bext))) + raw[fmt_end:]
    path.write_bytes(b"RIFF" + struct.pack("<I", len(body) + 4) + b"WAVE" + body)


def read(path: Path) -> np.ndarray:
    audio, rate = sf.read(path, dtype="float32", always_2d=True)
    audio = audio.mean(axis=1)
    if rate != RATE:
        t = np.arange(int(len(audio) * RATE / rate)) / RATE
        audio = np.interp(t, np.arange(len(audio)) / rate, audio).astype(np.float32)
    return audio


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("manifest")
    parser.add_argument("out")
    args = parser.parse_args()
    rows = [json.loads(line) for line in Path(args.manifest).read_text().splitlines() if line.strip()]
    by_end = {r["audio"]: Path(args.manifest).parent / r["audio"] for r in rows if "tuxpaint" not in r["audio"]}

    def source(end: str) -> Path:
        found = [p for a, p in by_end.items() if a.endswith(end)]
        if not found:
            sys.exit(f"{args.manifest}: no clip ends with {end}")
        return found[0]

    out = Path(args.out)
    for end, name, described in PLACES:
        target = out / name
        target.parent.mkdir(parents=True, exist_ok=True)
        audio = read(source(end))
        if target.suffix == ".mp3":
            sf.write(target, audio, RATE, format="MP3")
        else:
            sf.write(target, audio, RATE)
        described = described or {}
        if "bext" in described:
            add_bext(target, described["bext"])
        if "id3" in described:
            tags = mutagen.id3.ID3()
            tags.add(mutagen.id3.TIT2(encoding=3, text=described["id3"][0]))
            tags.add(mutagen.id3.COMM(encoding=3, lang="eng", desc="", text=described["id3"][1]))
            tags.save(target)
        if "vorbis" in described:
            tags = mutagen.oggvorbis.OggVorbis(target)
            tags["DESCRIPTION"] = described["vorbis"]
            tags.save()
    bed_end, event_end, name, at = LONG
    bed = np.tile(read(source(bed_end)), 2)[: 120 * RATE] * 0.5
    event = read(source(event_end))
    start = int(at * RATE)
    bed[start:start + len(event)] += event
    (out / name).parent.mkdir(parents=True, exist_ok=True)
    sf.write(out / name, bed / max(1.0, float(np.abs(bed).max())), RATE)
    (out / "misc").mkdir(exist_ok=True)
    sf.write(out / "misc" / "untitled.wav", np.zeros(RATE * 2, dtype=np.float32), RATE)
    print(f"wrote {sum(1 for p in out.rglob('*') if p.is_file())} files under {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
