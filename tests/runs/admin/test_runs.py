"""The run list: the derived `ready` filter, attempts inline, and cancel through the engine."""

from django.urls import reverse

from jobs.models import AuditEntry
from runs.models import Attempt, Run
from tests.fixtures.portal import action, confirm

RUNS = reverse("admin:runs_run_changelist")


def test_it_filters_ready_runs_as_derived_from_available_at(as_alice, acme, make_job, make_run, wall_clock):
    job = make_job(acme, "queue.drain")
    # The real clock: the filter derives "ready" from it.
    due = make_run(job, due_at=wall_clock.ago(minutes=1), idempotency_key="due-now")
    make_run(job, due_at=wall_clock.ahead(hours=1), idempotency_key="later")
    retry = make_run(job, state="retry_wait", due_at=wall_clock.ago(minutes=5), idempotency_key="retry")
    page = as_alice.get(RUNS + "?state=ready").content.decode()
    assert f">{due.pk}</a>" in page and f">{retry.pk}</a>" in page
    assert page.count('class="dt-state dt-state-ready"') == 2
    assert "(scheduled)" in page and "(retry_wait)" in page


def test_it_shows_attempts_inline_with_worker_token_timings_and_error(
    as_alice, acme, make_job, make_run, make_attempt, clock
):
    job = make_job(acme, "flaky.sync")
    run = make_run(job, state="dead", due_at=clock.ago(minutes=3), attempt=2, fencing_token=4242)
    make_attempt(run, attempt=1, outcome="failed", error="ConnectionError: upstream reset", worker="worker-a")
    make_attempt(run, attempt=2, outcome="timed_out", error="timed out", worker="worker-b")
    page = as_alice.get(reverse("admin:runs_run_change", args=[run.pk])).content.decode()
    for text in ("worker-a", "worker-b", "4242", "ConnectionError: upstream reset", "dt-state-timed_out", "1.000 s"):
        assert text in page


def test_it_shows_a_django_tasks_positional_and_keyword_arguments_apart(as_alice, acme, make_job, make_run):
    run = make_run(make_job(acme, "shop.total"), payload={"vat": 0.2}, args=[[10, 5.5], "EUR"])
    page = as_alice.get(reverse("admin:runs_run_change", args=[run.pk])).content.decode()
    assert "Args:" in page and "[[10, 5.5], &quot;EUR&quot;]" in page
    assert "{&quot;vat&quot;: 0.2}" in page


def test_it_cancels_waiting_and_leased_runs_and_leaves_finished_ones(as_alice, acme, make_job, make_run, wall_clock):
    job = make_job(acme, "cleanup")
    # The real clock: the cancel action reads it; the lease stays live however slow the machine.
    waiting = make_run(job, due_at=wall_clock.ahead(hours=1), idempotency_key="w")
    leased = make_run(
        job,
        state="leased",
        due_at=wall_clock.ago(seconds=5),
        lease_expires_at=wall_clock.ahead(hours=1),
        idempotency_key="l",
    )
    done = make_run(job, state="succeeded", due_at=wall_clock.ago(hours=1), idempotency_key="d")
    ids = [waiting.pk, leased.pk, done.pk]
    page = action(as_alice, RUNS, "cancel_runs", ids).content.decode()
    assert "1 run(s) not yet started" in page and "1 running run(s) lose their lease" in page
    confirm(as_alice, RUNS, "cancel_runs", ids, note="wrong payload")
    states = dict(Run.objects.filter(pk__in=ids).values_list("pk", "state"))
    assert states == {waiting.pk: "cancelled", leased.pk: "cancelled", done.pk: "succeeded"}
    assert Run.objects.get(pk=waiting.pk).reason == "cancelled by user:alice: wrong payload"
    assert Attempt.objects.get(run=leased).outcome == "stale"  # the worker's lease was taken away
    assert AuditEntry.objects.filter(action="cancel", note="wrong payload").count() == 2


def test_it_never_edits_a_run(as_alice, acme, make_job, make_run):
    run = make_run(make_job(acme, "x.job"))
    as_alice.post(reverse("admin:runs_run_change", args=[run.pk]), {"state": "succeeded"})
    assert Run.objects.get(pk=run.pk).state == "scheduled"


def test_it_lists_times_to_the_second_with_their_zone_and_names_the_job_in_previews(
    as_alice, acme, make_job, make_run, wall_clock
):
    job = make_job(acme, "reports.hourly")
    due = wall_clock.ahead(hours=1).replace(microsecond=0)
    run = make_run(job, due_at=due, worker_id="host-a:4242:" + "x" * 60)
    page = as_alice.get(RUNS).content.decode()
    assert (
        f'<span class="portal-time">{due:%Y-%m-%d}</span> <span class="portal-time">{due:%H:%M:%S} UTC</span>' in page
    )
    assert 'class="portal-truncate portal-short" title="host-a:4242:' in page  # cut to the column, whole on hover
    preview = action(as_alice, RUNS, "cancel_runs", [run.pk]).content.decode()
    assert f"run {run.pk} of reports.hourly due" in preview
