"""German: three genders, nominative/accusative/dative, mixed adjective declension after ein-,
strong declension in the plural (with or without a numeral), dative plural -n, and the verb agreeing
in number ("es ertönt ein ..." / "es ertönen zwei ...")."""

from __future__ import annotations

from mlatr.data.synth.languages.base import Mention, capitalise, pick

CODE = "deu"
SPACED = True

#: kind -> [(singular, plural, gender "m"/"f"/"n")]
NOUNS: dict[str, list[tuple[str, str, str]]] = {
    "beep": [("Piepton", "Pieptöne", "m"), ("Signalton", "Signaltöne", "m")],
    "chirp": [("Zwitscherlaut", "Zwitscherlaute", "m"), ("Piepser", "Piepser", "m")],
    "bell": [("Glockenschlag", "Glockenschläge", "m"), ("Glockenklang", "Glockenklänge", "m")],
    "click": [("Klick", "Klicks", "m"), ("Knackgeräusch", "Knackgeräusche", "n")],
    "knock": [("Klopfgeräusch", "Klopfgeräusche", "n"), ("Schlag", "Schläge", "m")],
    "noise_burst": [("Rauschstoß", "Rauschstöße", "m"), ("Zischlaut", "Zischlaute", "m")],
    "bark": [("Bellgeräusch", "Bellgeräusche", "n"), ("Kläfflaut", "Kläfflaute", "m")],
    "drip": [("Tropfen", "Tropfen", "m"), ("Wassertropfen", "Wassertropfen", "m")],
    "horn": [("Hupton", "Huptöne", "m"), ("Hupsignal", "Hupsignale", "n")],
    "siren": [("Sirene", "Sirenen", "f"), ("Martinshorn", "Martinshörner", "n")],
    "hum": [("Brummen", "Brummen", "n"), ("Summen", "Summen", "n")],
    "buzz": [("Surren", "Surren", "n"), ("Schnarren", "Schnarren", "n")],
    "rain": [("Regen", "Regen", "m"), ("Regenschauer", "Regenschauer", "m")],
    "drum": [("Trommelrhythmus", "Trommelrhythmen", "m"), ("Trommelwirbel", "Trommelwirbel", "m")],
    "whistle": [("Pfeifen", "Pfeifen", "n"), ("Pfeifton", "Pfeiftöne", "m")],
    "engine": [("Motor", "Motoren", "m"), ("Motorengeräusch", "Motorengeräusche", "n")],
    "wind": [("Wind", "Winde", "m"), ("Windrauschen", "Windrauschen", "n")],
}
#: adjective -> stem the endings attach to ("hoch" declines as "hoh-", "leise" as "leis-")
STEM = {"high": "hoh", "low": "tief", "loud": "laut", "quiet": "leis"}
NUMBERS = {2: "zwei", 3: "drei"}
ARTICLE = {  # ein- by case and gender
    "nom": {"m": "ein", "f": "eine", "n": "ein"},
    "acc": {"m": "einen", "f": "eine", "n": "ein"},
    "dat": {"m": "einem", "f": "einer", "n": "einem"},
}
MIXED = {  # adjective endings after ein-
    "nom": {"m": "er", "f": "e", "n": "es"},
    "acc": {"m": "en", "f": "e", "n": "es"},
    "dat": {"m": "en", "f": "en", "n": "en"},
}
STRONG_PLURAL = {"nom": "e", "acc": "e", "dat": "en"}


def _dative_plural(noun: str) -> str:
    return noun if noun.endswith(("n", "s")) else noun + "n"


def noun_phrase(m: Mention, case: str = "nom") -> str:
    sg, pl, g = pick(NOUNS[m.kind], m.synonym)
    attrs = [a for a in (m.loudness, m.pitch) if a]
    if m.plural:
        adjs = [STEM[a] + STRONG_PLURAL[case] for a in attrs]
        noun = _dative_plural(pl) if case == "dat" else pl
        words = ([NUMBERS[m.numeral]] if m.numeral else []) + adjs + [noun]
    else:
        adjs = [STEM[a] + MIXED[case][g] for a in attrs]
        words = [ARTICLE[case][g]] + adjs + [sg]
    return " ".join(words)


def _sequence(fg: list[Mention], case: str) -> str:
    """The foreground: "A" or "A, gefolgt von B" (B in the dative)."""
    first = noun_phrase(fg[0], case)
    return first if len(fg) == 1 else f"{first}, gefolgt von {noun_phrase(fg[1], 'dat')}"


def realise(fg: list[Mention], bg: Mention | None, variant: int) -> str:
    if bg is not None:
        close = "," if len(fg) > 1 else ""  # closes the "gefolgt von" apposition
        text = [f"{_sequence(fg, 'nom')}{close} mit {noun_phrase(bg, 'dat')} im Hintergrund",
                f"{_sequence(fg, 'nom')}, während {noun_phrase(bg, 'nom')} anhält",
                f"durchgehend {noun_phrase(bg, 'nom')}, dazu {_sequence(fg, 'nom')}"][variant]
    elif len(fg) == 1:
        a = fg[0]
        verb = "ertönen" if a.plural else "ertönt"
        text = [noun_phrase(a), f"man hört {noun_phrase(a, 'acc')}", f"es {verb} {noun_phrase(a)}"][variant]
    elif len(fg) == 2:
        a, b = fg
        text = [f"{noun_phrase(a)}, gefolgt von {noun_phrase(b, 'dat')}",
                f"zuerst hört man {noun_phrase(a, 'acc')}, dann {noun_phrase(b, 'acc')}",
                f"{noun_phrase(b)} nach {noun_phrase(a, 'dat')}"][variant]
    else:
        a, b, c = fg
        text = [f"{noun_phrase(a)}, gefolgt von {noun_phrase(b, 'dat')} und dann {noun_phrase(c, 'dat')}",
                f"zuerst hört man {noun_phrase(a, 'acc')}, dann {noun_phrase(b, 'acc')} "
                f"und schließlich {noun_phrase(c, 'acc')}",
                f"{noun_phrase(c)} nach {noun_phrase(a, 'dat')} und {noun_phrase(b, 'dat')}"][variant]
    return capitalise(text)
