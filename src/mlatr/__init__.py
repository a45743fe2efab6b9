"""mlatr: multilingual audio-text retrieval.

Train an audio encoder and a multilingual text encoder into one embedding space, measure how well
and how consistently across languages they retrieve, and search a sound library in any language.
"""

__version__ = "0.1.0"
