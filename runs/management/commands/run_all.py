"""Web, scheduler and worker in one command, each a child process kept up by this one.

With CELERY_BROKER_URL set, run_dispatcher too (publishing the `celery` jobs of
the same queues to the team's Celery workers); without it, no broker is needed.

A child that dies is started again after a back-off that doubles from 1 s to
60 s while it keeps dying, and is back to 1 s once the child has stayed up for
a minute: a crash loop (the database down, a bad deploy) costs one start a
minute, a rare crash is repaired at once. SIGTERM or Ctrl-C stops them all.

The worker uses the `threads` pool unless `--pool processes` is given, and
the command says which with the URL: under threads a handler past its
timeout is recorded `timed_out` but keeps running (production workers run
`--pool processes`, docs/operations.md).
"""

import os
import signal
import socket
import subprocess
import sys
import time

from django.conf import settings
from django.core.management.base import BaseCommand

from runs.loop import GracefulStop
from runs.worker import POOL_PROCESSES, POOL_THREADS, POOLS

FIRST_BACKOFF = 1.0
MAX_BACKOFF = 60.0
STEADY_SECONDS = 60.0


def next_backoff(backoff, uptime):
    """Seconds to wait before restarting a child that died after `uptime` s; `backoff` was the last wait."""
    if uptime >= STEADY_SECONDS:
        return FIRST_BACKOFF
    return min(backoff * 2, MAX_BACKOFF)


class Child:
    """One supervised process: started, watched, restarted after its back-off, stopped."""

    def __init__(self, name, command, say):
        self.name, self.command, self.say = name, command, say
        self.backoff = FIRST_BACKOFF / 2  # doubled at the first death
        self.restart_at = None
        self.start()

    def start(self):
        self.process = subprocess.Popen(self.command, env=os.environ.copy())
        self.started = time.monotonic()
        self.restart_at = None

    def watch(self, now):
        """Notice a death (and schedule the restart) or restart once the back-off passed; call often."""
        if self.restart_at is not None:
            if now >= self.restart_at:
                self.say(f"restarting {self.name}")
                self.start()
        elif self.process.poll() is not None:
            self.backoff = next_backoff(self.backoff, now - self.started)
            self.restart_at = now + self.backoff
            self.say(f"{self.name} exited with code {self.process.returncode}; restarting in {self.backoff:g} s")

    def terminate(self):
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)

    def wait(self, deadline):
        """Wait for it to exit; SIGKILL if it is still running at `deadline` (time.monotonic())."""
        try:
            self.process.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            self.process.kill()


class Command(BaseCommand):
    help = (
        "Web (ASGI), scheduler and worker in one command, restarted if they die: for a first look and small installs."
    )

    def add_arguments(self, parser):
        parser.add_argument("--host", default="127.0.0.1")
        parser.add_argument("--port", type=int, default=8000)
        parser.add_argument("--queues", default="default")
        parser.add_argument("--concurrency", type=int, default=4)
        parser.add_argument(
            "--pool",
            choices=POOLS,
            default=POOL_THREADS,
            help="The worker's pool (run_worker --pool): threads for a first look, processes to kill handlers "
            "at their timeout.",
        )
        parser.add_argument("--banner", default="", help="A line printed with the URL once the web process answers.")

    def handle(self, *args, host, port, queues, concurrency, pool, banner, **options):
        manage = [sys.executable, "manage.py"]
        commands = {
            "web": [sys.executable, "-m", "daphne", "-b", host, "-p", str(port), "scheduler_project.asgi:application"],
            "scheduler": manage + ["run_scheduler"],
            "worker": manage + ["run_worker", "--queues", queues, "--concurrency", str(concurrency), "--pool", pool],
        }
        if settings.CELERY_BROKER_URL:  # Celery as the worker transport; the embedded default needs no broker
            commands["dispatcher"] = manage + ["run_dispatcher", "--queues", queues]
        stop = GracefulStop()
        children = [Child(name, command, self.say) for name, command in commands.items()]
        announced = False
        while not stop.requested:
            if not announced and accepts_connections(host, port):
                # Printed only now, so the URL works the moment a user reads it.
                lines = [
                    "",
                    f"  Duetime is running at http://{host}:{port}/admin/  (Ctrl-C to stop)",
                    f"  {pool_line(pool)}",
                ]
                self.stdout.write("\n".join(lines + ([f"  {banner}", ""] if banner else [""])))
                self.stdout.flush()
                announced = True
            for child in children:
                child.watch(time.monotonic())
            stop.sleep(0.5 if announced else 0.1)
        for child in children:
            child.terminate()
        deadline = time.monotonic() + 35  # the worker's grace (30 s) to finish what runs
        for child in children:
            child.wait(deadline)

    def say(self, line):
        self.stderr.write(line)
        self.stderr.flush()


def pool_line(pool):
    """What run_all says about its worker's pool, printed with the URL."""
    if pool == POOL_PROCESSES:
        return "Worker pool: processes (a handler past its timeout is killed)."
    return (
        f"Worker pool: {POOL_THREADS} (a handler past its timeout is recorded timed_out but keeps running; "
        "run_all --pool processes, or run_worker --pool processes in production, stops it)."
    )


def accepts_connections(host, port):
    """True once something accepts TCP connections on host:port (the web process is up)."""
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False
