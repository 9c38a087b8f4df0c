"""Handlers of the demo tenant's sample jobs (see `manage.py setup_demo`)."""

import logging

from runs.targets import PermanentError

log = logging.getLogger("duetime.demo")


def hello(ctx):
    """Succeeds at once: a cron every minute in Europe/Berlin."""
    log.info("hello from %s (key %s)", ctx.job_name, ctx.idempotency_key)


def flaky(ctx):
    """Fails its first two attempts, then succeeds: shows retries with backoff."""
    if ctx.attempt <= 2:
        raise RuntimeError(f"simulated failure on attempt {ctx.attempt} of {ctx.idempotency_key}")


def always_fails(ctx):
    """Fails every attempt, so the run lands in the dead-letter queue."""
    raise RuntimeError("simulated outage: the invoice service answered 503")


def rejects_bad_input(ctx):
    """A permanent error: no retries, straight to the dead-letter queue."""
    raise PermanentError("payload has no 'account' field")
