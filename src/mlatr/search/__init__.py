"""Search a sound library in any language: an index of a model's audio embeddings (numpy | FAISS).

Python API::

    from mlatr.search import Index
    index = Index.load("library.idx.npz")            # backend="faiss" for FAISS
    for hit in index.search_text("un chien aboie", lang="fra", k=10):
        print(hit.rank, hit.score, hit.id, hit.path)
    clips, captions = index.search_audio("query.wav", k=5)

``build_index(load_model(checkpoint), manifest, output, add=...)`` writes one (``mlatr index build``).
"""

from mlatr.search.index import BuildReport, Index, build_index
from mlatr.search.search import CaptionHit, Hit, search_audio, search_text, search_vector

__all__ = ["BuildReport", "CaptionHit", "Hit", "Index", "build_index", "search_audio", "search_text",
           "search_vector"]
