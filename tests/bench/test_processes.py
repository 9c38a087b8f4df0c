"""The bench's engine processes: it waits for a process pool's children before it measures."""

import os
import signal
import subprocess
import sys

from bench import processes
from tests.waiting import wait_until


def test_it_counts_the_child_processes_of_a_process():
    script = "import subprocess, time; [subprocess.Popen(['sleep', '30']) for _ in range(3)]; time.sleep(30)"
    parent = subprocess.Popen([sys.executable, "-c", script], start_new_session=True)
    try:
        wait_until(lambda: processes.forked(parent.pid) == 3, message="three children")
    finally:
        os.killpg(parent.pid, signal.SIGKILL)  # the children too
        parent.wait()
    assert processes.forked(parent.pid) == 0  # gone: nothing to read
