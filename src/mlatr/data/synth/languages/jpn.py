"""Japanese: no spaces, modifiers before the noun (loudness, then pitch), counters with the numeral
(二回の, 三滴の), particles が/に/を, verb-final clauses, and orders the other languages do not use
("BGを背景にFG": the background comes first)."""

from __future__ import annotations

from mlatr.data.synth.languages.base import Mention, pick

CODE = "jpn"
SPACED = False

#: kind -> [(noun, counter)]
NOUNS: dict[str, list[tuple[str, str]]] = {
    "beep": [("電子音", "回"), ("ビープ音", "回")],
    "chirp": [("さえずり", "回"), ("鳥の鳴き声", "回")],
    "bell": [("鐘の音", "回"), ("チャイム", "回")],
    "click": [("クリック音", "回"), ("カチッという音", "回")],
    "knock": [("ノック音", "回"), ("コツンという音", "回")],
    "noise_burst": [("ノイズ", "回"), ("シューという音", "回")],
    "bark": [("犬の吠え声", "回"), ("ワンという鳴き声", "回")],
    "drip": [("しずく", "滴"), ("水滴", "滴")],
    "horn": [("クラクション", "回"), ("警笛", "回")],
    "siren": [("サイレン", "回"), ("サイレンの音", "回")],
    "hum": [("ハム音", "回"), ("うなり", "回")],
    "buzz": [("ブザー音", "回"), ("ジーという音", "回")],
    "rain": [("雨音", "回"), ("雨の音", "回")],
    "drum": [("太鼓のリズム", "回"), ("ドラムの音", "回")],
    "whistle": [("口笛", "回"), ("笛の音", "回")],
    "engine": [("エンジン音", "回"), ("モーター音", "回")],
    "wind": [("風の音", "回"), ("風", "回")],
}
ADJ = {"loud": "大きな", "quiet": "小さな", "high": "高い", "low": "低い"}
NUMBERS = {2: "二", 3: "三"}


def noun_phrase(m: Mention) -> str:
    noun, counter = pick(NOUNS[m.kind], m.synonym)
    if m.numeral:
        count = f"{NUMBERS[m.numeral]}{counter}の"
    elif m.plural:
        count = "何度か鳴る" if counter == "回" else "いくつかの"
    else:
        count = ""
    return count + "".join(ADJ[a] for a in (m.loudness, m.pitch) if a) + noun


def _sequence(nps: list[str]) -> str:
    return nps[0] if len(nps) == 1 else f"{nps[0]}に続いて{nps[1]}"


def realise(fg: list[Mention], bg: Mention | None, variant: int) -> str:
    nps = [noun_phrase(m) for m in fg]
    if bg is not None:
        b = noun_phrase(bg)
        return [f"{b}を背景に{_sequence(nps)}",
                f"{b}が続く中、{_sequence(nps)}が聞こえる",
                f"ずっと{b}がしていて、{_sequence(nps)}も聞こえる"][variant]
    if len(fg) == 1:
        return [nps[0], f"{nps[0]}が聞こえる", f"{nps[0]}がする"][variant]
    if len(fg) == 2:
        a, b = nps
        return [f"{a}に続いて{b}", f"まず{a}、次に{b}が聞こえる", f"{a}の後に{b}"][variant]
    a, b, c = nps
    return [f"{a}に続いて{b}、そして{c}", f"まず{a}、次に{b}、最後に{c}が聞こえる",
            f"{a}と{b}の後に{c}"][variant]
