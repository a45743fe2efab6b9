"""mlatr serve --workers: a worker that keeps dying is started again after a growing delay while the others serve."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time

from mlatr.serve.workers import MAX_BACKOFF, restart_delay

WORKERS = textwrap.dedent("""
    import os, sys, time
    from mlatr.commands.serve import bind_socket
    from mlatr.serve import workers

    def target(options, sock, i, ready):
        ready.put(i)
        if i == 1:  # loads, then dies again and again
            time.sleep(0.1)
            os._exit(3)
        while True:
            time.sleep(1)

    if __name__ == "__main__":
        sys.exit(workers.supervise(target, {}, bind_socket("127.0.0.1", 0), 2, lambda: print("serving", flush=True)))
""")


def test_a_worker_that_keeps_dying_does_not_stop_the_healthy_one(tmp_path):
    """Was: with --workers 2, one worker killed three times in 30 s stopped the whole server. The test waits for the
    supervisor to say it will start the dying worker again after a delay (a deadline, not a fixed sleep), then
    checks that the supervisor still runs."""
    script = tmp_path / "supervise.py"
    script.write_text(WORKERS)
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    said = []
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            line = proc.stderr.readline()
            if not line:
                break
            said.append(line)
            if "starting it again in 2 s (the other workers keep serving)" in line:
                break
        assert said and "starting it again in 2 s" in said[-1], "".join(said)
        assert proc.poll() is None, proc.communicate()
    finally:
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
    err = "".join(said) + err
    assert proc.returncode == 0, err
    assert "stopping" not in err and "worker 0" not in err


def test_restart_delays_double_up_to_the_cap():
    assert [restart_delay(n) for n in (1, 2, 3, 4, 5)] == [0.0, 0.0, 2.0, 4.0, 8.0]
    assert restart_delay(40) == MAX_BACKOFF
