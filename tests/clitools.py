"""Helpers of the bad-input tests: run ``mlatr`` in-process and check the error contract."""

from __future__ import annotations

import hashlib
import json
import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import soundfile as sf


@dataclass
class Result:
    code: int
    out: str
    err: str


def run_cli(capsys, *argv: str) -> Result:
    """``mlatr ARGV`` in this process: exit code (argparse's usage errors included), stdout, stderr."""
    from mlatr.cli import main

    capsys.readouterr()
    try:
        code = main([str(a) for a in argv])
    except SystemExit as exc:  # argparse's usage error
        code = exc.code if isinstance(exc.code, int) else 1
    out, err = capsys.readouterr()
    return Result(code, out, err)


def assert_user_error(result: Result, *fragments: str) -> None:
    """The error contract: exit 2, one message on stderr containing every fragment, no traceback."""
    assert result.code == 2, (result.code, result.out, result.err)
    assert "Traceback" not in result.err and "Traceback" not in result.out
    assert "error:" in result.err, result.err
    for f in fragments:
        assert f in result.err, (f, result.err)


def digest(*paths: Path) -> dict[str, str | None]:
    """SHA-256 of each file (None when missing): to assert that a failed command changed nothing."""
    return {str(p): hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else None for p in paths}


def write_tone(path: Path, seconds: float, sr: int = 16000, subtype: str = "PCM_16") -> Path:
    """A 440 Hz tone of ``seconds`` as a sound file (format from the suffix)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    t = np.arange(int(round(seconds * sr))) / sr
    sf.write(path, (0.3 * np.sin(2 * np.pi * 440 * t)).astype(np.float32), sr, subtype=subtype)
    return path


def truncate_wav(path: Path, keep_frames: int) -> Path:
    """Cut a 16-bit mono WAV's data after ``keep_frames`` frames, its header still declaring them all
    (what an interrupted copy leaves)."""
    data = path.read_bytes()
    at = data.index(b"data") + 8
    size = struct.unpack("<I", data[at - 4:at])[0]
    assert size >= 2 * keep_frames
    path.write_bytes(data[:at + 2 * keep_frames])
    return path


def manifest_lines(path: Path, rows: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return path


def temp_files(folder: Path) -> list[str]:
    """Files of the project's temporary pattern (``.NAME.XXXXXXXX.tmp``) under ``folder``."""
    return sorted(str(p.relative_to(folder)) for p in folder.rglob(".*.tmp"))
