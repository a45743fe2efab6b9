"""Search results, trained weights and evaluation numbers equal those recorded.

``tests/fixtures/behaviour_reference.json`` was written by ``python tests/behaviour_record.py`` from the
code before issue 38's reshaping, and again with issue 33's ranking and relevance (its ``recorded_at``
commit); a change of the code's shape must reproduce it (numbers within a relative 1e-5: BLAS may sum in
another order elsewhere). A change meant to alter behaviour (a new ranking, another draw) records the
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
