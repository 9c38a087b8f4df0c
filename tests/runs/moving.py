"""A call racing a completion that moves its run into history (PostgreSQL's partitions) under the call's lock."""

import threading

from django.db import connection, transaction

from runs import transitions
from runs.transitions import Completion, StaleLease
from tests.waiting import wait_until


def blocked_on_a_row_lock():
    """How many sessions of the test database wait for a lock."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database()"
        )
        return cursor.fetchone()[0]


def race_a_completion(run_id, fencing_token, now, call, *, waiting_for):
    """Complete the run in a transaction held open, start `call()` in another thread, commit once it waits.

    Returns what the call was told: "went through", "stale" (StaleLease), or
    the repr of any other error. `waiting_for` names the wait in a timeout.
    """
    moved, commit = threading.Event(), threading.Event()

    def completing():
        try:
            with transaction.atomic():
                transitions.complete_runs([Completion(run_id, fencing_token, "succeeded")], now=now)
                moved.set()
                commit.wait(30)
        finally:
            connection.close()

    told = {}

    def racing():
        try:
            call()
            told["answer"] = "went through"
        except StaleLease:
            told["answer"] = "stale"
        except Exception as error:  # noqa: BLE001 - the test reports what it got
            told["answer"] = repr(error)
        finally:
            connection.close()

    first = threading.Thread(target=completing)
    first.start()
    assert moved.wait(30)
    second = threading.Thread(target=racing)
    second.start()
    wait_until(blocked_on_a_row_lock, message=waiting_for)
    commit.set()
    first.join(30)
    second.join(30)
    return told["answer"]
