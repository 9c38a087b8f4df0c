"""`bench metrics-overhead` (and move-log-overhead, the same side-by-side drains): real processes, both sides."""

import pytest
from django.core.management.base import CommandError

from bench import overhead, processes
from tests.conftest import engine_env

OPTIONS = {"runs": 30, "repeat": 1, "workers": 1, "concurrency": 10, "batch": 10, "pool": "threads", "timeout": 120}


@pytest.mark.django_db(transaction=True)
def test_it_drains_with_the_metrics_scraped_and_without_and_compares_the_medians(monkeypatch):
    monkeypatch.setenv("DATABASE_URL", engine_env()["DATABASE_URL"])  # the spawned processes use the test database
    monkeypatch.setattr(overhead, "settle", lambda: None)  # no VACUUM and CHECKPOINT before each of 30 runs
    monkeypatch.setattr(processes, "READY_WAIT", 1.5)

    result = overhead.metrics_overhead(OPTIONS)

    assert result["workload"] == "metrics-overhead" and (result["lost"], result["duplicates"]) == (0, 0)
    assert len(result["rates"]["off"]) == len(result["rates"]["on"]) == 1
    assert result["ratio_on_to_off"] == pytest.approx(result["on_runs_per_s"] / result["off_runs_per_s"], abs=0.001)
    (on,) = result["sides"]["on"]
    assert on["database_scrapes"] >= 1 and on["engine_scrapes"] + on["refused"] >= 2  # two ports, each tried
    assert all(side[0]["engine_cpu_us_per_run"] >= 0 for side in result["sides"].values())  # (10 ms ticks)


def test_it_refuses_a_comparison_of_no_drains():
    with pytest.raises(CommandError, match="--repeat, --runs and --workers of at least 1"):
        overhead.move_log_overhead({**OPTIONS, "repeat": 0})
