"""An index from frozen-backbone features already computed (what :func:`~mlatr.search.index.build_index`
would write for a model whose backbones are frozen, without decoding the audio a second time)."""

from __future__ import annotations

import numpy as np

from mlatr.audio.io import SAMPLE_RATE
from mlatr.data.manifest import Manifest
from mlatr.inference.loaded_model import LoadedModel
from mlatr.search.index import Index, empty_index, index_meta
from mlatr.training.heads import project


def index_from_features(loaded: LoadedModel, manifest: Manifest, audio_feats: np.ndarray, max_seconds: float,
                        caption_languages: tuple[str, ...] = ("eng",)) -> Index:
    """The index of ``manifest`` for ``loaded`` (saved at ``loaded.path``) from its clips' pooled audio
    backbone features ``[N, D]``: the heads applied, then L2-normalised, as ``encode_audio`` does."""
    model = loaded.model
    arr = manifest.caption_arrays(list(caption_languages))
    text = model.text_encoder.embed_numpy(arr["texts"], list(arr["text_lang"]))
    a, t = project(model, audio_feats, text)
    index = empty_index(model.embed_dim, index_meta(loaded, manifest, SAMPLE_RATE, max_seconds, caption_languages),
                        loaded)
    index.append(manifest.clips, manifest.root, a, arr, t)
    return index
