"""Real processes racing on the real database: each run leased exactly once."""

import json
import signal
import subprocess
import sys
import threading

import pytest
from django.db import DatabaseError, connection, transaction

from bench.setup import insert_runs
from jobs.models import Tenant
from runs import claims
from runs.models import Attempt, Run
from tests.conftest import engine_env, is_postgres
from tests.waiting import wait_until

pytestmark = [pytest.mark.concurrency, pytest.mark.django_db(transaction=True)]


def test_it_leases_each_of_10000_due_runs_exactly_once_across_processes(acme, make_job, tmp_path):
    # SQLite serialises every writer and its busy wait is not fair (a process
    # that lost a few times backs off to 100 ms sleeps), so it races two
    # processes over fewer runs; PostgreSQL races four over the full 10,000.
    runs, claimers, pause = (10_000, 4, 0.002) if is_postgres() else (3_000, 2, 0.02)
    job = make_job(acme, "contended", overlap_policy="allow", queue="contended")
    insert_runs(job, dt_now(), runs)
    outs = [tmp_path / f"claimer-{i}.json" for i in range(claimers)]
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "tests.runs.claimer", "contended", str(out)], env=engine_env(CLAIMER_PAUSE=pause)
        )
        for out in outs
    ]
    ready = [tmp_path / f"claimer-{i}.json.ready" for i in range(claimers)]
    wait_until(lambda: all(path.exists() for path in ready), message="every claimer to start")
    (tmp_path / "go").touch()
    for proc in procs:
        assert proc.wait(timeout=240) == 0
    claimed = [run_id for out in outs for run_id in json.loads(out.read_text())]
    assert len(claimed) == runs, "every run claimed"
    assert len(set(claimed)) == runs, "no run leased twice"
    if is_postgres():  # SQLite may hand one process every lock; PostgreSQL must share the work
        assert all(json.loads(out.read_text()) for out in outs), "every process got work: they really raced"
    assert Run.objects.filter(job=job, state="succeeded").count() == runs
    assert Attempt.objects.filter(run__job=job).count() == runs
    tokens = list(Attempt.objects.filter(run__job=job).values_list("fencing_token", flat=True))
    assert len(set(tokens)) == runs, "fencing tokens never repeat"


def frozen_claimer(queue, claimed, release, outcome):
    """Claim inside a transaction, then stall in it (a paused worker) until `release` is set."""
    try:
        with transaction.atomic():
            outcome["leases"] = claims.claim([queue], 10, "frozen")
            claimed.set()
            release.wait(60)
        outcome["end"] = "committed"
    except DatabaseError:
        outcome["end"] = "cut off by the server"
    finally:
        claimed.set()
        connection.close()


@pytest.mark.skipif("not is_postgres()", reason="row locks and session timeouts are PostgreSQL's")
def test_a_claimer_frozen_in_its_transaction_stalls_no_other_tenant_and_not_its_own_for_long(
    acme, globex, make_job, make_run, monkeypatch
):
    monkeypatch.setattr(claims, "CLAIM_IDLE_TIMEOUT", "2s")
    now = dt_now()
    acme_runs = [make_run(make_job(acme, "acme.job", queue="q", overlap_policy="allow"), due_at=now)]
    claimed, release, outcome = threading.Event(), threading.Event(), {}
    frozen = threading.Thread(target=frozen_claimer, args=("q", claimed, release, outcome))
    frozen.start()
    try:
        claimed.wait(30)
        assert [lease.run_id for lease in outcome["leases"]] == [acme_runs[0].pk]
        globex_run = make_run(make_job(globex, "globex.job", queue="q", overlap_policy="allow"), due_at=now)
        # acme's row is locked by the frozen claim: this claim passes it over instead of waiting.
        assert [lease.run_id for lease in claims.claim(["q"], 10, "alive")] == [globex_run.pk]
        # The server ends the frozen transaction; its lease never happened, and acme's run is served.
        taken = wait_until(lambda: claims.claim(["q"], 10, "alive"), timeout=30, message="acme's run to be claimed")
        assert [lease.run_id for lease in taken] == [acme_runs[0].pk]
    finally:
        release.set()
        frozen.join(60)
    assert outcome["end"] == "cut off by the server"
    assert Run.objects.get(pk=acme_runs[0].pk).worker_id == "alive"


