"""The real commands in subprocesses, stopped the hard ways: SIGKILL, SIGSTOP, SIGTERM.

Real clock with generous bounds. Leases are shortened to 2 s (heartbeat 0.5 s)
through the environment, as an operator would.
"""

import datetime as dt
import json
import signal
import sys

import pytest
from django.utils import timezone

from dlq.models import DeadLetter
from jobs.definitions import save_definition
from jobs.models import JobDefinition
from runs import enqueue
from runs.models import Attempt, Run, ShardLease
from tests.conftest import engine_env
from tests.spawned import output_of, spawn, stop
from tests.waiting import wait_until

pytestmark = [pytest.mark.acceptance, pytest.mark.concurrency, pytest.mark.django_db(transaction=True)]

FAST = {"DUETIME_LEASE_SECONDS": 2, "DUETIME_HEARTBEAT_SECONDS": 0.5, "DUETIME_POLL_SECONDS": 0.05}


def start(*args, **env):
    return spawn([sys.executable, "manage.py", *args, "--skip-checks"], env=engine_env(**{**FAST, **env}))


class Processes:
    """Start commands; on leaving, stop them all (SIGTERM) and print their output if the test failed."""

    def __init__(self):
        self.procs = {}

    def start(self, name, *args, **env):
        self.procs[name] = start(*args, **env)
        return self.procs[name]

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        self.outputs = {name: stop(proc) for name, proc in self.procs.items()}
        if exc_type is not None:
            for name, (code, out) in self.outputs.items():
                print(f"--- {name} exited {code} ---\n{out[-3000:]}")


def held_job(acme, make_job, report, **fields):
    job = make_job(
        acme,
        "held",
        target_ref="tests.handlers.hold_then_report",
        overlap_policy="allow",
        retry_base_seconds=0,
        retry_max_seconds=0,
        payload={"report": str(report), "hold": 30},
        **fields,
    )
    run, _ = enqueue.enqueue(job)
    return job, run


def test_it_retries_a_run_whose_worker_was_killed_and_finishes_it(acme, make_job, tmp_path):
    job, run = held_job(acme, make_job, tmp_path)
    with Processes() as fleet:
        first = fleet.start("killed", "run_worker", "--worker-id", "w-killed")
        wait_until(lambda: (tmp_path / "1.started").exists(), message="attempt 1 to start")
        first.kill()  # SIGKILL mid-run: no goodbye, no release
        first.wait()
        fleet.start("scheduler", "run_scheduler")
        fleet.start("second", "run_worker", "--worker-id", "w-second")
        wait_until(lambda: Run.objects.get(pk=run.pk).state == "succeeded", message="the retry to succeed")
    outcomes = list(Attempt.objects.filter(run=run).order_by("attempt").values_list("worker_id", "outcome"))
    assert outcomes == [("w-killed", "lease_expired"), ("w-second", "succeeded")]
    report = json.loads((tmp_path / "2.json").read_text())
    assert report["key"] == run.idempotency_key


def test_it_fences_off_a_paused_worker_and_lets_the_rerun_win(acme, make_job, tmp_path):
    job, run = held_job(acme, make_job, tmp_path)
    with Processes() as fleet:
        paused = fleet.start("paused", "run_worker", "--worker-id", "w-paused")
        wait_until(lambda: (tmp_path / "1.started").exists(), message="attempt 1 to start")
        first_token = int((tmp_path / "1.started").read_text())
        paused.send_signal(signal.SIGSTOP)  # a long GC pause: no heartbeats
        try:
            fleet.start("scheduler", "run_scheduler")
            fleet.start("rescuer", "run_worker", "--worker-id", "w-rescuer")
            wait_until(lambda: Run.objects.get(pk=run.pk).state == "succeeded", message="the re-run to succeed")
        finally:
            paused.send_signal(signal.SIGCONT)
        wait_until(lambda: (tmp_path / "1.json").exists(), message="the paused handler to notice")
        wait_until(lambda: Attempt.objects.filter(run=run).count() == 2, message="both attempts recorded")
        # No wait for the paused worker's (refused) completion: SIGTERM drains, and the drain completes it.
    code, output = fleet.outputs["paused"]
    seen = json.loads((tmp_path / "1.json").read_text())
    assert seen["lease_lost"], "its heartbeat was refused, so the handler was told to stop"
    assert "completion refused as stale" in output
    run.refresh_from_db()
    second_token = json.loads((tmp_path / "2.json").read_text())["token"]
    assert run.state == "succeeded" and run.fencing_token == second_token > first_token
    outcomes = list(Attempt.objects.filter(run=run).order_by("attempt").values_list("worker_id", "outcome"))
    assert outcomes == [("w-paused", "lease_expired"), ("w-rescuer", "succeeded")]


