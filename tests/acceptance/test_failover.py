"""Scheduler failover: SIGKILL the scheduler that owns the most shards, three times, with occurrences always due.

The short form of `manage.py bench failover` (5 minutes, a kill every 30 s):
three real run_scheduler processes on PostgreSQL, the look-ahead as short as
`manage.py check` allows, each killed node replaced at once. Asserted from the
database: every shard of a killed node owned again, and every occurrence due
meanwhile materialised once, before it was due. How fast the shards move is a
figure of `manage.py bench failover` (docs/performance.md), not an assertion here.
"""

import pytest
from django.db import connection
from django.db.models import Count, F

from bench import failover
from runs.models import Run
from tests.conftest import engine_env

pytestmark = [pytest.mark.acceptance, pytest.mark.concurrency, pytest.mark.django_db(transaction=True)]
postgres_only = pytest.mark.skipif(connection.vendor != "postgresql", reason="three schedulers need PostgreSQL")


@postgres_only
def test_killing_the_busiest_scheduler_loses_no_occurrence_and_its_shards_move(tmp_path):
    try:
        figures = failover.drill(kills=3, schedulers=3, env=engine_env(), kill_every=25, log_dir=tmp_path)
    finally:
        for log in sorted(tmp_path.glob("*.log")):  # shown if the test failed
            print(f"--- {log.name} ---\n{log.read_text()[-2000:]}")
    print(figures)
    assert figures["kills"] == 3
    assert figures["shards_never_taken_over"] == 0 and figures["shards_taken_over"] >= 3 * 20  # 64 / 3 each
    assert figures["occurrences_due"] >= 3 * 25 / failover.AT_SPACING  # an `at` job due every half second at least
    assert (figures["missed"], figures["doubled"], figures["late"], figures["skipped"]) == (0, 0, 0, 0)
    # The same, straight from the runs table: no run created after its due time, none twice.
    assert not Run.objects.filter(created_at__gt=F("due_at")).exists()
    assert not Run.objects.values("job_id", "due_at").annotate(n=Count("id")).filter(n__gt=1).exists()
