"""One default query language at every door: none given. The command line (no --lang), the Python API (lang=None,
the default) and the server (no ?lang=) answer a query the same; a model whose text encoder reads the language
refuses a query without one at each door, rather than guessing English."""

import json
import urllib.parse

import pytest

pytest.importorskip("fastapi", reason="mlatr serve needs the serve extra: pip install 'mlatr[serve]'")

from clitools import run_cli  # noqa: E402
from mlatr.errors import MlatrError  # noqa: E402
from mlatr.search import Index  # noqa: E402
from mlatr.search.analysis import terms  # noqa: E402
from mlatr.search.fusion import RANKS  # noqa: E402
from mlatr.serve.app import create_app  # noqa: E402
from mlatr.serve.live_index import LiveIndex  # noqa: E402
from servetools import build_toy_index, request, running_server, untrained_checkpoint  # noqa: E402

QUERY = "un son aigu double"


def _http(base: str, **params):
    return request(base + "/search?" + urllib.parse.urlencode(params))


def test_no_language_is_the_default_at_every_door(served_toy, capsys):
    _, _, index_path = served_toy
    index = Index.load(index_path)
    python = index.search_text(QUERY, k=8)
    assert [h.id for h in python] == [h.id for h in index.search_text(QUERY, None, 8)]
    cli = run_cli(capsys, "search", index_path, QUERY, "-k", "8", "--json")
    assert cli.code == 0, cli.err
    cli = json.loads(cli.out)
    live = LiveIndex(index_path)
    live.reload()
    with running_server(create_app(live)) as base:
        http = _http(base, q=QUERY, k=8).json()
        for rank in RANKS:  # the route takes the one list of rankings, and no other
            assert _http(base, q=QUERY, k=3, rank=rank).status == 200
        assert _http(base, q=QUERY, rank="bm25").status == 422
    assert cli["lang"] is None and http["lang"] is None
    assert [h["id"] for h in cli["results"]] == [h["id"] for h in http["results"]] == [h.id for h in python]
    assert [h["score"] for h in cli["results"]] == pytest.approx([h.score for h in python])


def test_no_language_finds_keywords_in_every_language():
    """Why no language rather than English: a French query's grammar words are dropped as such (read as English,
    'un' and 'qui' would be keywords that match every French caption holding them)."""
    assert terms("un chien qui aboie", None) == ["chien", "chi", "aboi", "aboie", "ab"]
    assert terms("un chien qui aboie", "eng") == ["un", "chien", "qui", "aboi"]


def test_an_encoder_that_reads_the_language_refuses_a_query_without_one_everywhere(served_toy, tmp_path, capsys):
    from mlatr.data.manifest import Manifest
    from mlatr.models.registry import build_text_encoder

    manifest_path = served_toy[0]
    corpus = [t for c in Manifest.load(manifest_path).clips for texts in c.captions.values() for t in texts if t]
    text = build_text_encoder("small-transformer", corpus=corpus, vocab_size=300, dim=32, num_layers=1, num_heads=2,
                              ff_dim=64, languages=["eng", "fra"])
    path = build_toy_index(manifest_path, untrained_checkpoint(tmp_path / "lang.pt", text), tmp_path / "l.idx.npz")
    with pytest.raises(MlatrError, match="reads the query's language: give one of eng, fra"):
        Index.load(path).search_text(QUERY)
    r = run_cli(capsys, "search", path, QUERY)
    assert r.code == 2 and "--lang: this text encoder reads the query's language: give one of eng, fra" in r.err
    live = LiveIndex(path)
    live.reload()
    with running_server(create_app(live)) as base:
        r = _http(base, q=QUERY)
        assert r.status == 400 and "give one of eng, fra" in r.json()["error"]
        assert _http(base, q=QUERY, lang="fr").status == 200
