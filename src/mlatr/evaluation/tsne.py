"""ATRI Appendix C (Figures 3-4): a t-SNE view of the shared embedding space.

ATRI picks 50 random AudioCaps clips and shows, after t-SNE, their audio embeddings and their captions'
embeddings in every language, to see whether the translations of one caption sit together (KCL) or
spread by language (ML-CLAP). Here:

* :func:`select_rows`: ``n_clips`` clips drawn with a seeded generator among those that have captions;
  for each, one caption group (the translations of one English caption, ``text_group``): the one
  present in the most languages, the first such on ties; its captions in every language;
* :func:`embed_2d`: scikit-learn's t-SNE (cosine metric, PCA initialisation, fixed ``random_state``) of
  the selected audio and text embeddings together, one run per model;
* :func:`plot_tsne`: colour = clip, marker = language (a large outlined hexagon for the audio), one
  panel per model side by side (``--compare``: ML-CLAP vs KCL as in Figures 3 and 4); each panel's title
  gives :func:`same_clip_neighbours`, the share of captions whose nearest caption (cosine, in the model's
  space) describes the same clip, so the picture comes with a number.

t-SNE keeps neighbourhoods, not distances: a tight group of same-colour markers means a clip's captions
(and audio) are each other's neighbours; distances between groups carry little meaning.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
from sklearn.manifold import TSNE
from threadpoolctl import threadpool_limits

from mlatr.data.manifest import language_order
from mlatr.errors import MlatrError
from mlatr.evaluation.inputs import unit_rows
from mlatr.plotting import pyplot, save_figure

#: Marker per language (ATRI's eight first); the audio gets AUDIO_MARKER.
LANGUAGE_MARKERS = {"eng": "o", "fra": "s", "deu": "^", "spa": "v", "nld": "D", "cat": "P", "jpn": "X", "zho": "*"}
OTHER_MARKERS = ("<", ">", "p", "d", "8", "h")
AUDIO_MARKER = "H"


@dataclass(frozen=True)
class Selection:
    """Rows of the evaluation arrays in the view: ``clips`` (audio rows) and, per clip, its caption rows."""

    clips: np.ndarray  # [C] rows of ``audio``
    texts: list[np.ndarray]  # texts[k]: rows of ``text`` of clip ``clips[k]``'s chosen group

    @property
    def text_rows(self) -> np.ndarray:
        return np.concatenate(self.texts) if self.texts else np.zeros(0, np.int64)


@dataclass(frozen=True)
class View:
    """One model's embeddings of the selection: ``audio [C, D]``, ``text [T, D]`` with their clip index
    (0..C-1) and language."""

    name: str
    audio: np.ndarray
    text: np.ndarray
    text_clip: np.ndarray
    text_lang: np.ndarray


def select_rows(text_audio: np.ndarray, text_lang: np.ndarray, text_group: np.ndarray, n_audio: int,
                n_clips: int = 50, seed: int = 0) -> Selection:
    """Draw the clips and caption groups of the view (see the module docstring)."""
    text_audio, text_lang, text_group = np.asarray(text_audio), np.asarray(text_lang), np.asarray(text_group)
    with_text = np.unique(text_audio)
    if with_text.size == 0 or n_audio == 0:
        raise MlatrError("t-SNE view: no clip has a caption")
    rng = np.random.default_rng(seed)
    chosen = np.sort(rng.choice(with_text, size=min(n_clips, with_text.size), replace=False))
    texts = []
    for clip in chosen:
        rows = np.flatnonzero(text_audio == clip)
        groups, counts = np.unique(text_group[rows], return_counts=True)
        best = groups[np.argmax(counts)]  # most languages; np.unique sorts, so the first on ties
        mine = rows[text_group[rows] == best]
        order = language_order(text_lang[mine].tolist())
        texts.append(mine[np.argsort([order.index(lang) for lang in text_lang[mine]], kind="stable")])
    return Selection(chosen.astype(np.int64), texts)


def view_from_arrays(name: str, audio: np.ndarray, text: np.ndarray, text_lang: np.ndarray,
                     selection: Selection) -> View:
    """The selected rows of one model's evaluation arrays."""
    rows = selection.text_rows
    clip_of = np.concatenate([np.full(len(t), k) for k, t in enumerate(selection.texts)])
    return View(name, np.asarray(audio)[selection.clips], np.asarray(text)[rows], clip_of,
                np.asarray(text_lang)[rows])


