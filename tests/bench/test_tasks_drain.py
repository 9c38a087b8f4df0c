"""`bench tasks-drain`, small: Duetime's tasks backend and django-tasks-db, real workers on the test database."""

import importlib.util

import pytest
from django.core.management.base import CommandError

from bench import tasks_drain
from tests.conftest import engine_env

pytestmark = [pytest.mark.acceptance, pytest.mark.django_db(transaction=True)]
OPTIONS = {"workers": 1, "concurrency": 10, "batch": 10, "pool": "threads", "timeout": 120}


def test_it_says_how_to_install_the_peer_when_it_is_missing(monkeypatch):
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)

    with pytest.raises(CommandError, match=r"pip install -r requirements-bench.txt"):
        tasks_drain.run({**OPTIONS, "runs": 10})


def test_it_enqueues_and_drains_both_sides(monkeypatch):
    pytest.importorskip("django_tasks_db", reason="the peer is installed by requirements-bench.txt only")
    monkeypatch.setenv("DATABASE_URL", engine_env()["DATABASE_URL"])  # the spawned processes use the test database
    monkeypatch.setenv("DUETIME_TASK_MODULES", "bench.handlers")

    result = tasks_drain.run({**OPTIONS, "runs": 30})

    assert result["workload"] == "tasks-drain"
    assert (result["duetime"]["drain"]["succeeded"], result["duetime"]["drain"]["early"]) == (31, 0)
    assert result["django_tasks_db"]["drain"]["succeeded"] == 31 and not result["django_tasks_db"]["drain"]["timed_out"]
    assert result["enqueue_ratio"] > 0 and result["drain_ratio"] > 0
