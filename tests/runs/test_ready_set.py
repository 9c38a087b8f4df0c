"""The ready set: which tenants a claim looks at, from the ready marks, exact through every move.

`claims.lock_ready_tenants` reads only the ready marks due now
(runs.models.ReadyMark), so tenants without due work cost nothing, even
with runs scheduled ahead. The marks are stored, written by every move that
makes a run claimable and settled by the claims; this property test says
they never drift, over random sequences of inserts, claims, completions,
reaps, releases, replays, cancels, pauses and resumes: after every step it
names exactly the tenants that have a due run on the asked queues, as the
ORM's one definition of "ready" (RunQuerySet.ready) counts them.
"""

import datetime as dt
import itertools

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dlq.models import DeadLetter
from jobs.models import JobDefinition
from runs import claims, controls, enqueue, transitions
from runs.models import Run
from tests.conftest import NOW

QUEUE_SETS = (["a"], ["b"], ["a", "b"])
LATER = NOW + dt.timedelta(days=2)  # after every retry backoff of a reap at NOW + 1 day
_keys = itertools.count()

steps = st.one_of(
    st.tuples(st.just("insert"), st.integers(0, 5), st.integers(-30, 30)),
    st.tuples(st.just("claim"), st.integers(1, 4), st.sampled_from(QUEUE_SETS)),
    st.tuples(st.just("complete"), st.integers(0, 50), st.sampled_from(["succeeded", "failed"])),
    st.tuples(st.just("reap")),
    st.tuples(st.just("cancel"), st.integers(0, 50)),
    st.tuples(st.just("release"), st.integers(0, 50)),
    st.tuples(st.just("replay"), st.integers(0, 50)),
    st.tuples(st.just("pause"), st.integers(0, 5)),
)


@pytest.fixture
def jobs(acme, globex, make_job):
    from jobs.models import Tenant

    initech = Tenant.objects.create(name="initech")  # its jobs are external: leased through the API
    return [
        make_job(tenant, f"{tenant.name}.{queue}", queue=queue, overlap_policy="allow", max_attempts=3, **target)
        for tenant, target in ((acme, {}), (globex, {}), (initech, {"target_kind": "external", "target_ref": ""}))
        for queue in ("a", "b")
    ]


def ready_tenants(queues, now):
    params = {"queues": queues, "tenant": None, "kinds": None, "now": now}
    return claims.lock_ready_tenants({**params, "lock_timeout": "2s", "idle_timeout": "60s"})


def truth(queues, now):
    return sorted(set(Run.objects.ready(now).filter(queue__in=queues).values_list("tenant_id", flat=True)))


def apply(step, jobs):
    kind, *args = step
    if kind == "insert":
        job, minutes = jobs[args[0]], args[1]
        due = NOW + dt.timedelta(minutes=minutes, microseconds=next(_keys))
        enqueue.insert_runs(enqueue.build_runs(job, [due], origin=Run.Origin.API, key=f"k{next(_keys)}"))
    elif kind == "claim":
        claims.claim(args[1], args[0], "w", now=NOW)
    elif kind == "complete":
        leased = list(Run.objects.filter(state="leased").order_by("id"))
        if leased:
            run = leased[args[0] % len(leased)]
            transitions.complete(run.pk, run.fencing_token, args[1], now=NOW)
    elif kind == "reap":
        transitions.reap(now=NOW + dt.timedelta(days=1))
    elif kind == "cancel":
        pending = list(Run.objects.pending().order_by("id"))
        if pending:
            transitions.cancel_run(pending[args[0] % len(pending)], reason="property test", now=NOW)
    elif kind == "release":
        leased = list(Run.objects.filter(state="leased").order_by("id"))
        if leased:
            run = leased[args[0] % len(leased)]
            transitions.release(run.pk, run.fencing_token, now=NOW)
    elif kind == "replay":
        letters = list(DeadLetter.objects.filter(replayed_at=None, discarded_at=None).order_by("id"))
        if letters:
            transitions.replay(letters[args[0] % len(letters)], actor="user:alice", now=NOW)
    elif kind == "pause":
        job = JobDefinition.objects.get(pk=jobs[args[0]].pk)
        if job.status == "active":
            controls.pause(job, actor="user:alice")
        else:
            controls.resume(job, actor="user:alice", now=NOW)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(steps, max_size=30))
def test_the_ready_set_names_exactly_the_tenants_with_due_work_after_every_move(jobs, sequence):
    for step in sequence:
        apply(step, jobs)
        for queues in QUEUE_SETS:
            for now in (NOW, LATER):
                assert ready_tenants(queues, now) == truth(queues, now), (step, queues, now)
