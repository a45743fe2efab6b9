"""Can ``mlatr serve`` guess a search query's language offline? Accuracy of offline language identifiers.

The server would guess the language of ``GET /search?q=...`` when ``lang`` is omitted. This measures
whether that can be done reliably with identifiers whose models ship inside their wheels (nothing
downloaded at run time), on the kind of text people type into a sound search box: short phrases.

Sets: ``handwritten`` (``src/mlatr/data/queries_multilingual.json``: 32 sound descriptions in each of
the 8 ATRI languages, 2-5 words, e.g. "un chien qui aboie") and ``synthetic`` (first caption of the
synthetic benchmark's test clips, seed 0, de-duplicated). Each identifier answers among the 8
languages (``--candidates atri``, the most favourable setting) or the 20 that mlatr knows
(``--candidates all``: closer to a library whose users type any language). Accuracy is
per language and overall; ``ms`` is the mean time of one call.

Identifiers (install them to run this; neither is an mlatr dependency):
``py3langid`` (langid.py's naive Bayes model, 97 languages, 4.5 MB) and ``lingua-language-detector``
(n-gram models, claims short-text accuracy, ~96 MB installed).

    .venv/bin/pip install py3langid lingua-language-detector
    .venv/bin/python benchmarks/bench_langid.py [--candidates atri|all] [--synthetic 300] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import time
from importlib import resources

from mlatr.data.synth import clip_record
from mlatr.languages import ALIASES, DEFAULT_LANGUAGES, LANGUAGE_NAMES


def handwritten_set() -> list[tuple[str, str]]:
    doc = json.loads(resources.files("mlatr.data").joinpath("queries_multilingual.json").read_text("utf-8"))
    return [(q["captions"][lang], lang) for q in doc["queries"] for lang in doc["languages"]]


def synthetic_set(n_clips: int) -> list[tuple[str, str]]:
    out, seen = [], set()
    for i in range(n_clips):
        clip, _ = clip_record(0, "test", i, DEFAULT_LANGUAGES, 1)
        if clip.captions["eng"][0] in seen:
            continue
        seen.add(clip.captions["eng"][0])
        out += [(clip.captions[lang][0], lang) for lang in DEFAULT_LANGUAGES]
    return out


def py3langid_identifier(candidates: list[str]):
    from py3langid.langid import MODEL_FILE, LanguageIdentifier

    ident = LanguageIdentifier.from_model_file(MODEL_FILE)
    to_639_1 = {v: k for k, v in ALIASES.items() if len(k) == 2}
    ident.set_languages([to_639_1[c] for c in candidates])
    return lambda text: ALIASES[ident.classify(text)[0]]


def lingua_identifier(candidates: list[str]):
    from lingua import Language, LanguageDetectorBuilder

    langs = [getattr(Language, LANGUAGE_NAMES[c].upper()) for c in candidates]
    detector = LanguageDetectorBuilder.from_languages(*langs).build()

    def identify(text: str) -> str:
        found = detector.detect_language_of(text)
        return found.iso_code_639_3.name.lower() if found is not None else "und"

    return identify


IDENTIFIERS = {"py3langid": py3langid_identifier, "lingua": lingua_identifier}


def measure(identify, items: list[tuple[str, str]]) -> dict:
    per_lang: dict[str, list[int]] = {lang: [0, 0] for lang in DEFAULT_LANGUAGES}
    wrong: list[str] = []
    t0 = time.perf_counter()
    for text, lang in items:
        guess = identify(text)
        per_lang[lang][1] += 1
        if guess == lang:
            per_lang[lang][0] += 1
        elif len(wrong) < 6:
            wrong.append(f"{text!r} ({lang}) -> {guess}")
    ms = (time.perf_counter() - t0) * 1e3 / len(items)
    correct = sum(c for c, _ in per_lang.values())
    return {"accuracy": correct / len(items), "n": len(items), "ms_per_call": ms,
            "per_lang": {lang: c / n for lang, (c, n) in per_lang.items() if n}, "examples_wrong": wrong}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--synthetic", type=int, default=300, help="synthetic clips to draw captions from (0: skip)")
    ap.add_argument("--candidates", choices=["atri", "all"], default="atri",
                    help="languages the identifier may answer: the 8 ATRI ones, or all 20 mlatr knows")
    ap.add_argument("--json", help="also write the figures here")
    args = ap.parse_args(argv)
    candidates = list(DEFAULT_LANGUAGES) if args.candidates == "atri" else sorted(LANGUAGE_NAMES)
    sets = {"handwritten": handwritten_set()}
    if args.synthetic:
        sets["synthetic"] = synthetic_set(args.synthetic)
    result: dict = {}
    for name, make in IDENTIFIERS.items():
        try:
            identify = make(candidates)
        except ImportError as exc:
            print(f"{name}: not installed ({exc}); skipped")
            continue
        for set_name, items in sets.items():
            r = measure(identify, items)
            result.setdefault(set_name, {})[name] = r
            worst = sorted(r["per_lang"].items(), key=lambda kv: kv[1])[:3]
            print(f"{set_name:<11} {name:<9} accuracy {100 * r['accuracy']:5.1f} % of {r['n']}  "
                  f"({r['ms_per_call']:.2f} ms/call); worst: "
                  + ", ".join(f"{lang} {100 * a:.0f} %" for lang, a in worst))
            for w in r["examples_wrong"][:3]:
                print(f"    {w}")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(result, fh, ensure_ascii=False, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
