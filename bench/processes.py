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
    def __init__(self, queue, workers, concurrency, batch, pool="threads", scheduler=True):
        env = engine_env()
        self.children = []
        if scheduler:
            self.children.append(
                subprocess.Popen(
                    [sys.executable, MANAGE, "run_scheduler", "--skip-checks"], env=env, stderr=subprocess.DEVNULL
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
