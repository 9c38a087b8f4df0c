"""Fixtures shared by the engine's tests."""

import datetime as dt

import pytest

from jobs.definitions import save_definition
from jobs.models import JobDefinition
from tests.conftest import NOW


@pytest.fixture
def every_minute(acme):
    """acme's `ping`, every minute in Berlin, saved just before NOW: its next occurrence is NOW."""
    job = JobDefinition(
        tenant=acme,
        name="ping",
        schedule_kind="cron",
        cron_expr="* * * * *",
        time_zone="Europe/Berlin",
        target_kind="python",
        target_ref="tests.handlers.noop",
    )
    save_definition(job, "test", now=NOW - dt.timedelta(seconds=30))
    return job
