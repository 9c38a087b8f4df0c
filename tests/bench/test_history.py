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


def test_the_side_without_history_detaches_the_filled_days_and_attaches_them_again(days):
    today, filled = days
    tenant, job = bench_tenant("history")
    history.fill(tenant, job, filled, 20)
    with history.detached(filled):
        assert not Run.objects.filter(tenant=tenant).exists(), "the engine sees none of the history"
        assert not Attempt.objects.filter(run__tenant=tenant).exists()
        assert set(filled) <= set(partitions.days()), "the days stay listed"
    assert Run.objects.filter(tenant=tenant).count() == 60 and Attempt.objects.filter(run__tenant=tenant).count() == 60


def test_a_day_an_earlier_run_left_detached_is_attached_again(days):
    today, filled = days
    tenant, job = bench_tenant("history")
    history.fill(tenant, job, filled, 10)
    with connection.cursor() as cursor:  # as a bench killed between its sides leaves it
        for table in partitions.TABLES:
            cursor.execute(f"ALTER TABLE {table} DETACH PARTITION {partitions.partition_name(table, filled[1])}")
    history.attach(partitions.days())
    assert Run.objects.filter(tenant=tenant, history_day=filled[1]).count() == 10