def test_it_runs_a_scheduled_job_on_time_never_early(acme, make_job):
    warm_up, _ = enqueue.enqueue(make_job(acme, "warm-up"))
    with Processes() as fleet:
        fleet.start("scheduler", "run_scheduler")
        fleet.start("worker", "run_worker")
        # Both in their loops before the clock starts, however slowly a busy machine starts them.
        wait_until(lambda: ShardLease.objects.filter(name__startswith="node:").exists(), message="the scheduler")
        wait_until(lambda: Run.objects.filter(pk=warm_up.pk, state="succeeded").exists(), message="the worker")
        # The real clock: the scheduler and worker processes compare due times with the database's.
        due = timezone.now().replace(microsecond=0) + dt.timedelta(seconds=3)
        job = JobDefinition(
            tenant=acme,
            name="launch",
            schedule_kind="at",
            run_at=due,
            target_kind="python",
            target_ref="tests.handlers.noop",
        )
        save_definition(job, "test")
        run = wait_until(lambda: Run.objects.filter(job=job, state="succeeded").first(), message="the run to succeed")
    attempt = Attempt.objects.get(run=run)
    assert run.due_at == due
    assert attempt.started_at >= due, "never early"  # how soon after: `manage.py bench lateness` measures it


def test_it_dead_letters_a_job_that_keeps_failing(acme, make_job):
    job = make_job(
        acme, "doomed", target_ref="tests.handlers.fail", max_attempts=2, retry_base_seconds=0, retry_max_seconds=0
    )
    run, _ = enqueue.enqueue(job)
    with Processes() as fleet:
        fleet.start("worker", "run_worker")
        wait_until(lambda: Run.objects.get(pk=run.pk).state == "dead", message="the run to die")
    assert DeadLetter.objects.get(run=run).last_error.startswith("RuntimeError: always fails")


@pytest.mark.parametrize("command", ["run_scheduler", "run_worker"])
def test_it_stops_gracefully_on_sigterm(acme, make_job, command):
    run, _ = enqueue.enqueue(make_job(acme, "ping"))
    # Inside the loop once it has done a step: the scheduler joined the shard table, the worker ran `ping`.
    stepped = {
        "run_scheduler": lambda: ShardLease.objects.filter(name__startswith="node:").exists(),
        "run_worker": lambda: Run.objects.filter(pk=run.pk, state="succeeded").exists(),
    }[command]
    proc = start(command)
    wait_until(lambda: stepped() or proc.poll() is not None, message=f"{command} to do one step")
    assert proc.poll() is None, output_of(proc)
    code, output = stop(proc, timeout=15)
    assert code == 0, output
    assert "stopped" in output


def test_a_processes_worker_drains_on_sigterm_and_releases_what_still_runs(acme, make_job, tmp_path):
    job, run = held_job(acme, make_job, tmp_path)
    proc = start("run_worker", "--pool", "processes", "--concurrency", "2", "--grace", "1")
    wait_until(lambda: (tmp_path / "1.started").exists() or proc.poll() is not None, message="attempt 1 to start")
    assert proc.poll() is None, output_of(proc)
    code, output = stop(proc, timeout=15)
    assert code == 0, output
    assert "stopped (1 leases released)" in output
    run.refresh_from_db()
    assert (run.state, run.attempt) == ("scheduled", 0), "the attempt is given back, not spent"
