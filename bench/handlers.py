"""The benchmark's tasks: a no-op, so the engine's own cost is measured, and a 5 ms sleep (bench noisy)."""

import time

from django.tasks import task


@task
def noop(**payload):
    return None


@task
def sleep_5ms(**payload):
    """bench noisy's flood: a short task that holds its slot 5 ms."""
    time.sleep(0.005)
