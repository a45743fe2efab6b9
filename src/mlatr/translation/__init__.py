"""Machine translation of captions (ATRI §5.1) and its check by back-translation (ATRI Appendix A).

- :mod:`~mlatr.translation.backend`: the interface (``translate_batch``, ``check_pair``);
- one backend per module: :mod:`~mlatr.translation.openai_backend` (OpenAI-compatible chat completions),
  :mod:`~mlatr.translation.hf_backend` (local NLLB / M2M100 / Marian), :mod:`~mlatr.translation.apertium_backend`;
- :mod:`~mlatr.translation.cache`: the persistent cache keyed by (text, source, target, backend, model);
- :mod:`~mlatr.translation.translate`: a manifest's English captions into other languages;
- :mod:`~mlatr.translation.sentence`, :mod:`~mlatr.translation.qa`: back-translation QA (Table 5 layout).
"""

from mlatr.translation.apertium_backend import ApertiumBackend
from mlatr.translation.backend import TranslationBackend, TranslationFailure
from mlatr.translation.cache import TranslationCache
from mlatr.translation.hf_backend import HFBackend
from mlatr.translation.openai_backend import OpenAIBackend
from mlatr.translation.translate import TranslationSummary, Translator, translate_manifest

#: Registry name -> backend class.
BACKENDS: dict[str, type[TranslationBackend]] = {
    "openai": OpenAIBackend,
    "hf": HFBackend,
    "apertium": ApertiumBackend,
}

__all__ = [
    "BACKENDS",
    "ApertiumBackend",
    "HFBackend",
    "OpenAIBackend",
    "TranslationBackend",
    "TranslationCache",
    "TranslationFailure",
    "TranslationSummary",
    "Translator",
    "translate_manifest",
]
