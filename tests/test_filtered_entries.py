"""One filter and one query syntax through every entry (issue 46): the CLI (``mlatr search --where``), Python
(``Index.search_text(where=)``, ``search_audio(where=)``) and HTTP (``GET /search?where=``, ``POST
/search/audio?where=``) give the same numbers, equal to the unfiltered ranking restricted to the allowed clips;
what the text encoder reads is the query without its marks; a bad filter or query is the same clear error in each;
a silent clip is not in the top 10 for "dog" unless asked."""

from __future__ import annotations

import json
import urllib.parse

import numpy as np
import pytest
import soundfile as sf

from clitools import assert_user_error, run_cli
from mlatr.file_state import file_sha256
from mlatr.inference import load_model
from mlatr.models.registry import build_text_encoder
from mlatr.search import Index
from mlatr.search.query import TextQuery
from servetools import request, running_server, untrained_checkpoint, upload
from test_filtered_search import FILTERS, allowed_ids, make_library
from toydata import stamp_test_calibration

WHERE = "library=castle or keywords has door"


@pytest.fixture(scope="module")
def library_with_model(tmp_path_factory):
    """An index folder of 60 clips (vectors of :func:`make_library`, one silent and captioned "a dog barking": the
    id returned) whose model is an untrained tiny one: it encodes the queries, the same in every entry."""
    root = tmp_path_factory.mktemp("entries")
    clips, captions = make_library(60, seed=9)
    text = build_text_encoder("small-transformer", corpus=list(captions["text"]) + ["a dog barking"], vocab_size=300,
                              dim=32, num_layers=1, num_heads=2, ff_dim=64)
    ckpt = stamp_test_calibration(untrained_checkpoint(root / "model.pt", text))  # relevance compared too
    facets = [dict(f, silent=False) if f else None for f in clips["facets"]]
    dog = int(captions.clip[0])
    facets[dog] = {"duration": 2.0, "channels": 1, "format": "wav", "library": "castle", "silent": True, "keywords": []}
    clips.set("facets", facets)
    texts = list(captions["text"])
    for j in np.flatnonzero(captions.clip == dog).tolist():
        texts[j] = "a dog barking"
    captions.set("text", texts)
    said = load_model(ckpt).embed_text("a dog barking", "eng")[0]  # what the model makes of it: its sound and caption
    embeddings = np.array(clips.embeddings)
    embeddings[dog] = said
    clips.set("embeddings", embeddings)
    caption_embeddings = np.array(captions.embeddings)
    caption_embeddings[captions.clip == dog] = said
    captions.set("embeddings", caption_embeddings)
    meta = {"checkpoint": {"path": str(ckpt), "sha256": file_sha256(ckpt)}, "sample_rate": 16000, "max_seconds": 1.0,
            "caption_languages": ["eng"]}
    path = root / "lib.idx"
    Index(clips, captions, meta).save(path)
    wav = root / "query.wav"
    t = np.arange(16000) / 16000
    sf.write(wav, (0.3 * np.sin(2 * np.pi * 440 * t)).astype(np.float32), 16000)
    return path, wav, f"c{dog}"


def _rows(hits) -> list[tuple]:
    return [(h["id"], h["score"], h["relevance"]) for h in hits]


def _python(results) -> list[tuple]:
    return [(h.id, h.score, h.relevance) for h in results]


def same(a: list[tuple], b: list[tuple]) -> bool:
    """The same ids in the same order, the same scores and relevance (JSON's round trip of a float)."""
    return [x[0] for x in a] == [x[0] for x in b] and np.allclose([x[1:] for x in a], [x[1:] for x in b],
                                                                  rtol=1e-9, atol=1e-12)


