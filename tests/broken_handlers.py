"""A listed task module whose import fails with what is not an ImportError (tests of jobs.registry).

Listed in DUETIME_TASK_MODULES by the tests that use it only.
"""

from django.tasks import task

raise RuntimeError("billing settings are missing: set BILLING_URL")


@task
def export():
    """Never defined: the module fails above."""
