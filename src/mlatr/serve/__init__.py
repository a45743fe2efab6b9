"""``mlatr serve``: one process that holds an index and its model and answers search over HTTP.

- :mod:`mlatr.serve.live_index`: the loaded index, its model and the reload / file-watch logic;
- :mod:`mlatr.serve.results`: hits -> the JSON of the API (strict JSON, captions, audio URLs);
- :mod:`mlatr.serve.request_limits`, :mod:`mlatr.serve.schemas`, :mod:`mlatr.serve.api_errors`: what a request
  may ask and send (its body held to its size before it is parsed), the JSON shapes, the JSON error bodies;
- :mod:`mlatr.serve.search_routes`, :mod:`mlatr.serve.clip_routes`, :mod:`mlatr.serve.status_routes`: the
  routes by group (searches; the page and clip audio; health and reload);
- :mod:`mlatr.serve.app`: ``create_app`` puts them together (the web page is in ``static/``).

The search itself is :mod:`mlatr.search`'s; this package only puts it behind HTTP.
"""
