"""The database enforces what must never be false, whatever the Python code does."""

import datetime as dt

import pytest
from django.db import IntegrityError, transaction

from jobs.models import ApiToken, JobDefinition
from runs.models import Attempt, Run


def refused(make):
    with pytest.raises(IntegrityError), transaction.atomic():
        make()


def test_it_refuses_an_unknown_status_at_the_database(acme, make_job):
    job = make_job(acme)
    refused(lambda: JobDefinition.objects.filter(pk=job.pk).update(status="sleeping"))


def test_it_refuses_a_timeout_over_six_hours_at_the_database(acme, make_job):
    job = make_job(acme)
    refused(lambda: JobDefinition.objects.filter(pk=job.pk).update(timeout_seconds=6 * 3600 + 1))


def test_it_keeps_one_run_per_scheduled_occurrence(acme, make_job, make_run):
    job = make_job(acme)
    due = dt.datetime(2026, 6, 1, 2, 0, tzinfo=dt.UTC)
    make_run(job, due_at=due)
    refused(lambda: make_run(job, due_at=due))
    make_run(job, due_at=due, origin="trigger")  # an ad hoc run at the same instant is a different run


def test_it_refuses_a_leased_run_without_a_lease(acme, make_job, make_run):
    run = make_run(make_job(acme))
    refused(lambda: Run.objects.filter(pk=run.pk).update(state="leased"))


def test_it_refuses_a_finished_run_without_finished_at(acme, make_job, make_run):
    run = make_run(make_job(acme))
    refused(lambda: Run.objects.filter(pk=run.pk).update(state="succeeded"))


def test_it_refuses_a_skipped_run_without_a_reason(acme, make_job, make_run):
    run = make_run(make_job(acme))
    refused(lambda: Run.objects.filter(pk=run.pk).update(state="skipped", finished_at=run.due_at))


def test_it_refuses_a_run_available_before_it_is_due(acme, make_job, make_run):
    run = make_run(make_job(acme))
    refused(lambda: Run.objects.filter(pk=run.pk).update(available_at=run.due_at - dt.timedelta(seconds=1)))


def test_it_refuses_an_attempt_that_started_early(acme, make_job, make_run):
    run = make_run(make_job(acme))
    refused(
        lambda: Attempt.objects.create(
            run=run,
            attempt=1,
            fencing_token=1,
            available_at=run.available_at,
            started_at=run.available_at - dt.timedelta(milliseconds=1),
            ended_at=run.available_at,
            outcome="succeeded",
        )
    )


def test_it_stores_only_the_hash_of_a_token_secret(acme):
    token, secret = ApiToken.issue(acme, "team", name="ci")
    stored = ApiToken.objects.get(pk=token.pk)
    assert secret not in (stored.secret_hash, stored.prefix, str(stored.__dict__))
    assert stored.secret_hash == ApiToken.hash_secret(secret)
