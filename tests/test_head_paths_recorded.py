"""The trained heads and evaluation numbers of ``mlatr demo-real``, ``mlatr experiment unseen-library`` and ``mlatr
experiment learning-curve`` equal those recorded, on any CPU.

``tests/fixtures/head_paths_reference.json`` was written by ``python tests/head_paths_record.py`` (its
``recorded_at`` commit: before issue 49 gave the three commands one head-training path); a change of the code's
shape must reproduce it. The record runs in float64 (``tests/behaviour_record.py`` says why), so the 1e-5
allowed here is for machines not tried, not slack for a changed behaviour. A change meant to alter what the heads
train on or how records the reference again in the same change, and says what changed.
"""

import json
from pathlib import Path

from behaviour_record import compare
from head_paths_record import record

REFERENCE = Path(__file__).parent / "fixtures" / "head_paths_reference.json"


def test_the_three_head_training_commands_give_the_recorded_weights_and_numbers(tmp_path, monkeypatch):
    expected = json.loads(REFERENCE.read_text(encoding="utf-8"))["record"]
    differences = compare(record(tmp_path, monkeypatch), expected)
    assert not differences, f"{len(differences)} difference(s):\n" + "\n".join(differences[:30])
