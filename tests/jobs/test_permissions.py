"""Acme's permissions are checked when used: a module prefix or a private network a superuser took away
stops acme's jobs at every door that makes them run (the worker: tests/runs/test_targets.py and
tests/acceptance/test_revoked_prefix.py; the API: tests/runs/api/test_revoked.py)."""

import datetime as dt

import pytest

from dlq.models import DeadLetter
from jobs import cron, permissions
from jobs.models import JobDefinition, Tenant
from runs import backfill, controls, enqueue, ledger, materialize
from runs.models import Run

T0 = dt.datetime(2026, 6, 1, 9, 0, tzinfo=dt.UTC)
REVOKED = (
    "permission revoked: tenant 'acme' may no longer run tasks from 'tests.handlers' (the module prefix that "
    "allowed it was removed; allowed module prefixes now: billing.tasks)"
)


def revoke_prefix(tenant):
    """What a superuser's edit of acme's module prefixes does: tests.handlers is gone."""
    Tenant.objects.filter(pk=tenant.pk).update(task_module_prefixes="billing.tasks")


def fresh(job):
    return JobDefinition.objects.select_related("tenant").get(pk=job.pk)


@pytest.fixture
def export(acme, make_job):
    return make_job(acme, "billing.export")


@pytest.fixture
def nightly(acme, make_job):
    return make_job(acme, "billing.nightly", cron_expr="0 2 * * *", time_zone="UTC", overlap_policy="allow")


def test_a_job_is_allowed_while_its_prefix_is(export):
    assert permissions.revoked(fresh(export)) is None


def test_a_removed_prefix_revokes_the_job_and_says_which_module(export):
    revoke_prefix(export.tenant)

    assert permissions.revoked(fresh(export)) == REVOKED


def test_a_prefix_granted_again_allows_it_again(export):
    revoke_prefix(export.tenant)
    Tenant.objects.filter(pk=export.tenant_id).update(task_module_prefixes="billing.tasks\ntests")

    assert permissions.revoked(fresh(export)) is None


def test_an_http_target_at_an_address_of_a_removed_network_is_revoked(acme, make_job):
    acme.private_networks = "10.20.0.0/16"
    acme.save()
    job = make_job(acme, "billing.hook", target_kind="http", target_ref="http://10.20.1.5:8080/hook", payload={})
    public = make_job(acme, "billing.public", target_kind="http", target_ref="http://93.184.215.14/x", payload={})
    assert permissions.revoked(fresh(job)) is None

    Tenant.objects.filter(pk=acme.pk).update(private_networks="")

    assert permissions.revoked(fresh(job)).startswith("permission revoked: http://10.20.1.5:8080/hook is refused")
    assert permissions.revoked(fresh(public)) is None  # a public address needs no allowance


def test_trigger_enqueue_and_backfill_refuse_and_create_nothing(export, nightly):
    revoke_prefix(export.tenant)

    for make_a_run in (
        lambda: controls.trigger(fresh(export), actor="alice"),
        lambda: enqueue.enqueue(fresh(export), delay_seconds=60, actor="alice"),
        lambda: backfill.backfill(fresh(nightly), T0 - dt.timedelta(days=3), T0, actor="alice"),
        lambda: controls.trigger_many(JobDefinition.objects.filter(tenant=export.tenant), actor="alice"),
    ):
        with pytest.raises(permissions.Revoked) as refused:
            make_a_run()
        assert "permission revoked" in str(refused.value) and "tests.handlers" in str(refused.value)
    assert not Run.objects.exists()


def test_a_bulk_trigger_names_every_job_it_refused(export, nightly):
    revoke_prefix(export.tenant)

    with pytest.raises(permissions.Revoked) as refused:
        controls.trigger_many(JobDefinition.objects.filter(tenant=export.tenant), actor="alice")

    assert str(refused.value).startswith("2 jobs may no longer run, so nothing was done. billing.export: permission")
    assert "billing.nightly: permission revoked" in str(refused.value)


def test_resume_refuses_and_the_job_stays_paused(nightly):
    controls.pause(nightly, actor="alice")
    revoke_prefix(nightly.tenant)

    with pytest.raises(permissions.Revoked):
        controls.resume(nightly, actor="alice")

    assert JobDefinition.objects.get(pk=nightly.pk).status == "paused"


def test_replay_refuses_and_the_letter_stays_open(export, make_run):
    run = make_run(export, state="dead", attempt=3, last_error="boom")
    letter = DeadLetter.objects.create(
        run=run, job=export, tenant=export.tenant, last_error="boom", dead_at=run.finished_at
    )
    revoke_prefix(export.tenant)

    with pytest.raises(permissions.Revoked):
        controls.replay_many(DeadLetter.objects.filter(pk=letter.pk), actor="alice")

    letter.refresh_from_db()
    assert letter.is_open and Run.objects.get(pk=run.pk).state == "dead"


def test_materialisation_records_the_occurrences_skipped_with_the_reason_and_moves_on(nightly):
    # The ledger lists occurrences after the job was made: the first 02:00 after that.
    (due,) = cron.occurrences("0 2 * * *", "UTC", nightly.created_at, 1)
    JobDefinition.objects.filter(pk=nightly.pk).update(next_due_at=due)
    revoke_prefix(nightly.tenant)

    result = materialize.materialize(due, lookahead=60)

    assert (result.inserted, result.skipped) == (0, 1)
    (passed,) = Run.objects.filter(job=nightly)
    assert (passed.state, passed.due_at, passed.reason) == ("skipped", due, REVOKED)
    assert JobDefinition.objects.get(pk=nightly.pk).next_due_at == due + dt.timedelta(days=1)
    minute = dt.timedelta(minutes=1)
    (entry,) = ledger.ledger(fresh(nightly), due - minute, due + minute, due + minute).entries
    assert (entry.fate, entry.detail) == ("skipped", REVOKED)
