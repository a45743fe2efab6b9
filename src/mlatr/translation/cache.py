"""A persistent translation cache: every translation is written to disk the moment it arrives.

Key: ``(text, source, target, backend, model)``. An interrupted ``mlatr data translate`` (or a rerun with
more languages) finds what it already paid for and sends only the rest.

The file is JSON lines, one translation per line::

    {"text": "A dog barks", "source": "eng", "target": "fra", "backend": "openai",
     "model": "deepseek-chat", "translation": "Un chien aboie"}

It is an append-only log, not an atomically replaced file: :meth:`TranslationCache.put_many` appends a
batch's lines in one write, flushes and fsyncs, so a crash loses at most the batch in flight. A line cut
short by a crash is skipped on the next load (and counted in :attr:`TranslationCache.skipped_lines`); the
next append starts on a fresh line. Failures are never cached, so a rerun tries them again. The same key
written twice keeps the last translation.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path

from mlatr.errors import MlatrError
from mlatr.json_input import parse_json

Key = tuple[str, str, str, str, str]  # text, source, target, backend, model
FIELDS = ("text", "source", "target", "backend", "model")


class TranslationCache:
    """Translations keyed by ``(text, source, target, backend, model)``; persisted when given a ``path``."""

    def __init__(self, path: str | os.PathLike | None = None):
        self.path = Path(path) if path is not None else None
        self._store: dict[Key, str] = {}
        self.skipped_lines = 0
        if self.path is not None and self.path.exists():
            self._load(self.path)

    def __len__(self) -> int:
        return len(self._store)

    def get(self, key: Key) -> str | None:
        return self._store.get(key)

    def __contains__(self, key: Key) -> bool:
        return key in self._store

    def put_many(self, items: Iterable[tuple[Key, str]]) -> None:
        """Store translations and append them to the file (one write, flushed and fsynced)."""
        items = [(key, text) for key, text in items]
        if not items:
            return
        for key, text in items:
            self._store[key] = text
        if self.path is None:
            return
        lines = "".join(json.dumps({**dict(zip(FIELDS, key, strict=True)), "translation": text},
                                   ensure_ascii=False) + "\n" for key, text in items)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path, "a+b") as fh:
            if fh.tell() > 0:  # a line cut short by a crash must not swallow the first new one
                fh.seek(-1, os.SEEK_END)
                if fh.read(1) != b"\n":
                    lines = "\n" + lines
            fh.write(lines.encode("utf-8"))
            fh.flush()
            os.fsync(fh.fileno())

    def _load(self, path: Path) -> None:
        try:
            fh = open(path, encoding="utf-8", errors="replace")
        except OSError as exc:
            raise MlatrError(f"{path}: cannot read the translation cache ({exc.strerror or exc})") from exc
        with fh:
            for text in fh:
                if not text.strip():
                    continue
                try:
                    row = parse_json(text, str(path))
                    key = tuple(row[f] for f in FIELDS)
                    value = row["translation"]
                except (ValueError, KeyError, TypeError):
                    self.skipped_lines += 1  # a torn last line, or a line someone edited by hand
                    continue
                if all(isinstance(v, str) for v in key) and isinstance(value, str) and value.strip():
                    self._store[key] = value  # type: ignore[index]
                else:
                    self.skipped_lines += 1
