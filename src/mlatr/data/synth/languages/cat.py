"""Catalan: post-nominal adjectives agreeing in gender and number, un/una/uns/unes, dos/dues
agreeing with the noun, elision (d'un, d'uns), a participle (seguit/seguida/seguits/seguides)
agreeing with the first event, and se sent / se senten."""

from __future__ import annotations

from dataclasses import dataclass

from mlatr.data.synth.languages.base import Mention, capitalise, pick

CODE = "cat"
SPACED = True

#: kind -> [(singular, plural, gender "m"/"f")]
NOUNS: dict[str, list[tuple[str, str, str]]] = {
    "beep": [("bip", "bips", "m"), ("senyal acústic", "senyals acústics", "m")],
    "chirp": [("piulet", "piulets", "m"), ("refilet", "refilets", "m")],
    "bell": [("campanada", "campanades", "f"), ("toc de campana", "tocs de campana", "m")],
    "click": [("clic", "clics", "m"), ("espetec", "espetecs", "m")],
    "knock": [("cop", "cops", "m"), ("trucada a la porta", "trucades a la porta", "f")],
    "noise_burst": [("ràfega de soroll", "ràfegues de soroll", "f"), ("bufada", "bufades", "f")],
    "bark": [("lladruc", "lladrucs", "m"), ("lladruc de gos", "lladrucs de gos", "m")],
    "drip": [("gota", "gotes", "f"), ("gota d'aigua", "gotes d'aigua", "f")],
    "horn": [("clàxon", "clàxons", "m"), ("botzinada", "botzinades", "f")],
    "siren": [("sirena", "sirenes", "f"), ("sirena d'alarma", "sirenes d'alarma", "f")],
    "hum": [("brunzit", "brunzits", "m"), ("remor", "remors", "f")],
    "buzz": [("brunzit elèctric", "brunzits elèctrics", "m"),
             ("espetec elèctric", "espetecs elèctrics", "m")],
    "rain": [("pluja", "pluges", "f"), ("ruixat", "ruixats", "m")],
    "drum": [("ritme de tambor", "ritmes de tambor", "m"), ("redoble de tambor", "redobles de tambor", "m")],
    "whistle": [("xiulet", "xiulets", "m"), ("xiulada", "xiulades", "f")],
    "engine": [("motor", "motors", "m"), ("soroll de motor", "sorolls de motor", "m")],
    "wind": [("vent", "vents", "m"), ("ventada", "ventades", "f")],
}
#: adjective -> (m sg, f sg, m pl, f pl)
ADJ = {
    "high": ("agut", "aguda", "aguts", "agudes"),
    "low": ("greu", "greu", "greus", "greus"),
    "loud": ("fort", "forta", "forts", "fortes"),
    "quiet": ("suau", "suau", "suaus", "suaus"),
}
NUMBERS = {2: ("dos", "dues"), 3: ("tres", "tres")}
VOWELS = "aeiouàèéíòóúh"


@dataclass(frozen=True)
class NP:
    text: str
    gender: str
    plural: bool


def _agree(forms: tuple[str, str, str, str], gender: str, plural: bool) -> str:
    return forms[(2 if plural else 0) + (1 if gender == "f" else 0)]


def noun_phrase(m: Mention) -> NP:
    sg, pl, g = pick(NOUNS[m.kind], m.synonym)
    adjs = [_agree(ADJ[a], g, m.plural) for a in (m.pitch, m.loudness) if a]
    noun = (pl if m.plural else sg) + ("" if not adjs else " " + " i ".join(adjs))
    if m.numeral:
        det = NUMBERS[m.numeral][g == "f"]
    else:
        det = _agree(("un", "una", "uns", "unes"), g, m.plural)
    return NP(f"{det} {noun}", g, m.plural)


def _de(text: str) -> str:
    return ("d'" if text[0] in VOWELS else "de ") + text


def _seguit(np_: NP) -> str:
    return _agree(("seguit", "seguida", "seguits", "seguides"), np_.gender, np_.plural)


def _sequence(nps: list[NP]) -> str:
    return nps[0].text if len(nps) == 1 else f"{nps[0].text} {_seguit(nps[0])} {_de(nps[1].text)}"


def realise(fg: list[Mention], bg: Mention | None, variant: int) -> str:
    nps = [noun_phrase(m) for m in fg]
    if bg is not None:
        b = noun_phrase(bg).text
        text = [f"{_sequence(nps)} amb {b} de fons",
                f"{_sequence(nps)} mentre continua {b}",
                f"{b} constant, amb {_sequence(nps)}"][variant]
    elif len(fg) == 1:
        a = nps[0].text
        verb = "se senten" if nps[0].plural else "se sent"
        text = [a, f"{verb} {a}", f"hi ha {a}"][variant]
    elif len(fg) == 2:
        a, b = nps[0].text, nps[1].text
        verb = "se senten" if nps[0].plural else "se sent"
        text = [f"{a}, {_seguit(nps[0])} {_de(b)}", f"primer {verb} {a}, després {b}",
                f"{b} després {_de(a)}"][variant]
    else:
        a, b, c = (x.text for x in nps)
        verb = "se senten" if nps[0].plural else "se sent"
        text = [f"{a}, {_seguit(nps[0])} {_de(b)} i després {c}",
                f"primer {verb} {a}, després {b} i finalment {c}",
                f"{c} després {_de(a)} i {b}"][variant]
    return capitalise(text)