@pytest.mark.skipif("not is_postgres()", reason="row locks and session timeouts are PostgreSQL's")
def test_a_claimer_stopped_by_sigstop_holding_its_tenant_delays_that_tenants_runs_less_than_a_second(
    acme, make_job, make_run, tmp_path
):
    job = make_job(acme, "acme.job", queue="q", overlap_policy="allow")
    runs = [make_run(job, due_at=dt_now()) for _ in range(3)]
    ready = tmp_path / "frozen.json"
    frozen = subprocess.Popen([sys.executable, "-m", "tests.runs.frozen_claimer", "q", str(ready)], env=engine_env())
    try:
        wait_until(ready.exists, timeout=60, message="the claimer to lock acme")
        frozen.send_signal(signal.SIGSTOP)
        holder = json.loads(ready.read_text())
        assert holder["tenants"] == [acme.pk]
        with (
            connection.cursor() as cursor
        ):  # when the frozen session went idle holding acme's row: the database's clock
            cursor.execute("SELECT state_change FROM pg_stat_activity WHERE pid = %s", [holder["backend"]])
            (frozen_since,) = cursor.fetchone()
        # A live worker's claims: acme's runs start although the frozen claimer never wakes up.
        wait_until(lambda: claims.claim(["q"], 10, "alive"), timeout=60, interval=0.01, message="acme's runs to start")
        started = Run.objects.filter(pk__in=[r.pk for r in runs], worker_id="alive").order_by("started_at")
        assert started.count() == 3
        assert (started[0].started_at - frozen_since).total_seconds() < 1.0, "acme waited a second or more"
    finally:
        frozen.send_signal(signal.SIGCONT)
        frozen.kill()
        frozen.wait(30)


def greedy_claimer(queue, start, leased):
    """Claim 30 times, never completing (an empty claim may just mean another holds the tenant)."""
    try:
        start.wait(30)
        for _ in range(30):
            leased.extend(lease.run_id for lease in claims.claim([queue], 3, f"greedy-{threading.get_ident()}"))
    finally:
        connection.close()


def test_racing_claimers_never_lease_past_a_tenants_concurrent_cap(acme, make_job):
    Tenant.objects.filter(pk=acme.pk).update(max_concurrent_runs=7)
    insert_runs(make_job(acme, "capped", queue="capped", overlap_policy="allow"), dt_now(), 200)
    start, leased = threading.Event(), []
    threads = [threading.Thread(target=greedy_claimer, args=("capped", start, leased)) for _ in range(4)]
    for thread in threads:
        thread.start()
    start.set()
    for thread in threads:
        thread.join(120)
    assert Run.objects.filter(tenant=acme, state="leased").count() == 7
    assert len(leased) == len(set(leased)) == 7


def steady_claimer(queue, stop, leased, tries, pause):
    """Claim batches of 2 until told to stop, never completing, as a busy worker would; count the claims."""
    try:
        while not stop.is_set():
            leased.extend(lease.run_id for lease in claims.claim([queue], 2, "steady"))
            tries.append(1)
            stop.wait(pause)  # as a worker does between batches: SQLite's busy wait is not fair to the pause
    finally:
        connection.close()


def test_no_claim_leases_a_run_of_a_tenant_once_its_pause_returns(acme, make_job):
    from runs import controls

    insert_runs(make_job(acme, "busy", queue="busy", overlap_policy="allow"), dt_now(), 2000)
    stop, leased, tries = threading.Event(), [], []
    pause = 0.002 if is_postgres() else 0.02
    claimer = threading.Thread(target=steady_claimer, args=("busy", stop, leased, tries, pause))
    claimer.start()
    try:
        wait_until(lambda: len(leased) >= 10, message="the claimer to lease some runs")
        controls.pause_tenant(acme, actor="test")  # while claims are in flight
        at_pause = Run.objects.filter(tenant=acme, state="leased").count()
        tried = len(tries)
        wait_until(lambda: len(tries) >= tried + 20, message="20 more claims, all of them after the pause")
    finally:
        stop.set()
        claimer.join(60)
    assert len(leased) == at_pause < 2000, "nothing leased after the pause returned"
    assert Run.objects.filter(tenant=acme, state="leased").count() == at_pause


def dt_now():
    from bench.setup import db_now

    return db_now()
