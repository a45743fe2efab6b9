"""What a sound file's name says in words: the words of a file or folder name, and words joined without a space.

- :data:`AUDIO_EXTENSIONS`: the sound files the folder importer and the path captions know.
- :func:`caption_from_name`: separators and CamelCase split, trailing numbers dropped (``CarPassing`` ->
  "car passing").
- :func:`name_caption`: the words of a file's name, else of its nearest folder with words.
- :func:`split_joined`: a word that is no known word but the concatenation of known ones is split
  (``blackcat`` -> "black cat", ``doorslam`` -> "door slam"), with ``wordninja`` (a word splitter over
  English Wikipedia's 126k most frequent words, which are also the known words here). A word is left
  alone when it is known (``thunderclap``, ``creaky``), shorter than :data:`MIN_JOINED_CHARS`, holds a
  digit, or would split into a one-letter piece (``woosh`` is not "woos h").
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

AUDIO_EXTENSIONS = (".wav", ".flac", ".ogg", ".oga", ".opus", ".mp3", ".aiff", ".aif")
#: Shortest word :func:`split_joined` tries to split: two joined words of three letters ("catdog"); shorter
#: ones are abbreviations far more often ("sfx", "amb", "bgm").
MIN_JOINED_CHARS = 6

_WORD = re.compile(r"[a-z]+")


def caption_from_name(name: str) -> str:
    """Words of a file or folder name, lower case: separators and CamelCase split, trailing numbers
    dropped. ``"CarPassing"`` -> ``"car passing"``, ``"wolf-die-4"`` -> ``"wolf die"``,
    ``"HTTPServer2"`` -> ``"http server"``, ``"mp3Player"`` -> ``"mp3 player"``."""
    words: list[str] = []
    current = ""
    for i, ch in enumerate(name):
        if not ch.isalnum():
            if current:
                words.append(current)
            current = ""
            continue
        if current:
            prev = current[-1]
            nxt = name[i + 1] if i + 1 < len(name) else ""
            boundary = (
                (prev.islower() and ch.isupper())
                or (prev.isupper() and ch.isupper() and nxt.islower())
                or (prev.isdigit() and ch.isupper())
            )
            if boundary:
                words.append(current)
                current = ""
        current += ch
    if current:
        words.append(current)
    while words and words[-1].isdigit():
        words.pop()
    if words:
        words[-1] = words[-1].rstrip("0123456789")
    return " ".join(w.lower() for w in words)


def name_caption(rel: Path) -> str:
    """The caption a sound file's path gives without a sidecar: the words of its file name, else of its
    nearest folder with words (``"sfx/dog/01.wav"`` -> ``"dog"``); empty when no part has any."""
    text = caption_from_name(rel.with_suffix("").name)
    for parent in reversed(rel.parent.parts):
        if text:
            break
        text = caption_from_name(parent)
    return text


@cache
def _splitter():
    """``wordninja`` (it reads its word list when imported, a fifth of a second every command's parser would
    pay: the folder importer is imported by ``mlatr data import``'s parser) and its vocabulary."""
    import wordninja  # see the docstring

    return wordninja, frozenset(wordninja.DEFAULT_LANGUAGE_MODEL._wordcost)


def _known_words() -> frozenset[str]:
    return _splitter()[1]


def is_known_word(word: str) -> bool:
    """Whether ``word`` (lower case) is one of the splitter's known words."""
    return word in _known_words()


def split_word(word: str) -> list[str]:
    """``word`` as the known words it joins (``"blackcat"`` -> ``["black", "cat"]``), else ``[word]`` (see the
    module docstring for when a word is left alone)."""
    if len(word) < MIN_JOINED_CHARS or not _WORD.fullmatch(word) or is_known_word(word):
        return [word]
    pieces = _splitter()[0].split(word)
    if len(pieces) < 2 or "".join(pieces) != word or any(len(p) < 2 for p in pieces):
        return [word]
    return pieces


def split_joined(text: str) -> str:
    """``text`` (lower-case words separated by spaces) with each joined word split: ``"blackcat meow"`` ->
    ``"black cat meow"``; other words and the spacing of the rest unchanged."""
    return " ".join(" ".join(split_word(w)) for w in text.split(" "))
