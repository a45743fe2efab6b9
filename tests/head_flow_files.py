"""The source files the head-training flow runs code of: ``mlatr demo-real --heads near-identity-kcl --ensemble 3``,
from the command line to the saved ``model.pt`` (docs/architecture.md, "The head-training flow").

Run as a script: ``PYTHONPATH=src python tests/head_flow_files.py`` prints the count, then the files (relative to
``src/mlatr``). Method: the command runs in this process on :mod:`head_paths_record`'s tiny corpus (its English
captions translated by Apertium, as the recipe does on an English-only manifest; hashed text vectors; the clips'
cached aiSFX features given, as ``RealSounds.load`` reads them from ``OUT/cache`` on a second run); a profile hook
notes the file of every mlatr function called (not module and class bodies, nor what they call: imports; nor
the other subcommands' ``add_arguments``, which every command's parser runs) until ``save_checkpoint`` returns; the
evaluation of the test split (``evaluate_clips``) is left out, the validation that chooses each pair's epoch is in.
Needs apertium-eng-spa and apertium-eng-cat (scripts/setup-system.sh).
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

import pytest
import torch

from head_paths_record import demo_corpus

#: Functions whose calls (and everything under them) are not the head-training flow.
LEFT_OUT = {"evaluate_clips"}


def flow_files() -> list[str]:
    import mlatr
    from mlatr.cli import main

    src = os.path.dirname(mlatr.__file__)
    files: set[str] = set()
    state = {"left_out": 0, "on": True}

    def left_out(code) -> bool:  # the test split's evaluation, the other subcommands' parsers
        rel = os.path.relpath(code.co_filename, src)
        return code.co_name in LEFT_OUT or (rel.startswith("commands/") and code.co_name == "add_arguments"
                                            and rel != "commands/demo_real.py")

    def hook(frame, event, arg):
        code = frame.f_code
        if not state["on"]:
            return
        if event == "call":
            if left_out(code) or state["left_out"]:
                state["left_out"] += left_out(code)
                return
            caller = frame.f_back.f_code if frame.f_back is not None else code
            if code.co_filename.startswith(src) and code.co_flags & caller.co_flags & 0x2:  # not an import's
                files.add(os.path.relpath(code.co_filename, src))
        elif event == "return":
            if left_out(code):
                state["left_out"] -= 1
            elif code.co_name == "save_checkpoint" and not state["left_out"]:
                state["on"] = False

    dtype = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)  # the toy corpus's features and text vectors are float64
    with tempfile.TemporaryDirectory() as tmp, pytest.MonkeyPatch.context() as mp:
        root = Path(tmp)
        demo_corpus(root, mp)
        (root / "manifest.jsonl").write_text("")  # exists; RealSounds.load gives the corpus
        sys.setprofile(hook)
        try:
            rc = main(["demo-real", "--manifest", str(root / "manifest.jsonl"), "-o", str(root / "demo"),
                       "--text", "e5-small", "--heads", "near-identity-kcl", "--ensemble", "3", "--epochs", "1",
                       "--batch-size", "4", "--unseen-epochs", "0", "--no-progress"])
        finally:
            sys.setprofile(None)
            torch.set_default_dtype(dtype)
    if rc != 0:
        raise SystemExit(f"mlatr demo-real failed ({rc})")
    return sorted(files)


if __name__ == "__main__":
    import contextlib
    import io

    with contextlib.redirect_stdout(io.StringIO()):  # the demo's report
        found = flow_files()
    print(len(found))
    print("\n".join(found))
