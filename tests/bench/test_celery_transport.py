"""`bench celery-drain` and `celery-steady`, small: a real Celery worker, dispatcher and scheduler on RabbitMQ."""

import pytest

from bench import celery_transport
from tests.conftest import engine_env

pytestmark = [pytest.mark.acceptance, pytest.mark.django_db(transaction=True)]
OPTIONS = {"children": 2, "batch": 100, "timeout": 120}


@pytest.fixture
def spawned_on_the_test_database(monkeypatch):
    monkeypatch.setenv("DATABASE_URL", engine_env()["DATABASE_URL"])  # the spawned processes use the test database
    monkeypatch.setenv("DUETIME_TASK_MODULES", "bench.handlers")


def test_it_drains_through_duetime_and_plain_celery_side_by_side(spawned_on_the_test_database):
    result = celery_transport.drain({**OPTIONS, "runs": 60})
    assert result["workload"] == "celery-drain" and result["broker"] == "amqp"
    assert (result["duetime"]["succeeded"], result["duetime"]["lost"], result["duetime"]["early"]) == (60, 0, 0)
    assert result["plain_celery"]["executed"] == 60
    assert result["ratio_to_plain_celery"] > 0


def test_it_measures_lateness_of_both_at_a_steady_rate(spawned_on_the_test_database):
    result = celery_transport.steady({**OPTIONS, "rate": 20.0, "seconds": 1.0})
    assert (result["duetime"]["succeeded"], result["duetime"]["early"]) == (20, 0)
    assert result["plain_celery"]["executed"] == 20
    assert (
        result["duetime"]["lateness_ms"]["p99"] is not None and result["plain_celery"]["lateness_ms"]["p99"] is not None
    )
