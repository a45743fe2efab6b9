"""scripts/get-real-sounds.sh on local fake Debian packages (no network): licence checks, idempotence, resume,
cross-library de-duplication and the leave-one-library-out folds (issue 35)."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import soundfile as sf

from mlatr.data.debian_sounds import check_licence, load_rules, parse_copyright, redistributable
from mlatr.data.dedup import audio_hash
from mlatr.data.manifest import Manifest
from mlatr.lab.experiments.unseen_library import folds

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "get-real-sounds.sh"
pytestmark = pytest.mark.skipif(shutil.which("dpkg-deb") is None, reason="needs dpkg-deb")

DEP5 = """Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/
Upstream-Name: {name}

Files: *
Copyright: 2020 {holder}
License: {licence}
 The licence text.
"""


def _tone(freq: float, seconds: float = 0.5) -> np.ndarray:
    t = np.arange(int(seconds * 16000)) / 16000
    return (0.3 * np.sin(2 * np.pi * freq * t)).astype(np.float32)


def _deb(folder: Path, name: str, copyright_text: str, files: dict[str, np.ndarray]) -> Path:
    pkg = folder / f"build-{name}"
    (pkg / "DEBIAN").mkdir(parents=True)
    (pkg / "DEBIAN" / "control").write_text(f"Package: {name}\nVersion: 1.0-1\nArchitecture: all\n"
                                            "Maintainer: Test <t@example.org>\nDescription: test sounds\n")
    doc = pkg / "usr" / "share" / "doc" / name
    doc.mkdir(parents=True)
    (doc / "copyright").write_text(copyright_text)
    for rel, wave in files.items():
        path = pkg / "usr" / "share" / "games" / name / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        sf.write(path, wave, 16000)
    out = folder / "debs" / f"{name}_1.0-1_all.deb"
    out.parent.mkdir(exist_ok=True)
    subprocess.run(["dpkg-deb", "--root-owner-group", "-b", str(pkg), str(out)], check=True, capture_output=True)
    shutil.rmtree(pkg)
    return out


@pytest.fixture()
def fake_packages(tmp_path):
    dest = tmp_path / "sounds"
    shared = _tone(440)
    _deb(dest, "free-sounds", DEP5.format(name="free", holder="Alice", licence="CC-BY-SA-3.0"),
         {"sounds/door_open.wav": shared, "sounds/dog_bark.wav": _tone(300), "music/theme.wav": _tone(500),
          "sounds/placeholder.wav": np.zeros(8, np.float32)})
    _deb(dest, "copy-sounds", DEP5.format(name="copy", holder="Bob", licence="GPL-2+ or CC-BY-3.0"),
         {"sfx/door.wav": shared, "sfx/bell.wav": _tone(880)})
    _deb(dest, "nc-sounds", DEP5.format(name="nc", holder="Carol", licence="CC-BY-NC-3.0"),
         {"sfx/horn.wav": _tone(200)})
    _deb(dest, "prose-sounds", "Prose Sounds is under the GNU General Public License, version 2 or later.\n"
                               "Copyright (C) 2019 Dave\n", {"wav/rain.wav": _tone(150)})
    table = {"format": "mlatr-sound-packages-1", "packages": [
        {"package": "free-sounds", "library": "free", "roots": ["usr/share/games/free-sounds"],
         "exclude": ["(^|/)music/"]},
        {"package": "copy-sounds", "library": "copy", "roots": ["usr/share/games/copy-sounds/sfx"]},
        {"package": "nc-sounds", "library": "nc", "roots": ["usr/share/games/nc-sounds/sfx"]},
        {"package": "prose-sounds", "library": "prose", "roots": ["usr/share/games/prose-sounds/wav"],
         "licence": "GPL-2+", "evidence": "GNU General Public License"},
    ]}
    (tmp_path / "table.json").write_text(json.dumps(table))
    return dest, tmp_path / "table.json"


def _script(dest: Path, table: Path, keep: bool = True) -> subprocess.CompletedProcess:
    env = {**os.environ, "REAL_SOUNDS_PACKAGES": str(table), "MLATR_PYTHON": sys.executable,
           "KEEP_DEBS": "1" if keep else "0", "PATH": os.environ["PATH"]}
    return subprocess.run(["bash", str(SCRIPT), str(dest)], env=env, capture_output=True, text=True, timeout=300)


def _files(dest: Path) -> dict[str, tuple[int, int]]:
    """The unpacked files (sounds, copyright files, markers) with their size and time."""
    return {str(p.relative_to(dest)): (p.stat().st_size, p.stat().st_mtime_ns) for p in sorted(dest.rglob("*"))
            if p.is_file() and p.parent != dest}


def test_the_script_refuses_a_package_without_a_redistributable_licence_and_is_idempotent(fake_packages):
    dest, table = fake_packages
    first = _script(dest, table)
    assert first.returncode == 0, first.stderr
    assert "nc-sounds: refused: licence CC-BY-NC-3.0" in first.stderr
    assert not (dest / "nc").exists() and not (dest / "copyright" / "nc-sounds").exists()
    licences = json.loads((dest / "licences.json").read_text())
    assert licences["format"] == "mlatr-sound-licences-1"
    rows = {r["package"]: r for r in licences["packages"]}
    assert rows["free-sounds"]["licences"] == ["CC-BY-SA-3.0"] and rows["free-sounds"]["holders"] == ["2020 Alice"]
    assert rows["free-sounds"]["clips"] == 2 and rows["free-sounds"]["version"] == "1.0-1"  # no music, no placeholder
    assert rows["prose-sounds"]["licences"] == ["GPL-2+"]
    assert licences["refused"] == [{"package": "nc-sounds",
                                    "reason": "refused: licence CC-BY-NC-3.0 is not known to allow redistribution"}]
    manifest = Manifest.load(dest / "manifest.jsonl")
    ids = sorted(c.id for c in manifest.clips)
    # copy/door is free/sounds/door_open's audio: kept once, in the library listed first
    assert ids == ["copy/bell", "free/sounds/dog_bark", "free/sounds/door_open", "prose/rain"]
    kept = next(c for c in manifest.clips if c.id == "free/sounds/door_open")
    assert kept.extra["duplicates"] == ["copy/door"]
    before, text, table_text = _files(dest), (dest / "manifest.jsonl").read_text(), (dest / "licences.json").read_text()

    again = _script(dest, table)  # nothing to do: the same files, untouched, the same manifest
    assert again.returncode == 0, again.stderr
    assert "free-sounds:" not in again.stderr.replace("nc-sounds", "")
    assert (dest / "manifest.jsonl").read_text() == text and (dest / "licences.json").read_text() == table_text
    assert _files(dest) == before


def test_the_script_resumes_after_a_kill(fake_packages):
    dest, table = fake_packages
    assert _script(dest, table).returncode == 0
    text = (dest / "manifest.jsonl").read_text()
    # a kill while unpacking copy-sounds: its work folder left behind, its library not marked done
    shutil.rmtree(dest / "copy")
    (dest / ".unpack-copy-x1y2").mkdir()
    (dest / ".unpack-copy-x1y2" / "half.wav").write_bytes(b"RIFF")
    (dest / "manifest.jsonl").unlink()
    out = _script(dest, table, keep=False)
    assert out.returncode == 0, out.stderr
    assert "copy-sounds: 2 sound files" in out.stderr and "free-sounds: 2" not in out.stderr
    assert not list(dest.glob(".unpack-*"))
    assert (dest / "manifest.jsonl").read_text() == text
    assert sorted(p.name for p in (dest / "debs").iterdir()) == ["nc-sounds_1.0-1_all.deb"]  # refused: kept


def test_dedup_and_the_folds_keep_one_recording_in_one_fold(fake_packages):
    dest, table = fake_packages
    assert _script(dest, table).returncode == 0
    manifest = Manifest.load(dest / "manifest.jsonl")
    libraries = [c.id.split("/", 1)[0] for c in manifest.clips]
    hashes = [audio_hash(c.audio_path(manifest.root)) for c in manifest.clips]
    by_hash = {}
    for lib, h in zip(libraries, hashes, strict=True):
        by_hash.setdefault(h, set()).add(lib)
    assert all(len(libs) == 1 for libs in by_hash.values())
    data = SimpleNamespace(manifest=manifest, libraries=libraries)
    for clip in manifest.clips:
        clip.split = "train"
    manifest.clips[0].split, manifest.clips[1].split = "test", "val"
    for fold, rows in folds(data).items():
        if fold == "in-library":
            continue
        test = {hashes[i] for i in rows["test"]}
        assert test.isdisjoint(hashes[i] for i in rows["train"] + rows["val"]), fold


def test_licence_expressions():
    assert redistributable("GPL-2+ or CC-BY-NC-3.0") and redistributable("CC-BY-SA-3.0 and Expat")
    assert redistributable("GPL-3+ with Font exception") and redistributable("GNU GPL (see common-licenses)")
    assert not redistributable("CC-BY-NC-SA-3.0") and not redistributable("GPL-2+ and CC-BY-ND-4.0")
    assert not redistributable("Battle-Tanks-License") and redistributable("other", {"other": "read: free"})
    stanzas = parse_copyright(DEP5.format(name="x", holder="A", licence="CC0-1.0")
                              + "\nFiles: data/music/*\nCopyright: B\nLicence: x\nLicense: CC-BY-NC-4.0\n")
    assert [s.licence for s in stanzas] == ["CC0-1.0", "CC-BY-NC-4.0"]
    rule = load_rules()[0]
    check = check_licence(rule, DEP5.format(name="x", holder="A", licence="CC0-1.0")
                          + "\nFiles: data/sounds/*\nCopyright: B\nLicense: CC-BY-NC-4.0\n", ["usr/share/x/a.wav"])
    assert check.refused and "CC-BY-NC-4.0" in check.refused


def test_the_shipped_table_never_names_the_reserved_packages():
    rules = load_rules()
    assert len(rules) >= 30 and not any(r.package.startswith("tuxpaint") for r in rules)
    assert [r.library for r in rules[:12]] == ["scratch", "minetest", "wesnoth", "freedesktop", "qabcs", "widelands",
                                               "lincity", "flare", "sonic-pi", "lmms", "sound-icons", "micropolis"]
