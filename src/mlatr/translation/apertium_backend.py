"""Translation with Apertium, the offline rule-based engine Debian packages (``apertium-eng-spa`` gives
eng <-> spa, ``apertium-eng-cat`` eng <-> cat).

A batch is one ``apertium -u MODE`` process fed the captions one per line (``-u``: unknown words are
copied without the ``*`` mark). Apertium keeps line breaks, so output line ``k`` is caption ``k``; if the
line count ever differs, the batch is translated one caption per process instead. A line break alone does
not end a sentence for Apertium (it would read the next caption as the same sentence: "caídas de
Lluvia"), so a caption without final punctuation gets a full stop for the run, removed from its
translation again. Modes are named by
ISO 639-3 codes (``eng-spa``); a pair without an installed mode is an error that names it and lists the
installed ones. The cache key's model is the mode name.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Sequence

from mlatr.errors import MlatrError
from mlatr.translation.backend import TranslationBackend, TranslationFailure, clean_output, single_line

#: Endings that close a sentence for Apertium.
SENTENCE_END = (".", "!", "?", "…", ":", ";")

#: The Debian packages of the pairs ATRI's languages can use (others: ``apt-cache search apertium-``).
DEBIAN_PACKAGES = {frozenset(("eng", "spa")): "apertium-eng-spa", frozenset(("eng", "cat")): "apertium-eng-cat"}


def installed_modes(binary: str = "apertium") -> list[str]:
    """The translation modes ``apertium -l`` lists (e.g. ``eng-spa``, ``spa-eng``)."""
    try:
        out = subprocess.run([binary, "-l"], capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise MlatrError(f"apertium backend: cannot run {binary} -l ({exc})") from exc
    return sorted({line.strip() for line in out.stdout.splitlines() if line.strip()})


def package_hint(source: str, target: str) -> str:
    package = DEBIAN_PACKAGES.get(frozenset((source, target)))
    if package:
        return f"install it with: apt-get install {package}"
    return ("Debian's apertium-eng-spa and apertium-eng-cat give eng<->spa and eng<->cat; "
            "`apt-cache search apertium-` lists the others")


class ApertiumBackend(TranslationBackend):
    """``apertium -u {source}-{target}`` (see the module docstring)."""

    name = "apertium"

    def __init__(self, batch_size: int = 64, timeout: float = 300.0, binary: str = "apertium"):
        super().__init__("apertium", batch_size)
        path = shutil.which(binary)
        if path is None:
            raise MlatrError(f"apertium backend: {binary} is not installed (Debian: apt-get install "
                             f"apertium-eng-spa apertium-eng-cat)")
        self.binary, self.timeout = path, float(timeout)
        self.modes = installed_modes(path)

    def mode(self, source: str, target: str) -> str:
        return f"{source}-{target}"

    def check_pair(self, source: str, target: str) -> None:
        mode = self.mode(source, target)
        if mode not in self.modes:
            have = ", ".join(m for m in self.modes if "_" not in m) or "none"
            raise MlatrError(f"apertium backend: no {source} -> {target} translator (mode {mode} is not installed; "
                             f"installed: {have}); {package_hint(source, target)}")

    def model_for(self, source: str, target: str) -> str:
        return self.mode(source, target)

    def _run(self, text: str, mode: str) -> str:
        try:
            done = subprocess.run([self.binary, "-u", mode], input=text, capture_output=True, text=True,
                                  timeout=self.timeout, check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise TranslationFailure(f"apertium {mode}: {exc}") from exc
        if done.returncode != 0:
            raise TranslationFailure(f"apertium {mode} exited with {done.returncode}: {done.stderr.strip()[:200]}")
        return done.stdout

    def translate_batch(self, texts: Sequence[str], source: str, target: str) -> list[str | None]:
        mode = self.mode(source, target)
        lines = [single_line(t) for t in texts]
        added = [not line.endswith(SENTENCE_END) for line in lines]
        framed = [line + "." if add else line for line, add in zip(lines, added, strict=True)]
        out = self._run("\n".join(framed) + "\n", mode).rstrip("\n").split("\n")
        if len(out) != len(lines):  # the line framing broke: one process per caption
            out = []
            for line in framed:
                try:
                    out.append(self._run(line + "\n", mode).strip())
                except TranslationFailure:
                    out.append("")
        return [clean_output(t.rstrip()[:-1] if add and t.rstrip().endswith(".") else t)
                for t, add in zip(out, added, strict=True)]
