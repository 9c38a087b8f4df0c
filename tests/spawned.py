"""The one way a test starts a long-running process: its output goes to a file, read back when it stops.

Not to a pipe: a pipe nobody reads until the end holds 64 KiB, and then the
process blocks at its next write. A worker that logs a traceback a second
through a database restore fills it in seconds and stops at a log line, its
threads waiting on the logging lock, so it never completes a run again and the
test waits in vain for what the engine would have done.
"""

import signal
import subprocess
import tempfile


def spawn(command, **popen):
    """`subprocess.Popen(command, **popen)` with stdout and stderr in one temporary file (see `output_of`)."""
    log = tempfile.TemporaryFile("w+")
    proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, text=True, **popen)
    proc.log = log
    return proc


def output_of(proc):
    """What a spawned process has written so far."""
    proc.log.seek(0)
    return proc.log.read()


def stop(proc, sig=signal.SIGTERM, timeout=30):
    """Send `sig` (SIGKILL after `timeout` seconds), wait for the end; returns (exit code, output)."""
    if proc.poll() is None:
        proc.send_signal(sig)
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    out = output_of(proc)
    proc.log.close()
    return proc.returncode, out
