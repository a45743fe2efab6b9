"""``mlatr serve``: one process that holds an index and its model and answers search over HTTP.

- :mod:`mlatr.serve.live_index`: the loaded index, its model and the reload / file-watch logic;
- :mod:`mlatr.serve.results`: hits -> the JSON of the API (strict JSON, captions, audio URLs);
- :mod:`mlatr.serve.upload_limit`: refuses request bodies over a size before they are parsed;
- :mod:`mlatr.serve.app`: the FastAPI application (routes, JSON errors) and the web page in ``static/``.

The search itself is :mod:`mlatr.search`'s; this package only puts it behind HTTP.
"""
