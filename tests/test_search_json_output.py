"""Search answers as strict JSON: a non-finite score is null, a captions ranking of an index without captions is
refused rather than answered with -Infinity."""

from __future__ import annotations

import json

import numpy as np
import pytest

from clitools import assert_user_error, manifest_lines, run_cli
from mlatr.search.evidence import Evidence
from mlatr.search.results import CaptionHit, Hit


def test_json_of_a_captions_ranking_on_an_index_without_captions(served_toy, tmp_path, capsys):
    """Was: --json --rank captions printed -Infinity scores (not JSON)."""
    manifest, ckpt, _ = served_toy
    rows = [json.loads(line) for line in manifest.read_text().splitlines()][:4]
    m = manifest_lines(tmp_path / "m.jsonl", [{"id": r["id"], "audio": str(manifest.parent / r["audio"])}
                                               for r in rows])
    idx = tmp_path / "bare.idx.npz"
    assert run_cli(capsys, "index", "build", "--model", ckpt, "--manifest", m, "-o", idx,
                   "--no-progress").code == 0
    r = run_cli(capsys, "search", idx, "a low tone", "--rank", "captions", "--json")
    assert_user_error(r, "holds none", "audio or hybrid")
    r = run_cli(capsys, "search", idx, "a low tone", "--rank", "hybrid", "--json")
    assert r.code == 0
    out = json.loads(r.out, parse_constant=lambda c: pytest.fail(f"{c} in the JSON"))
    assert out["results"] and all(np.isfinite(h["score"]) for h in out["results"])


def test_hit_json_holds_no_infinity():
    hit = Hit(rank=1, score=float("-inf"), id="a", path="/a.wav", captions=[],
              evidence=[Evidence("caption", np.nan, 1, "t", "eng")])
    assert hit.to_dict()["score"] is None and hit.to_dict()["evidence"][0]["score"] is None
    assert CaptionHit(1, float("nan"), "t", "eng", "a", "/a").to_dict()["score"] is None
    json.dumps(hit.to_dict(), allow_nan=False)
