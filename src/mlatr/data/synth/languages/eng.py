"""English: pre-nominal adjectives (loudness before pitch), a/an, plural -s, is/are agreement."""

from __future__ import annotations

from mlatr.data.synth.languages.base import Mention, capitalise, pick

CODE = "eng"
SPACED = True

#: kind -> [(singular, plural or None for a mass noun used without article)]
NOUNS: dict[str, list[tuple[str, str | None]]] = {
    "beep": [("beep", "beeps"), ("electronic beep", "electronic beeps")],
    "chirp": [("chirp", "chirps"), ("tweet", "tweets")],
    "bell": [("bell strike", "bell strikes"), ("chime", "chimes")],
    "click": [("click", "clicks"), ("tick", "ticks")],
    "knock": [("knock", "knocks"), ("thud", "thuds")],
    "noise_burst": [("burst of noise", "bursts of noise"), ("hiss", "hisses")],
    "bark": [("bark", "barks"), ("dog bark", "dog barks")],
    "drip": [("drip", "drips"), ("drop of water", "drops of water")],
    "horn": [("honk", "honks"), ("horn blast", "horn blasts")],
    "siren": [("siren", "sirens"), ("wailing siren", "wailing sirens")],
    "hum": [("hum", "hums"), ("drone", "drones")],
    "buzz": [("buzz", "buzzes"), ("buzzing sound", "buzzing sounds")],
    "rain": [("rain", None), ("rainfall", None)],
    "drum": [("drum rhythm", "drum rhythms"), ("drumbeat", "drumbeats")],
    "whistle": [("whistle", "whistles"), ("whistling sound", "whistling sounds")],
    "engine": [("engine", "engines"), ("motor", "motors")],
    "wind": [("wind", None), ("gusting wind", None)],
}
ADJ = {"loud": "loud", "quiet": "quiet", "high": "high-pitched", "low": "low-pitched"}
NUMBERS = {2: "two", 3: "three"}


def noun_phrase(m: Mention) -> str:
    sg, pl = pick(NOUNS[m.kind], m.synonym)
    adjs = [ADJ[a] for a in (m.loudness, m.pitch) if a]
    if m.plural:
        words = ([NUMBERS[m.numeral]] if m.numeral else []) + adjs + [pl]
        return " ".join(words)
    body = " ".join(adjs + [sg])
    if pl is None:  # mass noun: no article
        return body
    return ("an " if body[0] in "aeio" else "a ") + body


def _be(m: Mention) -> str:
    return "are" if m.plural else "is"


def _sequence(nps: list[str]) -> str:
    return nps[0] if len(nps) == 1 else f"{nps[0]} followed by {nps[1]}"


def realise(fg: list[Mention], bg: Mention | None, variant: int) -> str:
    nps = [noun_phrase(m) for m in fg]
    if bg is not None:
        b = noun_phrase(bg)
        text = [f"{_sequence(nps)} with {b} in the background",
                f"{_sequence(nps)} while {b} continues",
                f"{b} throughout, with {_sequence(nps)}"][variant]
    elif len(fg) == 1:
        text = [nps[0], f"you can hear {nps[0]}", f"there {_be(fg[0])} {nps[0]}"][variant]
    elif len(fg) == 2:
        text = [f"{nps[0]}, followed by {nps[1]}", f"first {nps[0]}, then {nps[1]}",
                f"{nps[1]} after {nps[0]}"][variant]
    else:
        text = [f"{nps[0]}, followed by {nps[1]} and then {nps[2]}",
                f"first {nps[0]}, then {nps[1]}, and finally {nps[2]}",
                f"{nps[2]} after {nps[0]} and {nps[1]}"][variant]
    return capitalise(text)
