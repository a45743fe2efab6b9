"""The single-writer lock: a second live writer is refused or waits; a killed writer's lock is taken over."""

import os
import signal
import subprocess
import sys
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


def test_waiting_writer_gets_the_lock_when_the_first_ends(tmp_path, capsys):
    proc = _holder(tmp_path / "run", 1.0)
    start = time.monotonic()
    with writer_lock(tmp_path / "run", wait=True):
        pass
    assert time.monotonic() - start > 0.3
    assert "waiting for process" in capsys.readouterr().err
    proc.wait()


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
    child = os.fork()  # as a data loader's worker is forked while the run holds its lock
    if child == 0:
        time.sleep(30)
        os._exit(0)
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
