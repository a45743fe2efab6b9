"""Audio to vectors gives what it gave before the inference audio path was reshaped (issue 49 item 4, issue 48).

``tests/fixtures/audio_path_reference.npz`` was written by ``python tests/audio_path_record.py`` (its
``recorded_at`` commit: the path through a fake manifest and double padding); every door (paths, arrays,
shards, ``mlatr embed``, ``index build``, ``Index.build``, a sound query, ``encode_manifest`` with frames, the
frozen-feature cache), for a toy model and aiSFX, must give the same vectors: cosine >= 0.99999 per row, a
tolerance of float32 sums taken in another order (another CPU, another batch), not bit equality.
"""

from __future__ import annotations

import numpy as np
import pytest

from audio_path_record import REFERENCE, record

#: The least cosine between a recorded vector and today's (float32 sums in another order stay far above it).
MIN_COSINE = 0.99999


def row_cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Cosine of each row pair; two zero rows (a frame's padding) count as equal (1)."""
    a, b = a.astype(np.float64), b.astype(np.float64)
    na, nb = np.linalg.norm(a, axis=1), np.linalg.norm(b, axis=1)
    both_zero = (na == 0) & (nb == 0)
    cos = (a * b).sum(axis=1) / np.maximum(na * nb, 1e-30)
    return np.where(both_zero, 1.0, cos)


def differences(found: dict[str, np.ndarray], expected: dict[str, np.ndarray]) -> list[str]:
    """What differs: a missing door, a shape, a row below :data:`MIN_COSINE`, a score or mask off."""
    out = []
    for key, want in expected.items():
        got = found.get(key)
        if got is None or got.shape != want.shape:
            out.append(f"{key}: shape {None if got is None else got.shape} != {want.shape}")
        elif want.ndim == 1 or key.endswith("_mask"):
            if not np.allclose(got, want, rtol=0, atol=1e-5):
                out.append(f"{key}: largest difference {np.abs(got - want).max():.2e}")
        else:
            cos = row_cosines(got.reshape(len(got), -1), want.reshape(len(want), -1))
            if cos.min() < MIN_COSINE:
                out.append(f"{key}: row {int(cos.argmin())} cosine {cos.min():.7f} < {MIN_COSINE}")
    return out


def test_row_cosines_see_a_change():
    a = np.eye(3, dtype=np.float32)
    assert row_cosines(a, a).min() == 1.0
    b = a.copy()
    b[1, 2] = 0.01  # a hundredth off: cosine 0.99995
    assert differences({"m/x": b}, {"m/x": a}) and not differences({"m/x": a}, {"m/x": a})


@pytest.mark.parametrize("model", ["toy", "aisfx"])
def test_every_door_gives_the_recorded_vectors(model, tmp_path):
    if model == "aisfx":
        from mlatr.errors import MlatrError
        from mlatr.models.aisfx import find_aisfx_checkpoint

        try:
            find_aisfx_checkpoint()
        except MlatrError:
            pytest.skip("aisfx checkpoint not installed (pip install --no-deps aisfx==0.1.2)")
    with np.load(REFERENCE) as z:
        expected = {k: z[k] for k in z.files if k.startswith(f"{model}/")}
    assert len(expected) >= 15
    found = record(tmp_path, (model,))
    problems = differences(found, expected)
    assert not problems, "\n".join(problems)
