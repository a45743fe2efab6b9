import argparse
import logging
import os
import re
import socket
import sys

from mlatr.commands._arg_types import non_negative_float, positive_float, positive_int, tcp_port
from mlatr.commands._model_io import add_model_for_index_options, model_for_index
from mlatr.errors import MissingFileError, MlatrError
from mlatr.serve.exposure import LOOPBACK_HOSTS, is_loopback
from mlatr.serve.workers import on_reload_signal, supervise, tell_siblings
from mlatr.terminal_text import shown_lines

#: The environment variable that holds the server's bearer token (``--token`` overrides it).
TOKEN_ENV = "MLATR_TOKEN"
#: Seconds a client has to send its request headers, then its body (slow clients are disconnected).
HEADER_SECONDS, BODY_SECONDS = 10.0, 120.0

HELP = """Serve an index: a web page and a JSON API to search it by text in any language or by sound.

Loads the index and its model once, then answers until interrupted (Ctrl-C):
  /                  the web page: a query box, a language picker, results you can play, drop a sound
  /search?q=&lang=&k=         text -> clips;  POST /search/audio (multipart field "file") sound -> clips
  /audio/ID          an indexed clip's file;  /health;  POST /reload;  /openapi.json (the API schema)
The query language may be left out when the index's text encoder does not read it (USE, e5-small,
the small transformer without a language embedding); otherwise it is required (GET /health says which).
The index file is watched (--watch): `mlatr index build --add` on it is picked up without a restart;
POST /reload reads it at once. --watch-folder DIR keeps the index in sync with a folder while serving (as
mlatr index sync DIR INDEX does, every --sync-every seconds when the folder's listing changed: new files
encoded, deleted ones removed, renamed and moved ones followed; the folder is an allowed root for /audio). An
index that cannot be read at start-up is reported and answered with
503 errors until the file is fixed. Binds 127.0.0.1 (this machine only) unless --host says otherwise;
a non-loopback address needs --allow-host (the names clients use) and --token / $MLATR_TOKEN (or
--no-auth). Only clip files inside the library (or --allow-root) are served; cross-site POSTs are
refused; a client gets 10 s for its request headers and 120 s for its body. --workers N answers with N
processes on the same port (each loads the model; one per free core for throughput).

Examples:
  mlatr serve runs/demo-real/sounds.idx                # then open http://127.0.0.1:8000/
  mlatr serve lib.idx.npz --host 0.0.0.0 --port 8080   # the whole network (a team)
  mlatr serve lib.idx --workers 4                      # 4 processes on one port (for 4 or more free cores)
  curl 'http://127.0.0.1:8000/search?q=un+chien+aboie&lang=fra&k=5'
  curl -F file=@query.wav 'http://127.0.0.1:8000/search/audio?k=5'
"""


def add_arguments(parser):
    parser.add_argument("index", metavar="INDEX", help="index written by mlatr index build")
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: this machine)")
    parser.add_argument("--port", type=tcp_port, default=8000, help="port (default 8000; 0 picks a free one)")
    parser.add_argument("--backend", choices=["auto", "numpy", "faiss"], default="auto",
                        help="auto: the index's approximate structures where it has them, else exact; numpy / "
                             "faiss: exact")
    add_model_for_index_options(parser)
    parser.add_argument("--watch", type=non_negative_float, default=2.0, metavar="SECONDS",
                        help="poll the index file every SECONDS and reload it when it changes (0: off; default 2)")
    parser.add_argument("--watch-folder", default=None, metavar="DIR",
                        help="keep the index in sync with this folder while serving (mlatr index sync)")
    parser.add_argument("--sync-every", type=positive_float, default=10.0, metavar="SECONDS",
                        help="how often the folder's listing is compared (default 10; a sync runs when it changed)")
    parser.add_argument("--max-k", type=positive_int, default=100, help="most results one request may ask for")
    parser.add_argument("--max-upload-mb", type=positive_float, default=20.0,
                        help="largest sound upload (MiB, default 20)")
    parser.add_argument("--threads", type=positive_int, default=1,
                        help="math threads (BLAS, OpenMP, torch) per query (default 1: a query's products are small, "
                             "and extra threads wait on each other on a busy CPU; see README)")
    parser.add_argument("--allow-root", action="append", default=[], metavar="DIR",
                        help="serve clip files only under DIR (repeatable; default: the directories of the clips the "
                             "index recorded at start-up, symlinks resolved)")
    parser.add_argument("--allow-host", action="append", default=[], metavar="NAME",
                        help="a Host name the server answers to (repeatable; '*': any). Bound to a loopback "
                             "address it answers to localhost, 127.0.0.1 and ::1 besides; bound elsewhere, to these "
                             "names only (required there)")
    parser.add_argument("--token", default=os.environ.get(TOKEN_ENV),
                        help=f"require this bearer token on every request (default: ${TOKEN_ENV}); a browser "
                             "opens /?token=TOKEN once. Required when binding a non-loopback address")
    parser.add_argument("--no-auth", action="store_true",
                        help="bind a non-loopback address without a token (anyone who reaches it can search and "
                             "play the library)")
    parser.add_argument("--no-access-log", action="store_true", help="do not log every request")
    parser.add_argument("--workers", type=positive_int, default=1,
                        help="server processes answering on the same port (default 1); each loads the model, the "
                             "index's vectors are shared through the page cache: one per free core for throughput")


