"""Tasks of the demo tenant's sample jobs (see `manage.py setup_demo`).

Each is a Django task (django.tasks); the module is listed in
DUETIME_TASK_MODULES and the demo tenant is allowed its prefix.
"""

import logging

from django.tasks import task

from runs.targets import PermanentError

log = logging.getLogger("duetime.demo")


@task(takes_context=True)
def hello(context):
    """Succeeds at once: a cron every minute in Europe/Berlin."""
    log.info("hello from %s (key %s)", context.job_name, context.idempotency_key)


@task(takes_context=True)
def flaky(context):
    """Fails its first two attempts, then succeeds: shows retries with backoff."""
    if context.attempt <= 2:
        raise RuntimeError(f"simulated failure on attempt {context.attempt} of {context.idempotency_key}")


@task
def always_fails():
    """Fails every attempt, so the run lands in the dead-letter queue."""
    raise RuntimeError("simulated outage: the invoice service answered 503")


@task
def rejects_bad_input(account=None):
    """A permanent error: no retries, straight to the dead-letter queue."""
    if account is None:
        raise PermanentError("payload has no 'account' field")
