"""`bench portal` at a small size: it fills the tables with INSERT ... SELECT and times every page."""

import pytest
from django.db import connection

from bench import portal
from runs.models import Run


@pytest.mark.django_db(transaction=True)
def test_it_fills_a_tenant_and_reports_p95_per_page():
    if connection.vendor != "postgresql":
        pytest.skip("bench portal fills PostgreSQL with generate_series")
    result = portal.run({"runs": 30_000, "repeat": 2})
    tenant = Run.objects.filter(idempotency_key="bench@0").values_list("tenant__name", flat=True).get()
    assert tenant == "bench-portal" and result["filled"]
    assert Run.objects.count() == 30_000
    states = set(Run.objects.values_list("state", flat=True).distinct())
    assert states == {"succeeded", "dead", "cancelled", "skipped", "scheduled", "leased", "retry_wait"}
    assert set(result["pages"]) >= {
        "overview",
        "lateness",
        "heatmap",
        "job_page",
        "run_list",
        "job_list",
        "dead_letters",
    }
    assert all(page["p95_ms"] > 0 for page in result["pages"].values())
    assert portal.run({"runs": 30_000, "repeat": 1})["filled"] is False  # reused, not filled again
