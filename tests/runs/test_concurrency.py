"""Real processes racing on the real database: each run leased exactly once."""

import json
import subprocess
import sys
import time

import pytest

from bench.setup import insert_runs
from runs.models import Attempt, Run
from tests.conftest import engine_env, is_postgres

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
    wait_for(lambda: all((tmp_path / f"claimer-{i}.json.ready").exists() for i in range(claimers)))
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


def wait_for(condition, timeout=60):
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "claimers did not start"
        time.sleep(0.05)


def dt_now():
    from bench.setup import db_now

    return db_now()
