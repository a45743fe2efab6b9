"""The page's clip routes: waveform peaks against the file's samples, "more like this" against a brute-force
cosine ranking, unknown ids refused."""

import urllib.parse

import numpy as np
import pytest

pytest.importorskip("fastapi", reason="mlatr serve needs the serve extra: pip install 'mlatr[serve]'")

from mlatr.audio.io import load_audio  # noqa: E402
from mlatr.search import Index  # noqa: E402
from mlatr.serve.app import create_app  # noqa: E402
from mlatr.serve.live_index import LiveIndex  # noqa: E402
from servetools import request, running_server  # noqa: E402


def test_waveform_and_more_like_this(served_toy):
    index_path = served_toy[2]
    index = Index.load(index_path)
    live = LiveIndex(index_path)
    live.reload()
    with running_server(create_app(live)) as base:
        clip = index.ids[7]
        w = request(base + "/clips/waveform/" + urllib.parse.quote(clip, safe="") + "?bins=16").json()
        wave = np.abs(load_audio(index.paths[7], int(index.meta["sample_rate"])))
        edges = np.linspace(0, len(wave), 17).astype(int)
        peaks = np.array([wave[a:b].max() for a, b in zip(edges[:-1], edges[1:], strict=True)])
        assert w["peaks"] == pytest.approx(list(peaks / peaks.max()), abs=1e-6)
        assert w["duration"] == pytest.approx(len(wave) / int(index.meta["sample_rate"]))
        sim = request(base + "/clips/similar/" + urllib.parse.quote(clip, safe="") + "?k=5").json()
        cos = index.embeddings @ index.embeddings[7]
        order = [i for i in sorted(range(len(cos)), key=lambda i: (-cos[i], i)) if i != 7][:5]
        assert [r["id"] for r in sim["results"]] == [index.ids[i] for i in order]
        assert [r["rank"] for r in sim["results"]] == [1, 2, 3, 4, 5]
        cap = index.caption_embeddings @ index.embeddings[7]
        assert sim["captions"][0]["text"] == index.caption_text[int(np.argmax(cap))]
        for path in ("/clips/similar/nope", "/clips/waveform/nope"):
            r = request(base + path)
            assert r.status == 404 and "no clip 'nope'" in r.json()["error"]
        assert request(base + "/clips/waveform/" + clip + "?bins=2").status == 422
        assert request(base + "/docs").status == 200 and request(base + "/docs-assets/swagger-ui.css").status == 200
        # both routes are described in the API schema /docs shows, with the fields they answer
        schema = request(base + "/openapi.json").json()
        for path, name, body in (("/clips/similar/{clip_id}", "SimilarResponse", sim),
                                 ("/clips/waveform/{clip_id}", "Waveform", w)):
            ok = schema["paths"][path]["get"]["responses"]["200"]["content"]["application/json"]["schema"]
            assert ok == {"$ref": f"#/components/schemas/{name}"}
            assert set(schema["components"]["schemas"][name]["properties"]) == set(body)
        item = schema["components"]["schemas"]["SimilarResponse"]["properties"]["results"]["items"]
        assert item == {"$ref": "#/components/schemas/ClipResult"}
