"""A webhook receiver on loopback, and jobs whose owner wants to hear of trouble."""

import datetime as dt

import pytest

from dlq.models import DeadLetter
from notify import events
from runs.models import Run
from tests.notify.receiver import serve


@pytest.fixture(autouse=True)
def fresh_sweep():
    """Each test starts a sweep of the watched jobs when it first records (notify.events.JOB_SWEEP_EVERY)."""
    events._last_sweep["at"] = None


@pytest.fixture
def receiver(settings):
    """The URL of a local receiver. Loopback is refused to http targets and webhooks alike
    unless DUETIME_HTTP_ALLOW_PRIVATE is set, as tests of http targets do."""
    settings.DUETIME_HTTP_ALLOW_PRIVATE = True
    with serve() as url:
        yield url


@pytest.fixture
def watched_job(acme, make_job):
    """acme's billing.export, owned by Alice's on-call address and a webhook."""

    def make(name="billing.export", webhook="https://hooks.example.com/duetime", **fields):
        return make_job(
            acme, name, overlap_policy="allow", owner_email="oncall@acme.example", owner_webhook_url=webhook, **fields
        )

    return make


@pytest.fixture
def started(db, clock):
    """The notifier's cursors, made by a first pass: owners hear of what happens from here on."""
    events.record(clock.now)


def bury(run, at, error="boom"):
    """`run` dead-lettered at `at`, as runs.transitions records it."""
    run.__class__.objects.filter(pk=run.pk).update(state="dead", finished_at=at, last_error=error, attempt=5)
    return DeadLetter.objects.create(run=run, job=run.job, tenant=run.tenant, last_error=error, dead_at=at)


def flood(job, count, at):
    """`count` dead runs of `job`, each with its dead letter, all dead at `at`."""
    runs = Run.objects.bulk_create(
        Run(
            job=job,
            tenant=job.tenant,
            due_at=at - dt.timedelta(minutes=i + 1),
            available_at=at - dt.timedelta(minutes=i + 1),
            state="dead",
            finished_at=at,
            queue=job.queue,
            idempotency_key=f"{job.name}@{at.isoformat()}#{i}",
        )
        for i in range(count)
    )
    DeadLetter.objects.bulk_create(
        DeadLetter(run=run, job=job, tenant=job.tenant, last_error="boom", dead_at=at) for run in runs
    )
