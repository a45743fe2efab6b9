"""Which languages a text query may be in, and whether the model needs to be told which one.

A query's language changes its embedding only for text encoders that read it: the SONAR tokenizer puts
a language code before the text, and a small transformer trained with a language embedding adds a
vector per language. The frozen multilingual encoders (USE, e5-small), the other Hugging Face encoders
and a small transformer without a language embedding embed the text alone: for them a language is only
checked (USE has no Catalan), and a query without one gets the same embedding as with any.

So a query may leave its language out exactly when the encoder does not read it. Guessing it instead
was measured and rejected: offline identifiers get about 1 short query in 20 wrong among the languages
mlatr knows (``benchmarks/bench_langid.py``, README), and for the encoders that read the language a
wrong guess silently changes the results.

Each text encoder says so itself (:meth:`mlatr.models.protocols.TextEncoder.query_languages`); this module
is where search and serve read it.
"""

from __future__ import annotations

from mlatr.models.protocols import QueryLanguages, query_languages

__all__ = ["QueryLanguages", "query_languages"]
