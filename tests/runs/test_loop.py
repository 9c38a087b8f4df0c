"""The loop skeleton of run_scheduler and run_worker: steps until stopped, retries after a database error, --once."""

import logging

from django.db import OperationalError

from runs.loop import RETRY_SECONDS, run_loop

log = logging.getLogger("duetime.test")


class Stop:
    """A GracefulStop that a test flips, and whose sleeps are only written down."""

    def __init__(self):
        self.requested = False
        self.slept = []

    def sleep(self, seconds):
        self.slept.append(seconds)


def test_it_steps_and_rests_until_a_stop_is_requested():
    stop, rested = Stop(), []

    def tick():
        stop.requested = len(rested) == 2  # SIGTERM arrives during the third step
        return len(rested) + 1

    steps = run_loop(tick, rest=rested.append, stop=stop, log=log, name="worker w-1")

    assert steps == 3, "the step under way finishes"
    assert rested == [1, 2, 3]


def test_it_does_not_step_once_stopped():
    stop = Stop()
    stop.requested = True
    assert run_loop(lambda: 1 / 0, rest=print, stop=stop, log=log, name="worker w-1") == 0


def test_it_logs_a_database_error_and_tries_again_after_a_rest(caplog):
    stop, calls = Stop(), []

    def tick():
        calls.append(len(calls))
        if len(calls) == 1:
            raise OperationalError("server closed the connection unexpectedly")
        stop.requested = True
        return "done"

    with caplog.at_level(logging.ERROR, logger="duetime.test"):
        steps = run_loop(tick, rest=lambda result: None, stop=stop, log=log, name="scheduler node-a")

    assert (len(calls), steps) == (2, 1)
    assert stop.slept == [RETRY_SECONDS]
    assert "scheduler node-a: tick failed; retrying in 1 s" in caplog.text


def test_once_ends_the_loop_after_the_step_that_is_enough():
    stop, rested = Stop(), []
    steps = run_loop(lambda: "claimed", rest=rested.append, done=lambda result: True, stop=stop, log=log, name="w")
    assert (steps, rested) == (1, [])