def embed_2d(view: View, seed: int = 0, perplexity: float = 30.0) -> np.ndarray:
    """t-SNE of ``[audio; text]`` to ``[C + T, 2]`` (scikit-learn, cosine metric, PCA initialisation).

    Runs on one OpenMP thread: a few hundred points need no more, and OpenMP threads spinning on a machine
    busy with other work slow the fit down many times (README, measured figures)."""
    points = np.concatenate([view.audio, view.text]).astype(np.float64)
    n = points.shape[0]
    if n < 4:
        raise MlatrError(f"t-SNE view: {n} points are too few (need 4)")
    tsne = TSNE(n_components=2, perplexity=min(perplexity, (n - 1) / 3), metric="cosine", init="pca",
                random_state=seed)
    with threadpool_limits(limits=1, user_api="openmp"):
        return tsne.fit_transform(points)


def same_clip_neighbours(view: View) -> float:
    """Share of the drawn captions whose nearest other drawn caption (cosine, in the model's own space, not
    the t-SNE plane) describes the same clip: what the eye looks for in the figure, as a number."""
    text = unit_rows(view.text, np.float64)
    sim = text @ text.T
    np.fill_diagonal(sim, -np.inf)
    return float(np.mean(view.text_clip[sim.argmax(1)] == view.text_clip)) if len(text) > 1 else float("nan")


def _markers(langs: list[str]) -> dict[str, str]:
    extra = iter(OTHER_MARKERS * 4)
    return {lang: LANGUAGE_MARKERS.get(lang) or next(extra) for lang in langs}


def plot_tsne(views: list[View], path: str | Path, seed: int = 0, title: str = "") -> Path:
    """One t-SNE panel per view, side by side (colour = clip, marker = language, hexagon = audio)."""
    plt = pyplot()
    langs = language_order({str(lang) for v in views for lang in v.text_lang})
    markers = _markers(langs)
    n_clips = views[0].audio.shape[0]
    palette = [plt.get_cmap(name)(i) for name in ("tab20", "tab20b", "tab20c") for i in range(20)]
    colours = [palette[(7 * k) % len(palette)] for k in range(n_clips)]  # neighbours in order get distant hues
    fig, axes = plt.subplots(1, len(views), figsize=(6.2 * len(views), 6.0), squeeze=False)
    for ax, view in zip(axes[0], views, strict=True):
        xy = embed_2d(view, seed)
        audio_xy, text_xy = xy[:n_clips], xy[n_clips:]
        for lang in langs:
            sel = np.flatnonzero(view.text_lang == lang)
            ax.scatter(text_xy[sel, 0], text_xy[sel, 1], c=[colours[c] for c in view.text_clip[sel]],
                       marker=markers[lang], s=26, linewidths=0.3, edgecolors="0.2", alpha=0.9)
        ax.scatter(audio_xy[:, 0], audio_xy[:, 1], c=colours, marker=AUDIO_MARKER, s=150, linewidths=1.4,
                   edgecolors="black")
        ax.set_title(f"{view.name}\nnearest caption from the same clip: {100 * same_clip_neighbours(view):.0f} %",
                     fontsize=10)
        ax.set_xticks([])
        ax.set_yticks([])
    handles = [plt.Line2D([], [], ls="", marker=AUDIO_MARKER, ms=10, mfc="white", mec="black", label="audio")]
    handles += [plt.Line2D([], [], ls="", marker=markers[lang], ms=7, mfc="0.6", mec="0.2", label=lang)
                for lang in langs]
    fig.legend(handles=handles, loc="lower center", ncol=len(handles), fontsize=9, frameon=False)
    fig.suptitle(title or f"t-SNE of {n_clips} random clips: audio and their captions in every language "
                          f"(colour = clip, marker = language; ATRI Appendix C)", fontsize=10)
    fig.tight_layout(rect=(0, 0.05, 1, 0.96))
    out = save_figure(fig, path)
    plt.close(fig)
    return out


def same_captions(first: dict, other: dict) -> bool:
    """True when two sets of evaluation arrays describe the same clips and captions, row by row."""
    return (len(first["audio"]) == len(other["audio"])
            and all(np.array_equal(np.asarray(first[k]), np.asarray(other[k]))
                    for k in ("text_audio", "text_lang", "text_group")))


def plot_tsne_arrays(named: dict[str, dict], path: str | Path, n_clips: int = 50, seed: int = 0) -> Path:
    """The view of one or more models' evaluation arrays (``audio``, ``text``, ``text_audio``, ``text_lang``,
    ``text_group``) of the same clips and captions: the same clips and caption groups in every panel."""
    names = list(named)
    first = named[names[0]]
    for name in names[1:]:
        if not same_captions(first, named[name]):
            raise MlatrError(f"t-SNE comparison: {name!r} does not hold the same clips and captions as "
                             f"{names[0]!r} (text_audio, text_lang and text_group must be equal)")
    selection = select_rows(first["text_audio"], first["text_lang"], first["text_group"], len(first["audio"]),
                            n_clips, seed)
    views = [view_from_arrays(name, a["audio"], a["text"], a["text_lang"], selection) for name, a in named.items()]
    return plot_tsne(views, path, seed)
