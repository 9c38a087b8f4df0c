"""`bench materialize`: the design's mix of schedules, its rates, and definitions filled without the ORM."""

import datetime as dt
from collections import Counter

import pytest

from bench import materialize as bench
from jobs import cron, jitter
from jobs.models import JobDefinition, Tenant, shard_for
from runs import materialize
from runs.models import Run

BURST = dt.datetime(2026, 6, 1, 9, 17, tzinfo=dt.UTC)  # the bench's "top of the hour" is minute 17


def test_the_mix_gives_the_designs_rates_at_ten_million_definitions():
    assert bench.rates(10_000_000) == {
        "average_runs_per_s": 580.4,  # the design: about 580
        "top_of_hour_runs": 600_000,
        "top_of_hour_runs_per_s": 10_000.0,  # inserted within the 60 s look-ahead: the design's 10,000/s
    }
    assert bench.rates(1_000_000)["top_of_hour_runs"] == 60_000  # scaled down in proportion


def test_every_thousand_definitions_hold_the_mix_exactly():
    for start in (0, 1000, 7000):
        kinds = Counter(bench.kind_of(i) for i in range(start, start + 1000))
        assert kinds == {kind: share for share, kind in bench.MIX}


@pytest.mark.django_db
def test_it_fills_valid_definitions_whose_burst_materialises_at_once():
    made = bench.create_definitions("bench-materialize-t", 2_000, BURST)
    assert Tenant.objects.filter(name__startswith="bench-materialize-t-").count() == 20
    jobs = JobDefinition.objects.filter(tenant__name__startswith="bench-materialize-t-").select_related("tenant")
    assert jobs.count() == 2_000 and sum(made.values()) == 2_000
    for job in jobs[::37]:  # a sample: each one as the save path would have made it
        job.full_clean()
        assert job.shard == shard_for(job.tenant.name, job.name)
        assert job.next_due_at == cron.occurrences(job.cron_expr, job.time_zone, BURST - dt.timedelta(minutes=1), 1)[0]
        assert job.jitter_seconds == jitter.default_for(job, BURST) and job.jitter_is_default
    at_burst = jobs.filter(next_due_at=BURST).count()
    assert 110 <= at_burst <= 130  # 60 per 1,000: every minute, hourly at :00, a 24th of the daily ones at :00
    assert {expr.split()[0] for expr in jobs.filter(next_due_at=BURST).values_list("cron_expr", flat=True)} <= {
        "*",
        "17",
    }
    assert len({zone for _, zone in made}) == len(bench.ZONES)

    result = materialize.materialize(BURST - dt.timedelta(seconds=30), lookahead=60)
    assert result.inserted == at_burst
    assert set(Run.objects.values_list("due_at", flat=True)) == {BURST}


def test_the_lead_percentiles_say_how_far_ahead_nearly_all_were():
    leads = [float(n) for n in range(1, 101)]  # 1 s to 100 s ahead
    # p99: 99 of the 100 were inserted at least 2 s ahead; the worst, 1 s.
    assert bench._leads(leads) == {"materialised": 100, "p50": 50.0, "p99": 2.0, "worst": 1.0}
    assert bench._leads([-2.5, 30.0])["worst"] == -2.5
    assert bench._leads([])["p99"] is None
