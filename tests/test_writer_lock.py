"""The single-writer lock: a second live writer is refused or waits; a killed writer's lock is taken over."""

import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from mlatr.writer_lock import FOLDER_LOCK, LockedError, lock_path, writer_lock

HOLD = """
import sys, time
from mlatr.writer_lock import writer_lock
with writer_lock(sys.argv[1], what="thing"):
    print("held", flush=True)
    time.sleep(float(sys.argv[2]))
"""


def _holder(target, seconds):
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(target), str(seconds)], stdout=subprocess.PIPE,
                            text=True)
    assert proc.stdout.readline().strip() == "held"
    return proc


def test_lock_path_inside_a_folder_and_beside_a_file(tmp_path):
    assert lock_path(tmp_path / "run") == tmp_path / "run" / FOLDER_LOCK
    assert (tmp_path / "run").is_dir()
    assert lock_path(tmp_path / "lib.idx.npz") == tmp_path / ".lib.idx.npz.lock"


def test_second_writer_is_refused_and_names_the_holder(tmp_path):
    proc = _holder(tmp_path / "run", 30)
    try:
        with pytest.raises(LockedError, match=rf"being written by process {proc.pid} "):
            with writer_lock(tmp_path / "run", what="training run"):
                pass
    finally:
        proc.kill()
        proc.wait()


HOLD_UNTIL_TOLD = """
import sys
from mlatr.writer_lock import writer_lock
with writer_lock(sys.argv[1], what="thing"):
    print("held", flush=True)
    sys.stdin.readline()  # until the test says so
print("released", flush=True)
"""


def test_waiting_writer_gets_the_lock_when_the_first_ends(tmp_path, capsys):
    """The second writer waits (saying so) while the first holds the lock, and gets it once the first lets go:
    each step waits on what the other process says, never on a duration."""
    proc = subprocess.Popen([sys.executable, "-c", HOLD_UNTIL_TOLD, str(tmp_path / "run")], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "held"
    got = threading.Event()

    def second_writer():
        with writer_lock(tmp_path / "run", wait=True):
            got.set()

    waiter = threading.Thread(target=second_writer, daemon=True)
    waiter.start()
    err = ""
    deadline = time.monotonic() + 60
    while "waiting for process" not in err and time.monotonic() < deadline:
        err += capsys.readouterr().err
        time.sleep(0.01)
    assert f"waiting for process {proc.pid} " in err and not got.is_set()
    proc.stdin.write("go\n")
    proc.stdin.flush()
    assert proc.stdout.readline().strip() == "released"
    waiter.join(timeout=60)
    assert got.is_set()
    proc.wait(timeout=60)


def test_wait_with_a_bound_refuses_after_it(tmp_path):
    proc = _holder(tmp_path / "run", 30)
    try:
        start = time.monotonic()
        with pytest.raises(LockedError):
            with writer_lock(tmp_path / "run", wait=0.5):
                pass
        assert 0.4 < time.monotonic() - start < 5
    finally:
        proc.kill()
        proc.wait()


def test_killed_writers_lock_is_taken_over(tmp_path, capsys):
    proc = _holder(tmp_path / "run", 30)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    with writer_lock(tmp_path / "run"):
        pass
    assert f"taking over the output {tmp_path / 'run'} from process {proc.pid}" in capsys.readouterr().err
    with writer_lock(tmp_path / "run"):  # a lock released cleanly is not reported as taken over
        pass
    assert "taking over" not in capsys.readouterr().err


HOLD_WITH_CHILD = """
import os, sys, time
from mlatr.writer_lock import writer_lock
with writer_lock(sys.argv[1], what="thing"):
    ready_r, ready_w = os.pipe()
    child = os.fork()  # as a data loader's worker is forked while the run holds its lock
    if child == 0:  # the fork hooks have run (the lock dropped) before fork() returns here
        os.write(ready_w, b"1")
        time.sleep(30)
        os._exit(0)
    os.read(ready_r, 1)  # the child is running: killing the parent now leaves the lock to no one
    print(child, flush=True)
    time.sleep(30)
"""


def test_a_killed_writers_forked_children_do_not_keep_its_lock(tmp_path):
    """SIGKILL of a writer whose forked child lives on (an orphaned data-loader worker): the next writer
    gets the lock at once, not once the child exits."""
    proc = subprocess.Popen([sys.executable, "-c", HOLD_WITH_CHILD, str(tmp_path / "run")], stdout=subprocess.PIPE,
                            text=True)
    child = int(proc.stdout.readline())
    try:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        os.kill(child, 0)  # the child is still alive
        with writer_lock(tmp_path / "run"):
            pass
    finally:
        os.kill(child, signal.SIGKILL)