#: What a bearer token may hold (RFC 6750's token characters): it travels in a header, a cookie and a URL, so a
#: space, a quote, ``;`` or a line break would end it early or add to the header (a cookie attribute, a header).
TOKEN_PATTERN = re.compile(r"[A-Za-z0-9._~+/=-]{1,4096}")


def check_token(token: str | None) -> None:
    """Refuse a token a client could never send as it is (see :data:`TOKEN_PATTERN`); its value is not shown."""
    if token and not TOKEN_PATTERN.fullmatch(token):
        raise MlatrError(f"--token / ${TOKEN_ENV}: use at most 4,096 ASCII letters, digits and . _ ~ + / = - (the "
                         "token is sent in a header, a cookie and a URL; e.g. python -c 'import secrets; "
                         "print(secrets.token_urlsafe())')")


def exposure(host: str, allow_host: list[str], token: str | None, no_auth: bool) -> list[str]:
    """The Host names the server answers to; refuses a token a client cannot send, a non-loopback bind without a
    token (or ``--no-auth``) or without ``--allow-host``."""
    check_token(token)
    if is_loopback(host):
        return [*LOOPBACK_HOSTS, *allow_host]
    if not token and not no_auth:
        raise MlatrError(f"--host {host} exposes the library beyond this machine: give --token (or ${TOKEN_ENV}), "
                         "or --no-auth to serve it without one")
    if not allow_host:
        raise MlatrError(f"--host {host}: give the names clients will use with --allow-host (e.g. --allow-host "
                         "search.example.org; '*' answers to any)")
    return list(allow_host)


def limit_math_threads(n: int) -> None:
    """Every later numpy / USE / FAISS (BLAS, OpenMP) and torch call in this process uses ``n`` threads."""
    import torch  # torch's import time: not paid by every command's parser
    from threadpoolctl import threadpool_limits  # optional extra (mlatr[serve])

    torch.set_num_threads(n)
    threadpool_limits(n)


def bind_socket(host: str, port: int):
    """A listening TCP socket on ``host:port`` (IPv4 or IPv6; port 0: a free one)."""
    try:
        family, kind, proto, _, addr = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
        sock = socket.socket(family, kind, proto)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(addr)
        sock.listen(128)
    except OSError as exc:
        raise MlatrError(f"cannot listen on {host}:{port} ({exc})") from exc
    return sock


def run(args) -> int:
    from mlatr.search.storage_choice import open_storage  # numpy and scipy: not paid by every command's parser

    _serve_imports()
    storage = open_storage(args.index)
    if storage.path is not None and not storage.path.exists():
        raise MissingFileError(args.index, "an index: the folder or .npz file mlatr index build writes")
    exposure(args.host, args.allow_host, args.token, args.no_auth)
    if args.workers > 1 and args.watch <= 0:
        raise MlatrError("--workers needs the index file watch (--watch > 0): each worker reloads by it")
    if args.watch_folder is not None and not os.path.isdir(args.watch_folder):
        raise MlatrError(f"--watch-folder {args.watch_folder}: not a folder")
    if args.workers > 1 and not storage.opens_in_several_processes:
        raise MlatrError(f"--workers {args.workers}: a milvus-lite file ({args.index}) opens in one process only; "
                         "serve it with one worker, or from a Milvus server (milvus://HOST:PORT/COLLECTION)")
    sock = bind_socket(args.host, args.port)
    if args.workers == 1:
        return serve(args, sock)
    options = {k: v for k, v in vars(args).items() if not k.startswith("_")}  # the parser stays here
    return supervise(serve_worker, options, sock, args.workers, lambda: announce(sock, args.workers))


