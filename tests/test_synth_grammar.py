"""Hand-written expected captions of the synthetic benchmark's grammars, alignment, and noise."""

from __future__ import annotations

import re

import numpy as np
import pytest

from mlatr.data.synth.build import clip_record
from mlatr.data.synth.captions import CaptionPlan, realise, sample_plan
from mlatr.data.synth.events import KINDS
from mlatr.data.synth.languages import GRAMMARS, SUPPORTED, Mention
from mlatr.data.synth.noise import corrupt_caption
from mlatr.data.synth.scene import sample_scene


def plan(fg, bg=None, variant=0):
    ms = tuple(fg) + ((bg,) if bg else ())
    truth = tuple((m.pitch or "low", m.loudness or "quiet") for m in ms)
    return CaptionPlan(variant, ms, len(fg), truth)


# (plan, {lang: expected caption}), written by hand from each language's grammar
CASES = [
    (  # three knocks, counted, synonym 1: feminine nouns in fra/spa/cat, plural verbs
        plan([Mention("knock", "low", "quiet", 3, True, 1)], variant=1),
        {"eng": "You can hear three quiet low-pitched thuds",
         "fra": "On entend trois frappes graves et faibles",
         "deu": "Man hört drei leise tiefe Schläge",
         "spa": "Se oyen tres llamadas a la puerta graves y suaves",
         "cat": "Se senten tres trucades a la porta greus i suaus",
         "nld": "Je hoort drie zachte lage bonken",
         "jpn": "三回の小さな低いコツンという音が聞こえる",
         "zho": "可以听到三下轻微而低沉的敲门声"},
    ),
    (  # sequence: participle agreement (suivie, seguit), dues, German dative plural, Dutch het-word
        plan([Mention("bell", "high", "loud", 1, True, 1), Mention("drip", "high", None, 2, True, 0)]),
        {"eng": "A loud high-pitched chime, followed by two high-pitched drips",
         "fra": "Une sonnerie de cloche aiguë et forte, suivie de deux gouttes aiguës",
         "deu": "Ein lauter hoher Glockenklang, gefolgt von zwei hohen Tropfen",
         "spa": "Un toque de campana agudo y fuerte, seguido de dos gotas agudas",
         "cat": "Un toc de campana agut i fort, seguit de dues gotes agudes",
         "nld": "Een luid hoog klokgeluid, gevolgd door twee hoge druppels",
         "jpn": "大きな高いチャイムに続いて二滴の高いしずく",
         "zho": "一声响亮而尖锐的铃声，接着是两滴尖锐的水滴声"},
    ),
    (  # background; count left out -> indefinite plural; background first in jpn
        plan([Mention("horn", None, None, 2, False, 0)], Mention("engine", "low", None, None, True, 0)),
        {"eng": "Honks with a low-pitched engine in the background",
         "fra": "Des coups de klaxon avec un moteur grave en fond",
         "deu": "Huptöne mit einem tiefen Motor im Hintergrund",
         "spa": "Unos bocinazos con un motor grave de fondo",
         "cat": "Uns clàxons amb un motor greu de fons",
         "nld": "Toeters met een lage motor op de achtergrond",
         "jpn": "低いエンジン音を背景に何度か鳴るクラクション",
         "zho": "几声喇叭声，背景中有一阵低沉的发动机声"},
    ),
    (  # "while" clause: qu'un, verb-final Dutch/German subordinate clauses
        plan([Mention("beep", "high", "quiet", 1, True, 0)], Mention("hum", "low", "loud", None, True, 0), 1),
        {"eng": "A quiet high-pitched beep while a loud low-pitched hum continues",
         "fra": "Un bip aigu et faible pendant qu'un bourdonnement grave et fort continue",
         "deu": "Ein leiser hoher Piepton, während ein lautes tiefes Brummen anhält",
         "spa": "Un pitido agudo y suave mientras continúa un zumbido grave y fuerte",
         "cat": "Un bip agut i suau mentre continua un brunzit greu i fort",
         "nld": "Een zachte hoge piep, terwijl een luid laag gebrom aanhoudt",
         "jpn": "大きな低いハム音が続く中、小さな高い電子音が聞こえる",
         "zho": "一阵响亮而低沉的嗡嗡声持续时，传来一声轻微而尖锐的哔声"},
    ),
    (  # "B after A": the later event named first; German dative feminine, Catalan d'una
        plan([Mention("siren", "high", "quiet", None, True, 0), Mention("bark", "low", "loud", 1, True, 0)],
             variant=2),
        {"eng": "A loud low-pitched bark after a quiet high-pitched siren",
         "fra": "Un aboiement grave et fort après une sirène aiguë et faible",
         "deu": "Ein lautes tiefes Bellgeräusch nach einer leisen hohen Sirene",
         "spa": "Un ladrido grave y fuerte después de una sirena aguda y suave",
         "cat": "Un lladruc greu i fort després d'una sirena aguda i suau",
         "nld": "Een luide lage blaf na een zachte hoge sirene",
         "jpn": "小さな高いサイレンの後に大きな低い犬の吠え声",
         "zho": "一阵轻微而尖锐的警笛声之后传来一声响亮而低沉的狗叫声"},
    ),
]


@pytest.mark.parametrize("case", range(len(CASES)))
def test_hand_written_captions(case):
    p, expected = CASES[case]
    assert set(expected) == set(SUPPORTED)
    for lang, text in expected.items():
        assert realise(p, lang) == text, lang


