"""Limits that bound what one tenant takes from the others, with real worker processes.

Dedicated pools (run_worker --tenants / --exclude-tenants), the tenant failure breaker
(runs.breaker, opened by a real run_scheduler from the rollups of a real worker's attempts), and
the queue limits and concurrency groups (runs.limits) across two real workers, checked from the
attempt rows.
Real clock with generous bounds; waiting is a poll (tests/waiting.py).
"""

from collections import Counter

import pytest

from jobs.models import QueueLimit, Tenant
from runs import breaker, enqueue, shards
from runs.models import Attempt, Run
from tests.acceptance.test_processes import Processes
from tests.waiting import wait_until

pytestmark = [pytest.mark.acceptance, pytest.mark.concurrency, pytest.mark.django_db(transaction=True)]


def due_runs(tenant, make_job, name, count):
    job = make_job(tenant, name, overlap_policy="allow")
    return [enqueue.enqueue(job, payload={"i": i})[0] for i in range(count)]


def workers_of(runs):
    return set(Attempt.objects.filter(run__in=runs).values_list("worker_id", flat=True))


def test_a_dedicated_worker_never_claims_another_tenants_runs(acme, globex, make_job):
    acme_runs = due_runs(acme, make_job, "acme.sync", 20)
    globex_runs = due_runs(globex, make_job, "globex.sync", 20)
    with Processes() as fleet:
        fleet.start("acme-pool", "run_worker", "--tenants", "acme", "--worker-id", "w-acme")
        wait_until(
            lambda: Run.objects.filter(pk__in=[r.pk for r in acme_runs], state="succeeded").count() == 20,
            message="acme's runs to succeed on acme's pool",
        )
        # globex's runs were due all along, and the acme pool had free slots: it left them alone.
        assert not Attempt.objects.filter(run__in=globex_runs).exists()
        assert set(Run.objects.filter(pk__in=[r.pk for r in globex_runs]).values_list("state", flat=True)) == {
            "scheduled"
        }
        fleet.start("shared-pool", "run_worker", "--exclude-tenants", "acme", "--worker-id", "w-shared")
        wait_until(
            lambda: Run.objects.filter(pk__in=[r.pk for r in globex_runs], state="succeeded").count() == 20,
            message="globex's runs to succeed on the shared pool",
        )
        more_acme = due_runs(acme, make_job, "acme.late", 5)
        wait_until(
            lambda: Run.objects.filter(pk__in=[r.pk for r in more_acme], state="succeeded").count() == 5,
            message="acme's later runs to succeed",
        )
    assert workers_of(acme_runs + more_acme) == {"w-acme"}
    assert workers_of(globex_runs) == {"w-shared"}


def test_the_breaker_opens_on_failures_holds_due_retries_not_first_attempts_and_an_operator_closes_it(acme, make_job):
    doomed = make_job(acme, "doomed", target_ref="tests.handlers.fail", overlap_policy="allow", max_attempts=2)
    doomed.retry_base_seconds = doomed.retry_max_seconds = 15
    doomed.save()
    runs = [enqueue.enqueue(doomed, payload={"i": i})[0] for i in range(30)]
    opened = lambda: Tenant.objects.get(pk=acme.pk).breaker_opened_at  # noqa: E731
    with Processes() as fleet:
        fleet.start("scheduler", "run_scheduler", DUETIME_BREAKER_MIN_ATTEMPTS=20)
        fleet.start("worker", "run_worker", "--worker-id", "w-1")
        wait_until(opened, message="the breaker to open")
        wait_until(lambda: not Run.objects.filter(job=doomed, state="leased").exists(), message="in-flight attempts")
        waiting = Run.objects.filter(job=doomed, state="retry_wait")
        assert waiting.exists(), "some retries were still to come when it opened"
        latest = max(waiting.values_list("available_at", flat=True))
        wait_until(lambda: shards.database_now() > latest, message="every held retry to fall due")
        attempts = Attempt.objects.filter(run__in=runs).count()
        fresh, _ = enqueue.enqueue(make_job(acme, "fine"))
        wait_until(lambda: Run.objects.get(pk=fresh.pk).state == "succeeded", message="a first attempt to run")
        # The worker claimed after every held retry was due, and took only the first attempt.
        assert Attempt.objects.filter(run__in=runs).count() == attempts
        assert set(waiting.values_list("state", flat=True)) == {"retry_wait"}
        held = waiting.count()

        closed_at = shards.database_now()
        assert breaker.close(Tenant.objects.get(pk=acme.pk), actor="user:alice", note="fixed") == 1
        wait_until(
            lambda: Attempt.objects.filter(run__in=runs, attempt=2, started_at__gte=closed_at).count() == held,
            message="the held retries to run once it closed",
        )
    assert Tenant.objects.get(pk=acme.pk).breaker_reset_at is not None


