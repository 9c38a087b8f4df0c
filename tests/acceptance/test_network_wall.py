"""The network wall under a real `run_worker`: a tenant's http targets on loopback, once its network is removed."""

import pytest

from jobs.models import Tenant
from runs import enqueue
from runs.models import Run
from tests.acceptance.test_processes import Processes
from tests.fixtures.network import Listener
from tests.waiting import wait_until

pytestmark = [pytest.mark.acceptance, pytest.mark.django_db(transaction=True)]


@pytest.mark.parametrize("pool", ["threads", "processes"])
def test_a_worker_sends_nothing_to_a_removed_network_and_says_the_same_for_open_and_closed_ports(
    acme, make_job, closed_port, pool
):
    listener = Listener()
    acme.private_networks = "127.0.0.1/32"
    acme.save()  # the jobs are saved while acme may call loopback...
    jobs = [
        make_job(acme, name, target_kind="http", target_ref=f"https://127.0.0.1:{port}/hooks", payload={})
        for name, port in (("open", listener.port), ("closed", closed_port))
    ]
    runs = [enqueue.enqueue(job)[0] for job in jobs]  # ...and queued (a trigger now would be refused)...
    Tenant.objects.filter(pk=acme.pk).update(private_networks="")  # ...and run after a superuser removed it
    try:
        with Processes() as fleet:
            fleet.start("worker", "run_worker", "--pool", pool, DUETIME_HTTP_ALLOW_PRIVATE="0")
            wait_until(lambda: Run.objects.filter(pk__in=[r.pk for r in runs], state="dead").count() == 2)
        assert listener.connections() == 0 and listener.received() == b""
    finally:
        listener.close()
    errors = {Run.objects.get(pk=run.pk).last_error for run in runs}
    assert errors == {
        "permanent: refused: not a public address "
        "(Duetime calls public addresses only, unless an operator allows private networks of tenant acme)"
    }
