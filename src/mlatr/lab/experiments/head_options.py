"""The head options of the real-sound runs and their defaults (no torch here: the CLI lists them in --help).

See :mod:`mlatr.lab.experiments.real_heads` for what each option trains.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from mlatr.errors import MlatrError

#: The frozen multilingual text encoders a real-sound run may use.
TEXT_ENCODERS = ("use-multilingual", "e5-small")


@dataclass(frozen=True)
class HeadOption:
    """How the projection heads are trained (see the module docstring)."""

    name: str
    about: str
    text_head: str = "mlp"
    identity_penalty: float = 0.0
    scheme: str = "mlclap"
    trained: bool = True
    #: The caption languages trained on: "eng", or "all" those the manifest has (translations).
    caption_languages: str = "eng"


HEAD_OPTIONS: dict[str, HeadOption] = {o.name: o for o in (
    HeadOption("random", "untrained heads (both ML-CLAP heads at their initialisation)", trained=False),
    HeadOption("both-heads", "an ML-CLAP head on each side, InfoNCE on English captions"),
    HeadOption("audio-only", "only the audio head learns, into the frozen text space (text head = identity)",
               text_head="identity"),
    HeadOption("near-identity", "residual text head x + MLP(x) from the identity, penalty 1.0 ||g(t) - t||^2",
               text_head="residual", identity_penalty=1.0),
    HeadOption("near-identity-kcl", "near-identity text head, KCL (ATRI eq. 9) over English and its machine "
               "translations in the manifest (mlatr data translate)", text_head="residual", identity_penalty=1.0,
               scheme="kcl", caption_languages="all"),
    HeadOption("kcl-translations", "both ML-CLAP heads, KCL (ATRI eq. 9) over English and its machine translations "
               "in the manifest (mlatr data translate)", scheme="kcl", caption_languages="all"),
)}

#: The options ``mlatr experiment unseen-library`` compares by default (kcl-translations needs a translated
#: manifest: ask for it with --heads once ``mlatr data translate`` has added translations).
COMPARED_BY_DEFAULT = ("random", "both-heads", "audio-only", "near-identity")

#: ``mlatr demo-real``'s defaults: the best recipe measured on libraries never trained on (docs/real-sounds.md:
#: the options tried): near-identity heads trained with KCL over English and Apertium's Spanish and Catalan.
DEFAULT_TEXT_ENCODERS = ("use-multilingual", "e5-small")
DEFAULT_HEADS = "near-identity-kcl"
#: Clips per step of ``mlatr demo-real``'s head runs (docs/real-sounds.md: batch size).
DEFAULT_BATCH_SIZE = 256
#: Epochs of ``mlatr demo-real``'s head runs, the best of them on the validation clips kept: on libraries never
#: trained on, 10 epochs score as 60 do, in a sixth of the time (docs/real-sounds.md: the shipped recipe).
DEFAULT_EPOCHS = 10
#: Head pairs ``mlatr demo-real`` trains apart and averages (``DualEncoder(ensemble=N)``): on libraries never
#: trained on, three beat one in R@1 at every seed, with KCL and without (docs/real-sounds.md: the options tried).
DEFAULT_ENSEMBLE = 3


def head_option(name: str, trained: bool = True) -> HeadOption:
    """The head option called ``name`` (``trained``: only one that trains); the one check of a ``--heads`` value."""
    known = [k for k, o in HEAD_OPTIONS.items() if o.trained or not trained]
    if name not in HEAD_OPTIONS:
        raise MlatrError(f"--heads: unknown {name}; known: {', '.join(known)}")
    if name not in known:
        raise MlatrError(f"--heads: {name} is not a trained head option (it trains nothing); known: {', '.join(known)}")
    return HEAD_OPTIONS[name]


def member_seeds(seed: int, members: int) -> list[int]:
    """The seeds of an ensemble's head pairs: ``seed`` itself for a single pair, else ``seed * 1000 + k``."""
    return [seed] if members == 1 else [seed * 1000 + k for k in range(members)]


def default_fold_workers() -> int:
    """Processes that train held-out folds side by side by default: the cores this process may use, at most 8
    (each trains on one thread and holds its own copy of the features)."""
    return max(1, min(8, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1))
