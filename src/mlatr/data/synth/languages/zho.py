"""Mandarin Chinese (simplified): no spaces, numeral + measure word before the noun (一声, 两下, 三滴,
一阵; 两 not 二 before a measure word), modifiers joined with 而 and closed with 的, and constructions
such as "A之后传来B" and "BG持续时，传来FG"."""

from __future__ import annotations

from mlatr.data.synth.languages.base import Mention, pick

CODE = "zho"
SPACED = False

#: kind -> [(noun, measure word)]
NOUNS: dict[str, list[tuple[str, str]]] = {
    "beep": [("哔声", "声"), ("提示音", "声")],
    "chirp": [("鸟鸣", "声"), ("啾啾声", "声")],
    "bell": [("钟声", "声"), ("铃声", "声")],
    "click": [("咔嗒声", "下"), ("滴答声", "下")],
    "knock": [("敲击声", "下"), ("敲门声", "下")],
    "noise_burst": [("噪声", "阵"), ("嘶嘶声", "阵")],
    "bark": [("狗叫声", "声"), ("犬吠", "声")],
    "drip": [("水滴声", "滴"), ("滴水声", "滴")],
    "horn": [("喇叭声", "声"), ("鸣笛声", "声")],
    "siren": [("警笛声", "阵"), ("警报声", "阵")],
    "hum": [("嗡嗡声", "阵"), ("低鸣", "阵")],
    "buzz": [("蜂鸣声", "阵"), ("滋滋声", "阵")],
    "rain": [("雨声", "阵"), ("下雨声", "阵")],
    "drum": [("鼓点", "阵"), ("鼓声", "阵")],
    "whistle": [("口哨声", "阵"), ("哨声", "阵")],
    "engine": [("发动机声", "阵"), ("马达声", "阵")],
    "wind": [("风声", "阵"), ("刮风声", "阵")],
}
ADJ = {"loud": "响亮", "quiet": "轻微", "high": "尖锐", "low": "低沉"}
NUMBERS = {1: "一", 2: "两", 3: "三"}


def noun_phrase(m: Mention) -> str:
    noun, measure = pick(NOUNS[m.kind], m.synonym)
    if m.plural:
        number = NUMBERS[m.numeral] if m.numeral else "几"
    else:
        number = "一"
    adjs = [ADJ[a] for a in (m.loudness, m.pitch) if a]
    modifier = "而".join(adjs) + "的" if adjs else ""
    return f"{number}{measure}{modifier}{noun}"


def _sequence(nps: list[str]) -> str:
    return nps[0] if len(nps) == 1 else f"{nps[0]}，接着是{nps[1]}"


def realise(fg: list[Mention], bg: Mention | None, variant: int) -> str:
    nps = [noun_phrase(m) for m in fg]
    if bg is not None:
        b = noun_phrase(bg)
        return [f"{_sequence(nps)}，背景中有{b}",
                f"{b}持续时，传来{_sequence(nps)}",
                f"一直有{b}，还有{_sequence(nps)}"][variant]
    if len(fg) == 1:
        return [nps[0], f"可以听到{nps[0]}", f"有{nps[0]}"][variant]
    if len(fg) == 2:
        a, b = nps
        return [f"{a}，接着是{b}", f"先是{a}，然后是{b}", f"{a}之后传来{b}"][variant]
    a, b, c = nps
    return [f"{a}，接着是{b}，然后是{c}", f"先是{a}，然后是{b}，最后是{c}",
            f"{a}和{b}之后传来{c}"][variant]
