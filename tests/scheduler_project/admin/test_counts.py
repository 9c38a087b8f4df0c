"""The one capped count: exact below the cap, "N+" past it, for lists, dashboards and previews alike."""

import pytest

from runs.models import Run
from scheduler_project.admin import counts
from scheduler_project.admin.counts import CappedCount, capped_count
from scheduler_project.admin.pagination import CappedPaginator


@pytest.fixture
def four_runs(acme, make_job, make_run, clock, monkeypatch):
    monkeypatch.setattr(counts, "COUNT_CAP", 3)
    job = make_job(acme, "billing.export")
    return [make_run(job, due_at=clock.ago(minutes=m)) for m in range(4)]


def test_it_counts_exactly_up_to_the_cap_and_says_more_past_it(four_runs):
    assert capped_count(Run.objects.filter(pk__in=[r.pk for r in four_runs[:3]])) == (3, False)
    past = capped_count(Run.objects.all())
    assert past == (3, True)
    assert str(past) == "3+"


def test_it_writes_large_counts_with_thousands_separators():
    assert str(CappedCount(1234, False)) == "1,234"
    assert str(CappedCount(100_000, True)) == "100,000+"


def test_it_pages_a_list_no_further_than_one_row_past_the_cap(four_runs):
    pages = CappedPaginator(Run.objects.order_by("-id"), per_page=1)
    assert pages.count == 4  # cap + 1: "there are more" without counting them
    assert pages.num_pages == 4
