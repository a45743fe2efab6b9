"""The source files the text-query flow runs code of: ``mlatr search INDEX "a low tone"``, from the command line to
the printed hits (docs/architecture.md, "The text-query flow").

Run as a script: ``PYTHONPATH=src python tests/text_query_flow_files.py`` prints the count, then the files
(relative to ``src/mlatr``). Method, as ``tests/head_flow_files.py``'s: a toy model (``audio_path_record``'s) and an
index of six tones are made first, untraced; then a profile hook notes the file of every mlatr function called
during ``main(["search", ...])`` (not module and class bodies, nor what they call: imports; nor the other
subcommands' ``add_arguments``, which every command's parser runs).
"""

from __future__ import annotations

import contextlib
import io
import os
import sys
import tempfile
from pathlib import Path

import numpy as np
import soundfile as sf

from audio_path_record import toy_model


def flow_files() -> list[str]:
    import mlatr
    from mlatr.cli import main

    src = os.path.dirname(mlatr.__file__)
    files: set[str] = set()

    def hook(frame, event, arg):
        code = frame.f_code
        if event != "call" or not code.co_filename.startswith(src):
            return
        rel = os.path.relpath(code.co_filename, src)
        if rel.startswith("commands/") and code.co_name == "add_arguments" and rel != "commands/search.py":
            return
        caller = frame.f_back.f_code if frame.f_back is not None else code
        if code.co_flags & caller.co_flags & 0x2:  # a function called by a function: not an import's body
            files.add(rel)

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        ckpt = toy_model(root / "toy.pt")
        sounds = root / "sounds"
        sounds.mkdir()
        t = np.arange(16000) / 16000
        for k, name in enumerate(["a low tone", "a high tone", "a double tone", "a short sound", "a long sound",
                                  "noise and a sweep"]):
            sf.write(sounds / f"{name.replace(' ', '_')}.wav", (0.3 * np.sin(2 * np.pi * (200 + 150 * k) * t))
                     .astype(np.float32), 16000)
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            assert main(["index", "build", str(sounds), "-o", str(root / "tones.idx"), "--model", str(ckpt)]) == 0
            sys.setprofile(hook)
            try:
                rc = main(["search", str(root / "tones.idx"), "a low tone"])
            finally:
                sys.setprofile(None)
    if rc != 0:
        raise SystemExit(f"mlatr search failed ({rc})")
    return sorted(files)


if __name__ == "__main__":
    found = flow_files()
    print(len(found))
    print("\n".join(found))
