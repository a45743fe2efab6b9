"""An index from frozen-backbone features already computed (what :func:`~mlatr.search.build.build_index`
would write for a model whose backbones are frozen, without decoding the audio a second time)."""

from __future__ import annotations

import numpy as np

from mlatr.audio.io import SAMPLE_RATE
from mlatr.data.manifest import Manifest
from mlatr.inference.encoded_split import project
from mlatr.inference.loaded_model import LoadedModel
from mlatr.search.columns import CaptionColumns, ClipColumns, check_vectors
from mlatr.search.index import Index
from mlatr.search.library_encoding import index_meta


def index_from_features(loaded: LoadedModel, manifest: Manifest, audio_feats: np.ndarray, max_seconds: float,
                        caption_languages: tuple[str, ...] = ("eng",)) -> Index:
    """The index of ``manifest`` for ``loaded`` (saved at ``loaded.path``) from its clips' pooled audio
    backbone features ``[N, D]``: the heads applied, then L2-normalised, as ``encode_audio`` does."""
    model = loaded.model
    arr = manifest.caption_arrays(list(caption_languages))
    text = model.text_encoder.embed_numpy(arr["texts"], list(arr["text_lang"]))
    a, t = project(model, audio_feats, text)
    clips, captions = ClipColumns.of_clips(manifest.clips, manifest.root, a), CaptionColumns.of_arrays(arr, t)
    check_vectors(clips, captions, "index: ", unit_captions=False)
    return Index(clips, captions, index_meta(loaded, manifest, SAMPLE_RATE, max_seconds, caption_languages),
                 _model=loaded)
