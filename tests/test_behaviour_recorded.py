"""Search results, trained weights and evaluation numbers equal those recorded, on any CPU.

``tests/fixtures/behaviour_reference.json`` was written by ``python tests/behaviour_record.py`` (its
``recorded_at`` commit; first before issue 38's reshaping, again with issue 33's ranking and relevance, and
with issue 50's float64 record); a change of the code's shape must reproduce it. The record runs in float64
(``behaviour_record`` says why): on this project's machine, under every kernel choice PyTorch, MKL, oneDNN
and OpenBLAS can be forced to (``ATEN_CPU_CAPABILITY=default|avx2``, ``MKL_ENABLE_INSTRUCTIONS=SSE4_2|AVX2``,
``ONEDNN_MAX_CPU_ISA``, ``OPENBLAS_CORETYPE=Haswell``, ``OMP_NUM_THREADS=1|2``) every number agreed within a
relative 1e-9, so the 1e-5 allowed here is for machines not tried, not slack for a changed behaviour: a
changed loss, ranking or draw moves the numbers far more (the mutations tried are listed in
docs/measured-figures.md). A change meant to alter behaviour (a new ranking, another draw) records the
reference again in the same change, and says what changed.
"""

import json
from pathlib import Path

from behaviour_record import compare, jsonable, record

REFERENCE = Path(__file__).parent / "fixtures" / "behaviour_reference.json"


def test_search_training_and_evaluation_equal_the_recorded_behaviour(tmp_path):
    expected = json.loads(REFERENCE.read_text(encoding="utf-8"))["record"]
    found = jsonable(record(tmp_path))
    differences = compare(found, expected)
    assert not differences, f"{len(differences)} difference(s):\n" + "\n".join(differences[:30])
