"""Real processes racing on the real database: each run leased exactly once."""

import json
import subprocess
import sys

import pytest

from bench.setup import insert_runs
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


def dt_now():
    from bench.setup import db_now

    return db_now()
