"""Dead letters: readable at a glance, replayed or discarded one or many, each audited."""

from django.urls import reverse

from dlq.models import DeadLetter
from jobs.models import AuditEntry
from runs.models import Run
from tests.fixtures.portal import action, confirm

DLQ = reverse("admin:dlq_deadletter_changelist")


def test_it_shows_the_error_the_payload_and_new_dead_letters_per_job(as_alice, acme, make_job, make_dead, wall_clock):
    job = make_job(acme, "billing.export", payload={"month": "2026-05"})
    # The real clock: the page counts the last 24 hours by it.
    first = make_dead(job, wall_clock.ago(hours=2))
    make_dead(job, wall_clock.ago(hours=1))
    make_dead(job, wall_clock.ago(days=3))
    page = as_alice.get(DLQ).content.decode()
    assert "ValueError: the export file is empty" in page
    assert '<td class="field-new_for_job_24h">2</td>' in page
    detail = as_alice.get(reverse("admin:dlq_deadletter_change", args=[first.pk])).content.decode()
    assert "&quot;month&quot;: &quot;2026-05&quot;" in detail
    assert "Traceback" in detail


def test_it_replays_many_with_a_preview_and_an_audit_note(as_alice, acme, make_job, make_dead, clock):
    job = make_job(acme, "billing.export", cron_expr="0 * * * *")
    letters = [make_dead(job, clock.ago(hours=h)) for h in (1, 2, 3)]
    ids = [d.pk for d in letters]
    page = action(as_alice, DLQ, "replay_dead_letters", ids).content.decode()
    assert "3 dead run(s) go back to scheduled" in page
    confirm(as_alice, DLQ, "replay_dead_letters", ids, note="bug fixed in 1.4.2")
    for letter in letters:
        run = Run.objects.get(pk=letter.run_id)
        assert run.state == "scheduled" and run.max_attempts == run.attempt + job.max_attempts
        assert DeadLetter.objects.get(pk=letter.pk).resolved_by == "user:alice"
    assert AuditEntry.objects.filter(action="replay", note="bug fixed in 1.4.2").count() == 3


def test_it_discards_and_never_replays_a_closed_dead_letter(as_alice, acme, make_job, make_dead, clock):
    job = make_job(acme, "billing.export")
    letter = make_dead(job, clock.now)
    confirm(as_alice, DLQ, "discard_dead_letters", [letter.pk], note="obsolete")
    assert DeadLetter.objects.get(pk=letter.pk).discarded_at is not None
    confirm(as_alice, DLQ, "replay_dead_letters", [letter.pk], note="too late")
    assert Run.objects.get(pk=letter.run_id).state == "dead"
    assert not AuditEntry.objects.filter(action="replay").exists()
