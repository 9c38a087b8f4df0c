"""`bench history` at a small size: days of history filled each into its partition, and the oldest dropped.

The steady runs around it are `bench steady`'s (real processes), not repeated here.
"""

import datetime as dt

import pytest
from django.db import connection

from bench import history
from bench.setup import bench_tenant
from runs import partitions
from runs.models import Attempt, Run


@pytest.fixture
def days(transactional_db):
    if connection.vendor != "postgresql":
        pytest.skip("history is partitioned on PostgreSQL only")
    today = history._today()
    filled = [today - dt.timedelta(days=n) for n in (61, 60, 59)]
    yield today, filled
    for day in filled:
        if day in partitions.days() or day in partitions.attached():
            partitions.drop(day)


def test_it_fills_each_day_into_its_partition_and_drops_the_oldest_past_the_retention(days):
    today, filled = days
    tenant, job = bench_tenant("history")
    history.fill(tenant, job, filled, 50)
    assert {d: Run.objects.filter(tenant=tenant, history_day=d).count() for d in filled} == dict.fromkeys(filled, 50)
    assert Attempt.objects.filter(run__tenant=tenant).count() == 150
    assert set(filled) <= set(partitions.days())
    dropper = history.Dropper(today, 59, delay=0)  # 59 days kept: the oldest filled day is past them
    dropper.run()
    assert dropper.took is not None and filled[0] not in partitions.days()
    assert Run.objects.filter(tenant=tenant).count() == 100
    history.hold_retention()
    assert history.database_size() > 0
