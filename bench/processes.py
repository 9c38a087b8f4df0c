"""Starting and stopping the real engine processes the bench measures."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from django.conf import settings

MANAGE = str(Path(settings.BASE_DIR) / "manage.py")
READY_WAIT = 3.0  # seconds for engine processes to import Django and reach their loop
POOL_WAIT = 60.0  # most seconds a process pool takes to fork its children on a busy machine


def engine_env(**extra):
    """The environment of the processes a bench starts: this one's, with DEBUG off, as in production.

    `DEBUG=1 manage.py bench` is the easy way to run the bench without a
    SECRET_KEY; its engine processes must not inherit DEBUG, which wraps every
    ORM cursor to record its queries. They get this process's key.
    """
    return {**os.environ, "DEBUG": "0", "SECRET_KEY": settings.SECRET_KEY, "PYTHONUNBUFFERED": "1", **extra}


class Fleet:
    """A scheduler (unless `scheduler=False`) and `workers` run_worker processes.

    `env` is added to each process's environment. `metrics_ports`: None, or a
    list of ports, one per process in start order (scheduler first), each
    serving that process's /metrics (`--metrics-port`).
    """

    def __init__(
        self, queue, workers, concurrency, batch, pool="threads", scheduler=True, env=None, metrics_ports=None
    ):
        env = engine_env(**(env or {}))
        ports = iter(metrics_ports or [])
        self.pool, self.concurrency = pool, concurrency
        self.workers = []
        self.children = []
        if scheduler:
            self.children.append(
                subprocess.Popen(
                    [sys.executable, MANAGE, "run_scheduler", "--skip-checks", *_metrics_port(ports)],
                    env=env,
                    stderr=subprocess.DEVNULL,
                )
            )
        for i in range(workers):
            cmd = [
                sys.executable,
                MANAGE,
                "run_worker",
                "--skip-checks",
                "--queues",
                queue,
                "--concurrency",
                str(concurrency),
                "--batch",
                str(batch),
                "--worker-id",
                f"bench-w{i}",
                "--pool",
                pool,
                *_metrics_port(ports),
            ]
            worker = subprocess.Popen(cmd, env=env, stderr=subprocess.DEVNULL)
            self.workers.append(worker)
            self.children.append(worker)

    def wait_ready(self):
        """Wait for the processes' start-up, which the workloads do not measure: READY_WAIT for imports,
        then, with `--pool processes`, until each worker has forked its children (one per slot, forked
        after its first claim can be made: a fork holds the worker's interpreter for milliseconds)."""
        time.sleep(READY_WAIT)
        if self.pool != "processes":
            return
        deadline = time.monotonic() + POOL_WAIT
        while time.monotonic() < deadline and any(forked(w.pid) < self.concurrency for w in self.workers):
            time.sleep(0.1)

    def stop(self):
        for child in self.children:
            if child.poll() is None:
                child.send_signal(signal.SIGTERM)
        for child in self.children:
            try:
                child.wait(timeout=40)
            except subprocess.TimeoutExpired:
                child.kill()

    def alive(self):
        return all(child.poll() is None for child in self.children)


def forked(pid):
    """How many child processes `pid` has (Linux: /proc/PID/task/*/children); 0 where that cannot be read."""
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return 0
    count = 0
    for task in tasks:
        try:
            with open(f"/proc/{pid}/task/{task}/children") as f:
                count += len(f.read().split())
        except OSError:
            pass
    return count


def _metrics_port(ports):
    """`--metrics-port N` for the next process when ports are given; else nothing (DUETIME_METRICS_PORT decides)."""
    port = next(ports, None)
    return [] if port is None else ["--metrics-port", str(port)]