def test_cli_python_and_http_give_the_same_filtered_numbers(library_with_model, capsys):
    pytest.importorskip("fastapi")  # the serve extra
    from mlatr.serve.app import create_app
    from mlatr.serve.live_index import LiveIndex

    path, wav, dog = library_with_model
    index = Index.load(path)
    text = '"dog bark" OR rain -glass'
    allowed = allowed_ids(index, WHERE, include_silent=False)
    python = index.search_text(text, "eng", 8, where=WHERE)
    vec = index.embed_queries([TextQuery(text, "eng")])
    assert np.allclose(vec, index.embed_queries([TextQuery("dog bark rain", "eng")]))  # the marks are not read
    every = index.rank_texts(vec, [TextQuery(text, "eng", 60, include_silent=True)])[0]  # syntax, no filter
    assert _python(python) == [(h.id, h.score, h.relevance) for h in every if h.id in allowed][:8]
    r = run_cli(capsys, "search", path, text, "-k", "8", "--where", WHERE, "--json")
    assert r.code == 0, r.err
    cli = json.loads(r.out)
    assert cli["where"] == WHERE and same(_rows(cli["results"]), _python(python))
    assert cli["relevance"] == pytest.approx(python.relevance)
    sound = index.search_audio(wav, 5, where="format in (wav, flac)")
    sound_allowed = allowed_ids(index, "format in (wav, flac)")
    vec = index.embed_sound(index.query_waveform(wav))
    rows = sorted(sound_allowed, key=lambda c: -float(np.asarray(index.embeddings)[int(c[1:])] @ vec))[:5]
    assert [h.id for h in sound] == rows
    r = run_cli(capsys, "search", path, "--audio", wav, "-k", "5", "--where", "format in (wav, flac)", "--json")
    assert r.code == 0, r.err
    assert same(_rows(json.loads(r.out)["results"]), _python(sound))
    seed = sorted(sound_allowed)[0]  # "more like this" among the allowed clips, the seed clip left out
    seed_row = index.ids.index(seed)
    like = index.search_similar(seed_row, 4, where="format in (wav, flac)")
    stored = np.asarray(index.embeddings)
    near = sorted(sound_allowed - {seed}, key=lambda c: -float(stored[int(c[1:])] @ stored[seed_row]))[:4]
    assert [h.id for h in like] == near and {c.id for c in like.caption_hits} <= sound_allowed
    r = run_cli(capsys, "search", path, "--like", seed, "-k", "4", "--where", "format in (wav, flac)", "--json")
    assert r.code == 0, r.err
    cli = json.loads(r.out)
    assert cli["like"] == seed and same(_rows(cli["results"]), _python(like))
    assert [c["id"] for c in cli["captions"]] == [c.id for c in like.caption_hits]
    assert_user_error(run_cli(capsys, "search", path, "--like", "no-such-clip"), "no clip 'no-such-clip'")
    assert_user_error(run_cli(capsys, "search", path, "dog", "--like", seed), "one of a text QUERY")
    live = LiveIndex(path)
    live.reload()
    with running_server(create_app(live)) as base:
        body = request(base + "/search?" + urllib.parse.urlencode({"q": text, "lang": "eng", "k": 8,
                                                                   "where": WHERE})).json()
        assert same(_rows(body["results"]), _python(python))
        assert body["relevance"] == pytest.approx(python.relevance)
        got = upload(base + "/search/audio?" + urllib.parse.urlencode({"k": 5, "where": "format in (wav, flac)"}),
                     "q.wav", wav.read_bytes()).json()
        assert same(_rows(got["results"]), _python(sound))
        assert {c["id"] for c in got["captions"]} <= sound_allowed
        got = request(base + f"/clips/similar/{seed}?" + urllib.parse.urlencode(
            {"k": 4, "where": "format in (wav, flac)"})).json()
        assert same(_rows(got["results"]), _python(like))
        bad = request(base + f"/clips/similar/{seed}?where=keywords%3Ddoor")
        assert bad.status == 400 and "keywords is a list" in bad.json()["error"]
        bad = request(base + "/search?" + urllib.parse.urlencode({"q": "dog", "where": "chanels=1"}))
        assert bad.status == 400 and "position 1" in bad.json()["error"] and "channels" in bad.json()["error"]
        bad = upload(base + "/search/audio?where=duration%3C", "q.wav", wav.read_bytes())
        assert bad.status == 400 and "expected a value for duration" in bad.json()["error"]
        bad = request(base + "/search?" + urllib.parse.urlencode({"q": "dog NOT"}))
        assert bad.status == 400 and "query: position 5: NOT needs a word" in bad.json()["error"]
        for name, where in (("silent", None), ("included", "silent or duration>0")):
            params = {"q": "a dog barking", "k": 10, **({"where": where} if where else {})}
            ids = [x["id"] for x in request(base + "/search?" + urllib.parse.urlencode(params)).json()["results"]]
            assert (dog in ids) == (name == "included"), name
        params = {"q": "a dog barking", "k": 10, "include_silent": "true"}
        assert request(base + "/search?" + urllib.parse.urlencode(params)).json()["results"][0]["id"] == dog


def test_a_silent_file_is_not_in_the_top_10_for_dog_in_cli_and_python(library_with_model, capsys):
    path, _, dog = library_with_model
    index = Index.load(path)
    asked = index.search_text("a dog barking", "eng", 10, include_silent=True)
    assert asked[0].id == dog  # its caption is the query: first when silence is asked for
    assert dog not in [h.id for h in index.search_text("a dog barking", "eng", 10)]
    assert dog not in [h.id for h in index.search_text("dog", "eng", 10)]
    r = run_cli(capsys, "search", path, "a dog barking", "--json")
    assert dog not in [x["id"] for x in json.loads(r.out)["results"]]
    r = run_cli(capsys, "search", path, "a dog barking", "--json", "--include-silent")
    assert json.loads(r.out)["results"][0]["id"] == dog
    r = run_cli(capsys, "search", path, "dog", "--where", "duration<")
    assert_user_error(r, "where: position 10", "expected a value for duration")
    r = run_cli(capsys, "search", path, "--audio", path / "index.json", "--where", "silnt")
    assert_user_error(r, "unknown field 'silnt'", "did you mean silent")
    r = run_cli(capsys, "search", path, "--audio", path / "index.json", "--include-silent")
    assert_user_error(r, "--include-silent is for a text query")
    with pytest.raises(Exception, match="keywords is a list"):
        index.search_text("dog", where="keywords=door")


def test_every_documented_filter_runs_through_python(library_with_model):
    path, _, dog = library_with_model
    index = Index.load(path)
    for where, allows in FILTERS.items():
        found = index.search_text("rain", "eng", 60, where=where, include_silent=True)
        assert {h.id for h in found} == {f"c{i}" for i, f in enumerate(index.clip_columns["facets"]) if allows(f)}
