"""`bench startup`: real run_worker processes, timed from their spawn to their first lease."""

import pytest

from bench import startup
from runs.models import Run
from tests.conftest import engine_env


@pytest.mark.django_db(transaction=True)
def test_it_times_fresh_workers_from_spawn_to_their_first_lease(monkeypatch):
    monkeypatch.setenv("DATABASE_URL", engine_env()["DATABASE_URL"])  # the spawned workers use the test database
    result = startup.run({"repeat": 2})
    assert len(result["seconds"]) == 2 and all(seconds > 0 for seconds in result["seconds"])
    assert result["median_seconds"] == pytest.approx(sum(result["seconds"]) / 2, abs=0.001)
    leased_by = set(Run.objects.values_list("worker_id", flat=True))
    assert leased_by == {"bench-startup-0", "bench-startup-1"}, "each run was leased by its own fresh worker"
