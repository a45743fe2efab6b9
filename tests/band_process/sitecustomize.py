"""The band tower (tests/band_model.py) as the audio side of every ``mlatr`` process started with this folder first
on ``PYTHONPATH``: what ``monkeypatch.setattr(DualEncoder, "encode_audio", band_tower)`` does in one process, for
tests that run the CLI as a user does, one process per command (tests/test_sound_library_folder.py).

Each call appends the number of waveforms it encodes to the file ``$BAND_TOWER_LOG`` (when set), one line per call,
so a test counts what a command encoded without reading the command's own report.
Index build's worker processes encode with the model they are sent, not with this class's method: give
``--workers 1``.
"""

import os

from band_model import band_tower
from mlatr.models.dual_encoder import DualEncoder

_LOG = os.environ.get("BAND_TOWER_LOG")


def _counted_band_tower(self, waveform, lengths=None):
    if _LOG:
        with open(_LOG, "a", encoding="utf-8") as log:
            log.write(f"{int(waveform.shape[0])}\n")
    return band_tower(self, waveform, lengths)


DualEncoder.encode_audio = _counted_band_tower
