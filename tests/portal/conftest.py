"""Portal stories: Alice runs acme, Bob runs globex, Carol is the superuser who sees both."""

import datetime as dt

import pytest

from dlq.models import DeadLetter
from runs.models import Attempt


@pytest.fixture
def carol(db, django_user_model):
    return django_user_model.objects.create_superuser("carol", "carol@example.com", "carol-pass-123")


@pytest.fixture
def as_alice(client, alice):
    client.force_login(alice)
    return client


@pytest.fixture
def as_bob(client, bob):
    client.force_login(bob)
    return client


@pytest.fixture
def as_carol(client, carol):
    client.force_login(carol)
    return client


@pytest.fixture
def make_attempt(db):
    def make(run, attempt=1, late=dt.timedelta(seconds=1), outcome="succeeded", error="", worker="w-1", ended=None):
        started = run.available_at + late
        return Attempt.objects.create(
            run=run, attempt=attempt, fencing_token=run.fencing_token or 1, worker_id=worker, available_at=run.available_at,
            started_at=started, ended_at=ended or started + dt.timedelta(seconds=2), outcome=outcome, error=error,
        )

    return make


@pytest.fixture
def make_dead(db, make_run, make_attempt):
    def make(job, due_at, error="Traceback ...\nValueError: the export file is empty"):
        run = make_run(job, state="dead", due_at=due_at, attempt=1, last_error=error, fencing_token=7, worker_id="w-1", started_at=due_at)
        make_attempt(run, outcome="failed", error=error, late=dt.timedelta(0))
        return DeadLetter.objects.create(run=run, job=job, tenant=job.tenant, last_error=error, dead_at=due_at + dt.timedelta(seconds=3))

    return make


def action(client, url, name, ids, **fields):
    """POST an admin action from the changelist (the first step: its confirmation page)."""
    data = {"action": name, "_selected_action": [str(i) for i in ids], "index": "0", **fields}
    return client.post(url, data)


def confirm(client, url, name, ids, **fields):
    """POST the confirmation page's "yes" for an admin action."""
    data = {"action": name, "_selected_action": [str(i) for i in ids], "post": "yes", **fields}
    return client.post(url, data)
