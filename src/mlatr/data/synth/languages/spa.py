"""Spanish: post-nominal adjectives agreeing in gender and number, un/una/unos/unas, a participle
(seguido/seguida/seguidos/seguidas) agreeing with the first event, and se oye / se oyen."""

from __future__ import annotations

from dataclasses import dataclass

from mlatr.data.synth.languages.base import Mention, capitalise, pick

CODE = "spa"
SPACED = True

#: kind -> [(singular, plural, gender "m"/"f")]
NOUNS: dict[str, list[tuple[str, str, str]]] = {
    "beep": [("pitido", "pitidos", "m"), ("bip", "bips", "m")],
    "chirp": [("gorjeo", "gorjeos", "m"), ("trino", "trinos", "m")],
    "bell": [("campanada", "campanadas", "f"), ("toque de campana", "toques de campana", "m")],
    "click": [("clic", "clics", "m"), ("chasquido", "chasquidos", "m")],
    "knock": [("golpe", "golpes", "m"), ("llamada a la puerta", "llamadas a la puerta", "f")],
    "noise_burst": [("ráfaga de ruido", "ráfagas de ruido", "f"), ("soplido", "soplidos", "m")],
    "bark": [("ladrido", "ladridos", "m"), ("ladrido de perro", "ladridos de perro", "m")],
    "drip": [("gota", "gotas", "f"), ("gota de agua", "gotas de agua", "f")],
    "horn": [("bocinazo", "bocinazos", "m"), ("toque de claxon", "toques de claxon", "m")],
    "siren": [("sirena", "sirenas", "f"), ("sirena de alarma", "sirenas de alarma", "f")],
    "hum": [("zumbido", "zumbidos", "m"), ("ronroneo", "ronroneos", "m")],
    "buzz": [("zumbido eléctrico", "zumbidos eléctricos", "m"), ("chisporroteo", "chisporroteos", "m")],
    "rain": [("lluvia", "lluvias", "f"), ("aguacero", "aguaceros", "m")],
    "drum": [("ritmo de tambor", "ritmos de tambor", "m"), ("redoble de tambor", "redobles de tambor", "m")],
    "whistle": [("silbido", "silbidos", "m"), ("silbato", "silbatos", "m")],
    "engine": [("motor", "motores", "m"), ("ruido de motor", "ruidos de motor", "m")],
    "wind": [("viento", "vientos", "m"), ("ráfaga de viento", "ráfagas de viento", "f")],
}
#: adjective -> (m sg, f sg, m pl, f pl)
ADJ = {
    "high": ("agudo", "aguda", "agudos", "agudas"),
    "low": ("grave", "grave", "graves", "graves"),
    "loud": ("fuerte", "fuerte", "fuertes", "fuertes"),
    "quiet": ("suave", "suave", "suaves", "suaves"),
}
NUMBERS = {2: "dos", 3: "tres"}


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
    noun = (pl if m.plural else sg) + ("" if not adjs else " " + " y ".join(adjs))
    if m.numeral:
        det = NUMBERS[m.numeral]
    else:
        det = _agree(("un", "una", "unos", "unas"), g, m.plural)
    return NP(f"{det} {noun}", g, m.plural)


def _seguido(np_: NP) -> str:
    return _agree(("seguido", "seguida", "seguidos", "seguidas"), np_.gender, np_.plural)


def _sequence(nps: list[NP]) -> str:
    return nps[0].text if len(nps) == 1 else f"{nps[0].text} {_seguido(nps[0])} de {nps[1].text}"


def realise(fg: list[Mention], bg: Mention | None, variant: int) -> str:
    nps = [noun_phrase(m) for m in fg]
    if bg is not None:
        b = noun_phrase(bg).text
        text = [f"{_sequence(nps)} con {b} de fondo",
                f"{_sequence(nps)} mientras continúa {b}",
                f"{b} constante, con {_sequence(nps)}"][variant]
    elif len(fg) == 1:
        a = nps[0].text
        verb = "se oyen" if nps[0].plural else "se oye"
        text = [a, f"{verb} {a}", f"hay {a}"][variant]
    elif len(fg) == 2:
        a, b = nps[0].text, nps[1].text
        verb = "se oyen" if nps[0].plural else "se oye"
        text = [f"{a}, {_seguido(nps[0])} de {b}", f"primero {verb} {a}, luego {b}",
                f"{b} después de {a}"][variant]
    else:
        a, b, c = (x.text for x in nps)
        verb = "se oyen" if nps[0].plural else "se oye"
        text = [f"{a}, {_seguido(nps[0])} de {b} y luego {c}",
                f"primero {verb} {a}, luego {b} y finalmente {c}",
                f"{c} después de {a} y {b}"][variant]
    return capitalise(text)
