"""The benchmark's task: does nothing, so the engine's own cost is measured."""

from django.tasks import task


@task
def noop(**payload):
    return None