def test_every_kind_and_variant_realises_in_every_language():
    for kind in GRAMMARS["eng"].NOUNS:
        assert all(kind in GRAMMARS[lang].NOUNS for lang in SUPPORTED)
        for count in ((1, 2, 3) if KINDS[kind].countable else (None,)):
            for variant in range(3):
                p = plan([Mention(kind, "high", "loud", count, True, 0),
                          Mention("beep", None, "quiet", 1, True, 1)], variant=variant)
                for lang in SUPPORTED:
                    text = realise(p, lang)
                    assert text and "  " not in text and text == text.strip()
                    if lang in ("jpn", "zho"):
                        assert " " not in text and not re.search("[A-Za-z]", text)


def test_captions_are_aligned_lists_of_equal_length():
    for split, k in (("train", 1), ("train", 3), ("test", 5)):
        for i in range(20):
            clip, scene = clip_record(7, split, i, SUPPORTED, k)
            assert list(clip.captions) == list(SUPPORTED)
            assert all(len(caps) == k and all(caps) for caps in clip.captions.values())
            assert clip.labels == list(dict.fromkeys(e.kind for e in scene.events))


def test_captions_differ_within_a_clip_and_carry_the_counts():
    clip, scene = clip_record(0, "test", 3, ["eng"], 5)
    assert len(set(clip.captions["eng"])) == 5
    # a caption may leave attributes out but never says something false: no wrong pitch word
    for i in range(50):
        clip, scene = clip_record(1, "val", i, ["eng"], 5)
        if len(scene.events) == 1:
            wrong = {"low": "high-pitched", "high": "low-pitched"}[scene.events[0].pitch]
            assert all(wrong not in c for c in clip.captions["eng"])


def test_vocabulary_is_of_meaningful_size():
    texts = {lang: [] for lang in SUPPORTED}
    for i in range(300):
        clip, _ = clip_record(3, "train", i, SUPPORTED, 2)
        for lang, caps in clip.captions.items():
            texts[lang] += caps
    for lang in SUPPORTED:
        units = set("".join(texts[lang])) if lang in ("jpn", "zho") else {
            w.strip(",").lower() for t in texts[lang] for w in t.split()}
        assert len(units) >= 70, (lang, len(units))


def test_noise_changes_only_the_targeted_languages_at_the_given_rate():
    rates = {"fra": 0.3, "jpn": 1.0}
    changed = {lang: 0 for lang in SUPPORTED}
    total = 0
    for i in range(400):
        clean, _ = clip_record(5, "train", i, SUPPORTED, 5)
        noisy, _ = clip_record(5, "train", i, SUPPORTED, 5, noise=rates)
        record = noisy.extra["caption_noise"]
        assert set(record) == set(rates)
        for lang in SUPPORTED:
            for j, (a, b) in enumerate(zip(clean.captions[lang], noisy.captions[lang], strict=True)):
                changed[lang] += a != b
                if lang in record:
                    assert (a != b) == (record[lang][j] is not None)
        total += 5
        assert noisy.extra["scene"] == clean.extra["scene"]
    assert all(changed[lang] == 0 for lang in SUPPORTED if lang not in rates)
    assert changed["jpn"] == total
    # binomial(2000, 0.3): std 0.0102; 4 std tolerance
    assert abs(changed["fra"] / total - 0.3) < 0.041


def test_noise_kinds_do_what_they_say():
    rng = np.random.default_rng(0)
    seen = set()
    for i in range(300):
        scene = sample_scene(np.random.default_rng(i))
        p = sample_plan(scene, np.random.default_rng(1000 + i))
        clean = realise(p, "eng")
        text, kind = corrupt_caption(p, "eng", rng)
        seen.add(kind)
        assert text != clean
        if kind == "word_slip":
            assert sorted(text.split()) == sorted(clean.split())
        if kind == "wrong_attribute":  # a pitch/loudness word that contradicts the sound appears
            words = {"high-pitched": "low-pitched", "low-pitched": "high-pitched", "loud": "quiet",
                     "quiet": "loud"}
            assert any(text.count(w) > clean.count(w) for w in words)
    assert seen == {"drop_attribute", "wrong_attribute", "wrong_count", "synonym", "order", "word_slip"}


def test_clean_captions_are_true_of_their_scene_and_mostly_of_no_other():
    from mlatr.data.synth.build import _CAPTIONS, clip_rng, clip_scene
    from mlatr.data.synth.captions import plan_fits, sample_plans

    scenes = [clip_scene(0, "test", i) for i in range(60)]
    fits = []
    for i, scene in enumerate(scenes):
        for p in sample_plans(scene, clip_rng(0, "test", i, _CAPTIONS), 5):
            assert plan_fits(p, scene)
            fits.append(sum(plan_fits(p, s) for s in scenes))
    unique = np.mean(np.array(fits) == 1)
    assert 0.6 < unique < 0.98  # discriminative, but omitted attributes leave some ambiguity


def test_plan_fits_rejects_a_false_attribute():
    from mlatr.data.synth.captions import plan_fits
    from mlatr.data.synth.scene import Event, Scene

    scene = Scene(3.0, (Event("knock", "low", "loud", 2, 0.2, 0.5), Event("hum", "high", "quiet", None, 1.0, 1.0)))
    ok = plan([Mention("knock", "low", None, 2, False, 0), Mention("hum", None, "quiet", None, True, 1)])
    assert plan_fits(ok, scene)
    for bad in ([Mention("knock", "high", None, 2, True, 0), Mention("hum", None, None, None)],
                [Mention("knock", None, None, 3, True, 0), Mention("hum", None, None, None)],
                [Mention("knock", None, None, 1, True, 0), Mention("hum", None, None, None)],
                [Mention("hum", None, None, None), Mention("knock", None, None, 2, True, 0)]):
        assert not plan_fits(plan(bad), scene)
    assert not plan_fits(plan([ok.mentions[0]], ok.mentions[1]), scene)  # "while" is not "followed by"
