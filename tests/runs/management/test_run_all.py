"""run_all: what it starts and says (its worker's pool), and the restart back-off of a child that keeps dying
(a killed child: tests/acceptance/test_faults.py)."""

import io

import pytest
from django.core.management import call_command

from runs.management.commands import run_all
from runs.management.commands.run_all import MAX_BACKOFF, STEADY_SECONDS, Child, next_backoff


def test_the_back_off_doubles_from_one_second_to_a_minute_while_a_child_keeps_dying():
    waits, backoff = [], 0.5
    for _ in range(9):
        backoff = next_backoff(backoff, uptime=0.2)
        waits.append(backoff)
    assert waits == [1, 2, 4, 8, 16, 32, 60, 60, 60]
    assert MAX_BACKOFF == 60


def test_the_back_off_starts_again_at_one_second_once_a_child_stayed_up():
    assert next_backoff(60, uptime=STEADY_SECONDS) == 1
    assert next_backoff(60, uptime=STEADY_SECONDS - 1) == 60


def test_a_dead_child_is_restarted_only_once_its_back_off_passed():
    said = []
    child = Child("crasher", ["false"], said.append)
    child.process.wait()
    child.watch(now=child.started + 0.1)
    first = child.process
    assert said == ["crasher exited with code 1; restarting in 1 s"]
    child.watch(now=child.started + 0.5)
    assert child.process is first, "still backing off"
    child.watch(now=child.started + 1.2)
    assert child.process is not first and said[-1] == "restarting crasher"
    child.process.wait()
    child.watch(now=child.started + 0.1)
    assert said[-1] == "crasher exited with code 1; restarting in 2 s"


class StartedChild:
    """Stands for run_all's Child: records the command it would start."""

    started = {}

    def __init__(self, name, command, say):
        StartedChild.started[name] = command

    def watch(self, now):
        pass

    def terminate(self):
        pass

    def wait(self, deadline):
        pass


class StopAfterTwoSleeps:
    """Stands for GracefulStop: lets the command's loop turn twice (enough to print its URL), then stops it."""

    def __init__(self):
        self.sleeps = 0

    @property
    def requested(self):
        return self.sleeps >= 2

    def sleep(self, seconds):
        self.sleeps += 1


@pytest.fixture
def started(monkeypatch):
    """run_all with its children recorded instead of started, and a web process that answers at once."""
    StartedChild.started = {}
    monkeypatch.setattr(run_all, "Child", StartedChild)
    monkeypatch.setattr(run_all, "GracefulStop", StopAfterTwoSleeps)
    monkeypatch.setattr(run_all, "accepts_connections", lambda host, port: True)
    return StartedChild.started


def test_it_runs_its_worker_on_threads_by_default_and_says_so_with_the_url(started):
    out = io.StringIO()
    call_command("run_all", "--port", "6581", stdout=out)
    assert started["worker"][-2:] == ["--pool", "threads"]
    lines = out.getvalue().splitlines()
    url = lines.index("  Duetime is running at http://127.0.0.1:6581/admin/  (Ctrl-C to stop)")
    assert lines[url + 1] == (
        "  Worker pool: threads (a handler past its timeout is recorded timed_out but keeps running; "
        "run_all --pool processes, or run_worker --pool processes in production, stops it)."
    )


def test_it_runs_its_worker_on_processes_when_asked_and_says_so(started):
    out = io.StringIO()
    call_command("run_all", "--port", "6581", "--pool", "processes", stdout=out)
    assert started["worker"][-2:] == ["--pool", "processes"]
    assert "  Worker pool: processes (a handler past its timeout is killed)." in out.getvalue().splitlines()
