"""A module prefix a superuser takes from acme stops acme's next execution under a real `run_worker`."""

import json

import pytest

from jobs.models import Tenant
from runs import enqueue
from runs.models import Run
from tests.acceptance.test_processes import Processes
from tests.waiting import wait_until

pytestmark = [pytest.mark.acceptance, pytest.mark.django_db(transaction=True)]


@pytest.mark.parametrize("pool", ["threads", "processes"])
def test_a_revoked_prefix_stops_the_next_execution(acme, make_job, make_run, tmp_path, pool):
    first, second = tmp_path / "first.json", tmp_path / "second.json"
    job = make_job(acme, "billing.echo", target_ref="tests.handlers.echo", overlap_policy="allow", max_attempts=3)
    ran, _ = enqueue.enqueue(job, payload={"report": str(first)})
    with Processes() as fleet:
        fleet.start("worker", "run_worker", "--pool", pool)
        wait_until(lambda: Run.objects.get(pk=ran.pk).state == "succeeded", message="the first run")
        # A superuser takes tests.handlers from acme; a run queued before that (an occurrence the
        # scheduler materialised ahead, a retry) is what the worker meets next.
        Tenant.objects.filter(pk=acme.pk).update(task_module_prefixes="billing.tasks")
        queued = make_run(job, payload={"report": str(second)})
        wait_until(lambda: Run.objects.get(pk=queued.pk).state == "dead", message="the next run to be refused")

    assert json.loads(first.read_text())["run_id"] == ran.pk
    assert not second.exists()  # the handler never ran
    refused = Run.objects.get(pk=queued.pk)
    assert refused.attempt == 1  # a permanent failure: no retry, although max_attempts is 3
    assert refused.last_error == (
        "permission revoked: its tenant may no longer run tasks from 'tests.handlers' (the module prefix that "
        "allowed it was removed; allowed module prefixes now: billing.tasks)"
    )