def _serve_imports() -> None:
    """The optional extra's packages, or an error saying how to install them."""
    try:
        import fastapi  # noqa: F401  (mlatr.serve.app)
        import threadpoolctl  # noqa: F401  (limit_math_threads)
        import uvicorn  # noqa: F401
    except ImportError as exc:
        raise MlatrError(f"mlatr serve needs fastapi, uvicorn, python-multipart and threadpoolctl ({exc}): "
                         "pip install 'mlatr[serve]'") from exc


def announce(sock, workers: int = 1) -> None:
    host, port = sock.getsockname()[:2]
    shown = f"[{host}]" if ":" in host else host
    more = f", {workers} worker processes" if workers > 1 else ""
    print(f"serving at http://{shown}:{port}/  (Ctrl-C stops{more})", flush=True)


def serve_worker(options: dict, sock, worker: int, ready) -> None:
    """One process of ``--workers``: :func:`serve` on the supervisor's socket (:mod:`mlatr.serve.workers`)."""
    try:
        code = serve(argparse.Namespace(**options), sock, worker, ready)
    except MlatrError as exc:
        print(f"mlatr: error: worker {worker}: {shown_lines(exc)}", file=sys.stderr, flush=True)
        code = 2
    sys.exit(code)


def serve(args, sock, worker: int | None = None, ready=None) -> int:
    """Load the index and its model, then answer on ``sock`` until stopped; as worker ``worker`` of
    ``--workers``, put its number on ``ready`` once loaded instead of announcing the address."""
    import uvicorn  # optional extra (mlatr[serve]; run checked it)

    from mlatr.inference.model_identity import OtherModelError  # loads torch: not paid by every command's parser
    from mlatr.serve.app import Limits, create_app  # optional extra (mlatr[serve]: fastapi)
    from mlatr.serve.live_index import LiveIndex  # optional extra (mlatr[serve]: fastapi)
    from mlatr.serve.slow_clients import deadline_protocol  # optional extra (mlatr[serve]: uvicorn)

    hosts = exposure(args.host, args.allow_host, args.token, args.no_auth)
    limit_math_threads(args.threads)
    tag = "" if worker is None else f"worker {worker}: "
    log = logging.getLogger("mlatr.serve")  # reloads by the file watch, and their failures
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(f"%(levelname)s:     mlatr serve: {tag}%(message)s"))
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    live = LiveIndex(args.index, backend=args.backend, model=model_for_index(args),
                     allow_other_model=args.allow_other_model)
    try:
        snap = live.reload()
        print(f"{tag}loaded {args.index}: {len(snap.index)} clips, text encoder "
              f"{snap.index.meta['model_config']['text_encoder']['name']}", flush=True)
    except OtherModelError:  # --model is not the index's: the operator's mistake, not a file to wait for
        raise
    except MlatrError as exc:
        print(f"mlatr serve: {tag}cannot load {args.index}: {shown_lines(exc)}\n  serving 503 errors until the file "
              "is fixed (it is watched; POST /reload reads it at once)", file=sys.stderr, flush=True)
    limit_math_threads(args.threads)  # again: the model's libraries (USE, FAISS) may have started their own pools
    limits = Limits(max_k=args.max_k, max_upload_bytes=int(args.max_upload_mb * 2**20))
    roots = list(args.allow_root) + ([args.watch_folder] if args.watch_folder else [])
    folder_watch = None
    if args.watch_folder and not worker:  # one process syncs (the first worker); the others reload by the watch
        from mlatr.serve.folder_watch import FolderWatch  # loads torch (the sync): only when asked for

        folder_watch = FolderWatch(live, args.watch_folder, args.sync_every)
        folder_watch.start()
    app = create_app(live, limits, watch_seconds=args.watch, allow_roots=roots, allowed_hosts=hosts,
                     token=args.token or None, worker=worker, after_reload=None if worker is None else tell_siblings)
    config = uvicorn.Config(app, log_level="info", access_log=not args.no_access_log, timeout_graceful_shutdown=5,
                            http=deadline_protocol(HEADER_SECONDS, BODY_SECONDS), timeout_keep_alive=5,
                            limit_concurrency=256)
    if worker is None:
        announce(sock)
    else:
        on_reload_signal(live.reload_if_changed)
        ready.put(worker)
    try:
        uvicorn.Server(config).run(sockets=[sock])
    except KeyboardInterrupt:  # uvicorn shut down cleanly, then passes the Ctrl-C on: a normal stop
        pass
    finally:
        if folder_watch is not None:
            folder_watch.stop()
    return 0
