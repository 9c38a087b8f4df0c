"""tests/spawned.py: a process a test starts never blocks on its own output, however much it writes."""

import sys

from tests.spawned import output_of, spawn, stop
from tests.waiting import wait_until

# Far more than a pipe holds (64 KiB): into a pipe nobody reads, this process would never get to exit.
CHATTY = "import sys\nfor i in range(20000): print('line', i, 'x' * 80, file=sys.stderr)\nprint('done')"


def test_a_process_that_writes_more_than_a_pipe_holds_runs_to_its_end_unread():
    proc = spawn([sys.executable, "-c", CHATTY])
    assert proc.wait(timeout=60) == 0
    out = output_of(proc)
    assert out.count("\n") == 20001 and out.endswith("done\n")


def test_stop_ends_a_process_and_returns_what_it_wrote():
    proc = spawn([sys.executable, "-c", "import time\nprint('up', flush=True)\ntime.sleep(600)"])
    wait_until(lambda: output_of(proc), message="the process to say it is up")
    code, out = stop(proc, timeout=30)
    assert code != 0 and out == "up\n"
