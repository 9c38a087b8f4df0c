"""Limits that bound what one tenant takes from the others, with real worker processes.

Dedicated pools (run_worker --tenants / --exclude-tenants). Real clock with generous bounds;
waiting is a poll (tests/waiting.py).
"""

import pytest

from runs import enqueue
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
