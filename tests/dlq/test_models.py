"""The dead-letter queue: one open letter per death, the history of deaths kept."""

import pytest
from django.db import IntegrityError, transaction

from dlq.models import DeadLetter
from runs import claims, transitions
from tests.conftest import NOW


def die(run, now):
    (lease,) = claims.claim(["default"], 1, "w-alice", now=now)
    assert lease.run_id == run.pk
    assert transitions.complete(run.pk, lease.fencing_token, "failed", "boom", retryable=False, now=now) == "dead"


def test_a_run_that_dies_again_after_a_replay_gets_a_new_letter(acme, make_job, make_run, clock):
    job = make_job(acme, "report", overlap_policy="allow", max_attempts=1)
    run = make_run(job, due_at=clock.now)
    die(run, clock.now)
    first = DeadLetter.objects.get(run=run)
    assert transitions.replay(first, actor="user:alice", now=clock.advance(minutes=5))
    die(run, clock.now)

    letters = list(DeadLetter.objects.filter(run=run).order_by("dead_at"))
    assert [letter.is_open for letter in letters] == [False, True]
    assert letters[0].resolved_by == "user:alice" and letters[1].dead_at == NOW.replace(minute=5)


def test_the_database_refuses_a_second_open_letter_for_one_run(acme, make_job, make_run, clock):
    job = make_job(acme, "report", overlap_policy="allow")
    run = make_run(job, state="dead", due_at=clock.now)
    DeadLetter.objects.create(run=run, job=job, tenant=acme, last_error="boom", dead_at=clock.now)
    with pytest.raises(IntegrityError), transaction.atomic():
        DeadLetter.objects.create(run=run, job=job, tenant=acme, last_error="again", dead_at=clock.now)


def test_a_letter_is_replayed_or_discarded_never_both(acme, make_job, make_run, clock):
    job = make_job(acme, "report", overlap_policy="allow")
    run = make_run(job, state="dead", due_at=clock.now)
    letter = DeadLetter.objects.create(run=run, job=job, tenant=acme, dead_at=clock.now, replayed_at=clock.now)
    letter.discarded_at = clock.now
    with pytest.raises(IntegrityError), transaction.atomic():
        letter.save()
