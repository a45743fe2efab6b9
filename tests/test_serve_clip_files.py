"""GET /audio/{id} serves only regular files inside the library roots: symlinks out of
the library, edited recorded paths, ``..`` forms and files swapped after start all answer 404."""

import os
import shutil
from pathlib import Path

import pytest

pytest.importorskip("fastapi", reason="mlatr serve needs the serve extra: pip install 'mlatr[serve]'")

from mlatr.search import Index  # noqa: E402
from mlatr.serve.app import create_app  # noqa: E402
from mlatr.serve.clip_files import confined_file, library_roots, recorded_as_built  # noqa: E402
from mlatr.serve.live_index import LiveIndex  # noqa: E402
from servetools import request, running_server  # noqa: E402


@pytest.fixture()
def library(served_toy, tmp_path):
    """An index over a copy of the toy library in ``tmp_path/lib`` (clips 0-7), a secret file outside it."""
    index = Index.load(served_toy[2])
    lib = tmp_path / "lib"
    lib.mkdir()
    paths = []
    for p in index.paths[:8]:
        shutil.copy(p, lib / Path(p).name)
        paths.append(str((lib / Path(p).name).resolve()))
    index.paths = paths + index.paths[8:]
    secret = tmp_path / "secret.txt"
    secret.write_text("not for the web\n")
    return index, lib.resolve(), secret.resolve(), tmp_path


def serve(index, path, allow_roots=()):
    index.save(path)
    live = LiveIndex(path)
    live.reload()
    return running_server(create_app(live, allow_roots=allow_roots))


def test_path_forms_and_roots_unit(tmp_path):
    for good in ["/a/b.wav", "/lib/sub/x.flac"]:
        assert recorded_as_built(good)
    for bad in ["a/b.wav", "/lib/../etc/passwd", "/lib/./x.wav", "//lib/x.wav", "/lib//x.wav", "/lib/x/", ""]:
        assert not recorded_as_built(bad), bad
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "c").mkdir()
    real = tmp_path.resolve()
    roots = library_roots([str(real / "a/x.wav"), str(real / "a/b/y.wav"), str(real / "c/z.wav"),
                           str(real / "a/../etc/passwd"), "rel/w.wav"])
    assert roots == [real / "a", real / "c"]  # the subdirectory folds into its parent; edited forms add none
    f = real / "a" / "x.wav"
    f.write_bytes(b"RIFF")
    assert confined_file(str(f), roots) == f
    assert confined_file(str(real / "a" / "b"), roots) is None  # a directory
    assert confined_file(str(real / "a" / "gone.wav"), roots) is None
    assert confined_file(str(real / "a" / "b" / ".." / "x.wav"), roots) is None  # edited form, even inside


def test_symlinks_and_edited_paths_answer_404(library):
    index, lib, secret, tmp = library
    (lib / "evil.wav").symlink_to("/etc/passwd")
    (lib / "evil2.wav").symlink_to(secret)
    (lib / "dirlink").symlink_to(tmp)  # a symlinked directory: lib/dirlink/secret.txt is outside
    os.mkfifo(lib / "fifo.wav")  # not a regular file (reading it would hang the worker)
    index.paths[1] = str(lib / "evil.wav")
    index.paths[2] = str(lib / "evil2.wav")
    index.paths[3] = str(lib / "dirlink" / "secret.txt")
    index.paths[4] = str(lib) + "/../secret.txt"
    index.paths[5] = str(lib / "fifo.wav")
    index.paths[6] = "/etc/passwd"  # a clip of its own directory: only a root at start-up (trusted file)...
    with serve(index, tmp / "x.idx.npz", allow_roots=[str(lib)]) as base:  # ...so --allow-root narrows it
        r = request(base + "/audio/" + index.ids[0])
        assert r.status == 200 and r.body == (lib / Path(index.paths[0]).name).read_bytes()
        for row in range(1, 7):
            r = request(base + "/audio/" + index.ids[row])
            assert r.status == 404 and b"root:" not in r.body and b"not for the web" not in r.body, row
            assert r.json()["error"].endswith("is not on the server")
        assert request(base + "/audio/" + index.ids[7]).status == 200


def test_default_roots_are_the_start_up_clips_and_reload_cannot_widen_them(library):
    index, lib, secret, tmp = library
    path = tmp / "x.idx.npz"
    index.paths[4] = str(lib) + "/../secret.txt"  # edited form: neither a root nor served
    with serve(index, path) as base:
        assert request(base + "/audio/" + index.ids[0]).status == 200
        assert request(base + "/audio/" + index.ids[4]).status == 404
        # the index file is edited after start to point a clip at a file outside the library
        index.paths[0] = str(secret)
        index.paths[1] = "/etc/passwd"
        index.save(path)
        assert request(base + "/reload", "POST").status == 200
        for row in (0, 1):
            r = request(base + "/audio/" + index.ids[row])
            assert r.status == 404 and b"not for the web" not in r.body and b"root:" not in r.body
        assert request(base + "/audio/" + index.ids[2]).status == 200  # other clips still play
        # a clip's file swapped for a symlink after start
        clip = Path(index.paths[2])
        clip.unlink()
        clip.symlink_to(secret)
        r = request(base + "/audio/" + index.ids[2])
        assert r.status == 404 and b"not for the web" not in r.body
        # a symlink that stays inside the library is fine
        clip.unlink()
        clip.symlink_to(lib / Path(index.paths[3]).name)
        assert request(base + "/audio/" + index.ids[2]).status == 200
