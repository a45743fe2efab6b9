"""The synthetic multilingual benchmark: procedural sound scenes captioned by hand-written grammars.

``build_synthetic_benchmark(out_dir, ...)`` writes ``audio/*.wav`` and ``manifest.jsonl``; see
:mod:`.build`. Parts: :mod:`.events` (sound generators), :mod:`.scene` (scene descriptions),
:mod:`.render` (scene -> waveform), :mod:`.languages` (grammars), :mod:`.captions` (aligned captions),
:mod:`.noise` (translation-error-like caption noise).
"""

from mlatr.data.synth.build import build_synthetic_benchmark, clip_audio, clip_record, clip_scene

__all__ = ["build_synthetic_benchmark", "clip_audio", "clip_record", "clip_scene"]
