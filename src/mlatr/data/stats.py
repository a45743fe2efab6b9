"""Statistics of a manifest: clips per split, captions per language, missing translations, durations."""

from __future__ import annotations

from typing import Any

from mlatr.data.manifest import PIVOT, Manifest, language_order

NO_SPLIT = "(none)"


def manifest_stats(manifest: Manifest) -> dict[str, Any]:
    """A JSON-able summary of ``manifest``.

    Keys: ``clips``; ``splits`` {split: clips} (clips without a split under ``"(none)"``); ``languages``;
    ``captions`` {lang: non-null captions}; ``captions_by_split`` {split: {lang: captions}};
    ``clips_with_captions`` {lang: clips with at least one caption in lang}; ``missing_translations``
    {lang: English captions j with no ``captions[lang][j]``} for every non-English language;
    ``clips_without_captions``; ``duration`` {known, total, min, mean, max} in seconds (None when no
    clip has one); ``labels`` {label: clips}.
    """
    splits: dict[str, int] = {}
    captions: dict[str, int] = {}
    by_split: dict[str, dict[str, int]] = {}
    clips_with: dict[str, int] = {}
    no_captions = 0
    durations: list[float] = []
    labels: dict[str, int] = {}
    langs = manifest.languages()
    for clip in manifest.clips:
        split = clip.split if clip.split is not None else NO_SPLIT
        splits[split] = splits.get(split, 0) + 1
        per = by_split.setdefault(split, {})
        any_caption = False
        for lang, caps in clip.captions.items():
            n = sum(c is not None for c in caps)
            if n:
                any_caption = True
                captions[lang] = captions.get(lang, 0) + n
                per[lang] = per.get(lang, 0) + n
                clips_with[lang] = clips_with.get(lang, 0) + 1
        no_captions += not any_caption
        if clip.duration is not None:
            durations.append(clip.duration)
        for label in clip.labels:
            labels[label] = labels.get(label, 0) + 1
    missing = {}
    for lang in langs:
        if lang == PIVOT:
            continue
        gaps = 0
        for clip in manifest.clips:
            eng = clip.captions.get(PIVOT, [])
            caps = clip.captions.get(lang, [])
            gaps += sum(1 for j in range(len(eng)) if j >= len(caps) or caps[j] is None)
        missing[lang] = gaps
    duration = None
    if durations:
        total = float(sum(durations))
        duration = {"known": len(durations), "total": total, "min": float(min(durations)),
                    "mean": total / len(durations), "max": float(max(durations))}
    return {
        "clips": len(manifest.clips),
        "splits": splits,
        "languages": langs,
        "captions": {lang: captions.get(lang, 0) for lang in language_order(captions)},
        "captions_by_split": {s: {lang: per[lang] for lang in language_order(per)}
                              for s, per in by_split.items()},
        "clips_with_captions": {lang: clips_with[lang] for lang in language_order(clips_with)},
        "missing_translations": missing,
        "clips_without_captions": no_captions,
        "duration": duration,
        "labels": dict(sorted(labels.items(), key=lambda kv: (-kv[1], kv[0]))),
    }


def format_stats(stats: dict[str, Any], max_labels: int = 20) -> str:
    """A readable multi-line table of :func:`manifest_stats`' result."""
    out = [f"clips: {stats['clips']}"]
    out.append("clips per split: " + (", ".join(f"{s} {n}" for s, n in stats["splits"].items()) or "-"))
    langs = list(stats["captions"])
    if langs:
        splits = list(stats["captions_by_split"])
        head = ["language", "captions", "clips", "missing", *[f"in {s}" for s in splits]]
        rows = []
        for lang in langs:
            miss = stats["missing_translations"].get(lang)
            rows.append([lang, str(stats["captions"][lang]), str(stats["clips_with_captions"].get(lang, 0)),
                         "-" if miss is None else str(miss),
                         *[str(stats["captions_by_split"][s].get(lang, 0)) for s in splits]])
        out.append("")
        out += _table(head, rows)
        out.append("(missing = English captions without a translation in that language)")
    out.append("")
    out.append(f"clips without captions: {stats['clips_without_captions']}")
    d = stats["duration"]
    if d is None:
        out.append("durations: unknown")
    else:
        unknown = stats["clips"] - d["known"]
        out.append(f"durations: total {_hms(d['total'])}, min {d['min']:.2f} s, mean {d['mean']:.2f} s, "
                   f"max {d['max']:.2f} s" + (f" ({unknown} clips unknown)" if unknown else ""))
    labels = stats["labels"]
    if labels:
        shown = list(labels.items())[:max_labels]
        more = f", ... ({len(labels) - len(shown)} more)" if len(labels) > len(shown) else ""
        out.append(f"labels: {len(labels)} distinct: " + ", ".join(f"{k} {v}" for k, v in shown) + more)
    return "\n".join(out)


def _table(head: list[str], rows: list[list[str]]) -> list[str]:
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]

    def fmt(r: list[str]) -> str:
        cells = zip(r, widths, strict=True)
        return "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(cells))

    return [fmt(head), fmt(["-" * w for w in widths]), *[fmt(r) for r in rows]]


def _hms(seconds: float) -> str:
    h, rem = divmod(int(round(seconds)), 3600)
    m, s = divmod(rem, 60)
    return f"{h}:{m:02d}:{s:02d} ({seconds:.1f} s)"
