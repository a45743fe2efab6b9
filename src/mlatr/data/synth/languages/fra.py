"""French: post-nominal adjectives agreeing in gender and number, un/une/des, elision (d'un),
de + des -> de, and a participle (suivi/suivie/suivis/suivies) agreeing with the first event."""

from __future__ import annotations

from dataclasses import dataclass

from mlatr.data.synth.languages.base import Mention, capitalise, pick

CODE = "fra"
SPACED = True

#: kind -> [(singular, plural, gender "m"/"f")]
NOUNS: dict[str, list[tuple[str, str, str]]] = {
    "beep": [("bip", "bips", "m"), ("signal sonore", "signaux sonores", "m")],
    "chirp": [("gazouillis", "gazouillis", "m"), ("pépiement", "pépiements", "m")],
    "bell": [("coup de cloche", "coups de cloche", "m"), ("sonnerie de cloche", "sonneries de cloche", "f")],
    "click": [("clic", "clics", "m"), ("tic", "tics", "m")],
    "knock": [("coup sourd", "coups sourds", "m"), ("frappe", "frappes", "f")],
    "noise_burst": [("rafale de bruit", "rafales de bruit", "f"), ("souffle", "souffles", "m")],
    "bark": [("aboiement", "aboiements", "m"), ("jappement", "jappements", "m")],
    "drip": [("goutte", "gouttes", "f"), ("goutte d'eau", "gouttes d'eau", "f")],
    "horn": [("coup de klaxon", "coups de klaxon", "m"), ("klaxon", "klaxons", "m")],
    "siren": [("sirène", "sirènes", "f"), ("sirène hurlante", "sirènes hurlantes", "f")],
    "hum": [("bourdonnement", "bourdonnements", "m"), ("ronronnement", "ronronnements", "m")],
    "buzz": [("grésillement", "grésillements", "m"), ("vrombissement", "vrombissements", "m")],
    "rain": [("pluie", "pluies", "f"), ("averse", "averses", "f")],
    "drum": [("rythme de tambour", "rythmes de tambour", "m"),
             ("roulement de tambour", "roulements de tambour", "m")],
    "whistle": [("sifflement", "sifflements", "m"), ("sifflet", "sifflets", "m")],
    "engine": [("moteur", "moteurs", "m"), ("bruit de moteur", "bruits de moteur", "m")],
    "wind": [("vent", "vents", "m"), ("souffle de vent", "souffles de vent", "m")],
}
#: adjective -> (m sg, f sg, m pl, f pl)
ADJ = {
    "high": ("aigu", "aiguë", "aigus", "aiguës"),
    "low": ("grave", "grave", "graves", "graves"),
    "loud": ("fort", "forte", "forts", "fortes"),
    "quiet": ("faible", "faible", "faibles", "faibles"),
}
NUMBERS = {2: "deux", 3: "trois"}
VOWELS = "aeiouéèêâîôûh"


@dataclass(frozen=True)
class NP:
    text: str
    gender: str
    plural: bool
    determiner: str  # "un" / "une" / "des" / "" (numeral)


def _agree(forms: tuple[str, str, str, str], gender: str, plural: bool) -> str:
    return forms[(2 if plural else 0) + (1 if gender == "f" else 0)]


def noun_phrase(m: Mention) -> NP:
    sg, pl, g = pick(NOUNS[m.kind], m.synonym)
    adjs = [_agree(ADJ[a], g, m.plural) for a in (m.pitch, m.loudness) if a]
    noun = pl if m.plural else sg
    if adjs:
        noun += " " + " et ".join(adjs)
    if m.plural:
        det = NUMBERS[m.numeral] if m.numeral else "des"
    else:
        det = "une" if g == "f" else "un"
    return NP(f"{det} {noun}", g, m.plural, det)


def _de(np_: NP) -> str:
    """'de' + a noun phrase: d'un(e), de deux, and de + des -> de."""
    if np_.determiner == "des":
        rest = np_.text[4:]
        return ("d'" if rest[0] in VOWELS else "de ") + rest
    return ("d'" if np_.text[0] in VOWELS else "de ") + np_.text


def _que(text: str) -> str:
    return ("qu'" if text[0] in VOWELS else "que ") + text


def _suivi(np_: NP) -> str:
    return _agree(("suivi", "suivie", "suivis", "suivies"), np_.gender, np_.plural)


def _sequence(nps: list[NP]) -> str:
    return nps[0].text if len(nps) == 1 else f"{nps[0].text} {_suivi(nps[0])} {_de(nps[1])}"


def realise(fg: list[Mention], bg: Mention | None, variant: int) -> str:
    nps = [noun_phrase(m) for m in fg]
    if bg is not None:
        b = noun_phrase(bg).text
        text = [f"{_sequence(nps)} avec {b} en fond",
                f"{_sequence(nps)} pendant {_que(b)} continue",
                f"{b} en continu, avec {_sequence(nps)}"][variant]
    elif len(fg) == 1:
        a = nps[0].text
        text = [a, f"on entend {a}", f"il y a {a}"][variant]
    elif len(fg) == 2:
        a, b = nps[0].text, nps[1].text
        text = [f"{a}, {_suivi(nps[0])} {_de(nps[1])}", f"d'abord {a}, puis {b}", f"{b} après {a}"][variant]
    else:
        a, b, c = (x.text for x in nps)
        text = [f"{a}, {_suivi(nps[0])} {_de(nps[1])} puis {c}",
                f"d'abord {a}, puis {b}, et enfin {c}",
                f"{c} après {a} et {b}"][variant]
    return capitalise(text)
