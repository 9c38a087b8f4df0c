"""Metrics from real processes: a scheduler and a worker serve /metrics on their ports, the counters move as
runs flow (a run that dies, a lease its worker lost, the canaries), and stopping every scheduler shows the
dead-man state in the portal and the web's metrics."""

import datetime as dt
import json
import socket
import urllib.request

import pytest
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from jobs.models import SYSTEM_TENANT
from runs import canary, enqueue
from runs.models import Run
from tests.acceptance.test_processes import Processes
from tests.waiting import wait_until

pytestmark = [pytest.mark.acceptance, pytest.mark.concurrency, pytest.mark.django_db(transaction=True)]

NO_BACKOFF = {"retry_base_seconds": 0, "retry_max_seconds": 0, "overlap_policy": "allow"}
ONE_HOUR = dt.timedelta(hours=1)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def scrape(port):
    """{(name, sorted labels): value} from a process's /metrics, or {} while it is not listening yet."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
            text = response.read().decode()
    except OSError:
        return {}
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(samples, name, **labels):
    return samples.get((name, tuple(sorted(labels.items()))), 0)


def test_the_engine_processes_serve_metrics_that_move_as_runs_flow(
    acme, make_job, make_run, as_alice, client, settings
):
    settings.DUETIME_METRICS_TOKEN = "scrape-secret"  # the web's /metrics answers only its bearer (DEBUG is off)
    scraper = {"Authorization": "Bearer scrape-secret"}
    job = make_job(acme, "billing.close")
    enqueue.enqueue(job)
    enqueue.enqueue(job)
    # A run that fails twice and dies, and a lease its worker lost minutes ago (the scheduler reaps it).
    enqueue.enqueue(make_job(acme, "billing.fail", target_ref="tests.handlers.fail", max_attempts=2, **NO_BACKOFF))
    make_run(make_job(acme, "billing.stalled", **NO_BACKOFF), state="leased", due_at=timezone.now() - ONE_HOUR)
    scheduler_port, worker_port = str(free_port()), str(free_port())
    with Processes() as fleet:
        scheduler = fleet.start("scheduler", "run_scheduler", "--metrics-port", scheduler_port, DUETIME_CANARY=1)
        fleet.start("worker", "run_worker", "--metrics-port", worker_port, DUETIME_MOVE_LOG="stderr")

        def worker_saw_them_all():
            samples = scrape(worker_port)
            claimed = value(samples, "duetime_runs_claimed_total", tenant="acme", queue="default", priority="default")
            done = value(samples, "duetime_runs_completed_total", outcome="succeeded")
            failed = value(samples, "duetime_runs_completed_total", outcome="failed")
            return claimed >= 5 and done >= 3 and failed >= 2 and samples  # 2 + 2 attempts + the reaped run

        samples = wait_until(worker_saw_them_all, message="the worker's metrics to count every attempt")
        assert value(samples, "duetime_run_lateness_seconds_count", tenant="acme", priority="default") >= 3
        assert value(samples, "duetime_retries_total", cause="failed") >= 1
        assert value(samples, "duetime_dead_letters_created_total", tenant="acme", queue="default", priority="default")

        def scheduler_materialised_the_canaries():
            samples = scrape(scheduler_port)
            return value(samples, "duetime_runs_materialized_total", tenant=SYSTEM_TENANT) >= 64 and samples

        samples = wait_until(scheduler_materialised_the_canaries, message="the canaries to be materialised")
        assert value(samples, "duetime_scheduler_shards_held") == 64
        assert value(samples, "duetime_scheduler_tick_step_seconds_count", step="materialize") >= 1
        assert value(samples, "duetime_lease_expiries_total", tenant="acme", queue="default") == 1
        assert value(samples, "duetime_retries_total", cause="lease_expired") == 1
        assert Run.objects.filter(tenant__name=SYSTEM_TENANT).values("shard").distinct().count() == 64
        # A pass may wait for SQLite's write lock and retry (runs.loop): the state clears once one completes.
        wait_until(lambda: not canary.status().dead, message="the dead-man state to clear after a scheduler pass")

        scheduler.terminate()
        scheduler.wait(timeout=30)

        # The scheduler has exited: the dead-man state shows at once, in the web's metrics and the portal.
        web = {
            (s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(client.get("/metrics", headers=scraper).content.decode())
            for s in family.samples
        }
        assert value(web, "duetime_scheduler_nodes_alive") == 0
        assert value(web, "duetime_dead_letters_open", tenant="acme") == 1
        page = as_alice.get("/admin/dashboard/?tenant=acme")
        assert "No scheduler has materialised for" in page.content.decode()
        served = list(text_string_to_metric_families(client.get("/metrics", headers=scraper).content.decode()))
        requests = {s.labels["status"] for f in served if f.name == "duetime_http_requests" for s in f.samples}
        assert "200" in requests  # the web's own request counter, beside the database gauges

    # The worker's move log: a JSON line for each lease and completion of acme's runs, among its other output.
    _code, output = fleet.outputs["worker"]
    moves = [json.loads(line) for line in output.splitlines() if line.startswith('{"ts":')]
    # (A heartbeat racing its run's completion may be refused too: the run's lease had just ended.)
    acme_moves = [m for m in moves if m["job"] == "billing.close" and m["event"] in ("leased", "completed")]
    assert sorted((m["event"], m["attempt"]) for m in acme_moves) == [("completed", 1)] * 2 + [("leased", 1)] * 2
    assert {m["job"] for m in acme_moves} == {"billing.close"}
    assert len({(m["run"], m["fencing_token"], m["idempotency_key"]) for m in acme_moves}) == 2
