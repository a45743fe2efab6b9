"""Dutch: de-/het-words, adjective -e except after een with a het-word (een hoog gefluit / een hoge
piep), spelling changes (hoog -> hoge, laag -> lage), verb-final subordinate clauses ("terwijl ...
aanhoudt"), and er klinkt / er klinken."""

from __future__ import annotations

from mlatr.data.synth.languages.base import Mention, capitalise, pick

CODE = "nld"
SPACED = True

#: kind -> [(singular, plural, "de"/"het")]
NOUNS: dict[str, list[tuple[str, str, str]]] = {
    "beep": [("piep", "piepen", "de"), ("pieptoon", "pieptonen", "de")],
    "chirp": [("tjilp", "tjilpen", "de"), ("vogelroep", "vogelroepen", "de")],
    "bell": [("klokslag", "klokslagen", "de"), ("klokgeluid", "klokgeluiden", "het")],
    "click": [("klik", "klikken", "de"), ("tik", "tikken", "de")],
    "knock": [("klop", "kloppen", "de"), ("bonk", "bonken", "de")],
    "noise_burst": [("ruisstoot", "ruisstoten", "de"), ("sisgeluid", "sisgeluiden", "het")],
    "bark": [("blaf", "blaffen", "de"), ("blafgeluid", "blafgeluiden", "het")],
    "drip": [("druppel", "druppels", "de"), ("waterdruppel", "waterdruppels", "de")],
    "horn": [("toeter", "toeters", "de"), ("claxonstoot", "claxonstoten", "de")],
    "siren": [("sirene", "sirenes", "de"), ("loeiende sirene", "loeiende sirenes", "de")],
    "hum": [("gebrom", "gebrom", "het"), ("gezoem", "gezoem", "het")],
    "buzz": [("gesnor", "gesnor", "het"), ("zoemtoon", "zoemtonen", "de")],
    "rain": [("regen", "regens", "de"), ("regenbui", "regenbuien", "de")],
    "drum": [("trommelritme", "trommelritmes", "het"), ("getrommel", "getrommel", "het")],
    "whistle": [("gefluit", "gefluit", "het"), ("fluittoon", "fluittonen", "de")],
    "engine": [("motor", "motoren", "de"), ("motorgeluid", "motorgeluiden", "het")],
    "wind": [("wind", "winden", "de"), ("windvlaag", "windvlagen", "de")],
}
#: adjective -> (bare, inflected)
ADJ = {"high": ("hoog", "hoge"), "low": ("laag", "lage"),
       "loud": ("luid", "luide"), "quiet": ("zacht", "zachte")}
NUMBERS = {2: "twee", 3: "drie"}


def noun_phrase(m: Mention) -> str:
    sg, pl, article = pick(NOUNS[m.kind], m.synonym)
    bare = not m.plural and article == "het"  # een + het-word: uninflected adjective
    adjs = [ADJ[a][0 if bare else 1] for a in (m.loudness, m.pitch) if a]
    if m.plural:
        return " ".join(([NUMBERS[m.numeral]] if m.numeral else []) + adjs + [pl])
    return " ".join(["een"] + adjs + [sg])


def _sequence(nps: list[str]) -> str:
    return nps[0] if len(nps) == 1 else f"{nps[0]}, gevolgd door {nps[1]},"


def realise(fg: list[Mention], bg: Mention | None, variant: int) -> str:
    nps = [noun_phrase(m) for m in fg]
    if bg is not None:
        b = noun_phrase(bg)
        seq = _sequence(nps)
        text = [f"{seq} met {b} op de achtergrond",
                f"{seq.rstrip(',')}, terwijl {b} aanhoudt",
                f"voortdurend {b}, met {seq.rstrip(',')}"][variant]
    elif len(fg) == 1:
        verb = "er klinken" if fg[0].plural else "er klinkt"
        text = [nps[0], f"je hoort {nps[0]}", f"{verb} {nps[0]}"][variant]
    elif len(fg) == 2:
        a, b = nps
        text = [f"{a}, gevolgd door {b}", f"eerst hoor je {a}, dan {b}", f"{b} na {a}"][variant]
    else:
        a, b, c = nps
        text = [f"{a}, gevolgd door {b} en dan {c}", f"eerst hoor je {a}, dan {b} en ten slotte {c}",
                f"{c} na {a} en {b}"][variant]
    return capitalise(text)
