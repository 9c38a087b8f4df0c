"""`bench tenants`' plans at a small size: the claim's queries and the ready-backlog gauges' query, each
explained and run on the design's shape, and nothing of it left behind."""

import pytest
from django.db import connection

from bench import explain
from bench.setup import bench_tenant, design_tenants
from runs.models import Run


@pytest.fixture
def design(db):
    if connection.vendor != "postgresql":
        pytest.skip("the design shape is built with PostgreSQL's generate_series")
    jobs = [bench_tenant(f"explain-active-{i}", queue="explain-q")[1] for i in range(3)]
    design_tenants("explain", 20, "explain-q", 40)
    return jobs


def test_it_explains_the_claim_and_the_backlog_gauges_and_leaves_no_run_behind(design, capsys):
    before = Run.objects.count()

    timings = explain.claim_plans("explain-q", [job.tenant_id for job in design], 6, "small design shape")

    assert set(timings) == {"lock_ready_tenants", "claim_candidates", "ready_backlog"}
    assert all(ms > 0 for ms in timings.values())
    printed = capsys.readouterr().out
    assert "-- ready_backlog" in printed and "runs_readymark" in printed and "Buffers:" in printed
    assert Run.objects.count() == before  # the due runs it made were rolled back
