"""Starting and stopping the real engine processes the bench measures."""

import os
import signal
import subprocess
import sys
from pathlib import Path

from django.conf import settings

MANAGE = str(Path(settings.BASE_DIR) / "manage.py")


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
            self.children.append(subprocess.Popen(cmd, env=env, stderr=subprocess.DEVNULL))

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


def _metrics_port(ports):
    """`--metrics-port N` for the next process when ports are given; else nothing (DUETIME_METRICS_PORT decides)."""
    port = next(ports, None)
    return [] if port is None else ["--metrics-port", str(port)]