def two_workers(fleet, slots=8):
    fleet.start("w-1", "run_worker", "--worker-id", "w-1", "--concurrency", str(slots))
    fleet.start("w-2", "run_worker", "--worker-id", "w-2", "--concurrency", str(slots))


def all_succeed(runs, fleet):
    ids = [run.pk for run in runs]
    wait_until(
        lambda: Run.objects.filter(pk__in=ids, state="succeeded").count() == len(ids),
        timeout=120,
        message=f"{len(ids)} runs to succeed",
    )
    return list(Attempt.objects.filter(run__in=ids).order_by("started_at"))


def most_at_once(attempts):
    """The most attempts that overlapped at any instant (an end at the instant of a start does not overlap)."""
    events = sorted([(a.started_at, 1) for a in attempts] + [(a.ended_at, -1) for a in attempts])
    running = most = 0
    for _at, step in events:
        running += step
        most = max(most, running)
    return most


def sleepers(tenant, make_job, name, count, seconds=0.2, **fields):
    job = make_job(tenant, name, target_ref="tests.handlers.sleep", overlap_policy="allow", **fields)
    return [enqueue.enqueue(job, payload={"seconds": seconds})[0] for _ in range(count)]


def test_a_queue_limit_holds_two_workers_to_3_running_together(acme, make_job):
    QueueLimit.objects.create(tenant=acme, queue="default", max_running=3)
    runs = sleepers(acme, make_job, "sync", 24)
    with Processes() as fleet:
        two_workers(fleet, slots=2)  # 4 slots between them: only the queue limit holds them to 3
        attempts = all_succeed(runs, fleet)
    assert {a.worker_id for a in attempts} == {"w-1", "w-2"}, "both workers took part"
    assert most_at_once(attempts) == 3, "never more than 3 across the two workers, and the cap was used"


def test_a_rate_limit_holds_two_workers_to_5_starts_a_second(acme, make_job):
    QueueLimit.objects.create(tenant=None, queue="default", max_starts=5, rate_per="second")
    runs = sleepers(acme, make_job, "ping", 25, seconds=0.01)
    with Processes() as fleet:
        two_workers(fleet)
        attempts = all_succeed(runs, fleet)
    per_second = Counter(a.started_at.replace(microsecond=0) for a in attempts)
    assert max(per_second.values()) <= 5, per_second
    assert len(per_second) >= 5, "25 starts at 5 a second take at least 5 calendar seconds"


def test_a_concurrency_group_of_1_never_overlaps_two_jobs_attempts_across_two_workers(acme, make_job):
    runs = sleepers(acme, make_job, "nightly", 8, seconds=0.1, concurrency_group="warehouse")
    runs += sleepers(acme, make_job, "report", 8, seconds=0.1, concurrency_group="warehouse")
    free = sleepers(acme, make_job, "free", 8, seconds=0.1)  # not in the group: runs beside it
    with Processes() as fleet:
        two_workers(fleet)
        attempts = all_succeed(runs, fleet)
        beside = all_succeed(free, fleet)
    for before, after in zip(attempts, attempts[1:]):
        assert after.started_at >= before.ended_at, f"attempts of runs {before.run_id} and {after.run_id} overlap"
    assert {a.worker_id for a in attempts + beside} == {"w-1", "w-2"}
    assert most_at_once(attempts + beside) > 1, "the group held only its own jobs"
