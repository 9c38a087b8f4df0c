"""Alice sees what was sent to Acme's job owners, sets a job's owner, and rotates Acme's signing secret."""

from django.urls import reverse

from jobs.models import AuditEntry, JobDefinition
from notify.models import Notification, SigningSecret
from tests.scheduler_project.admin.test_scoping import job_form


def notice(job, clock, status="sent", channel="email", key="dead_letter:1"):
    return Notification.objects.create(
        tenant=job.tenant,
        job=job,
        kind="dead_letter",
        channel=channel,
        recipient="oncall@example.com",
        event_key=key,
        subject=f"run 1 of {job.name} dead-lettered",
        body={"type": "dead_letter", "job": job.name},
        status=status,
        attempts=1,
        created_at=clock.now,
        sent_at=clock.now if status == "sent" else None,
        response="HTTP 502: bad gateway" if status == "failed" else "accepted by the mail backend",
    )


def test_it_lists_only_the_notifications_of_the_users_tenants(as_alice, acme, globex, make_job, clock):
    mine = notice(make_job(acme, "billing.export"), clock, status="failed")
    theirs = notice(make_job(globex, "ledger.close"), clock, key="dead_letter:2")

    page = as_alice.get(reverse("admin:notify_notification_changelist")).content.decode()
    assert "billing.export" in page and "ledger.close" not in page
    detail = as_alice.get(reverse("admin:notify_notification_change", args=[mine.pk]))
    assert detail.status_code == 200 and "HTTP 502: bad gateway" in detail.content.decode()
    assert as_alice.get(reverse("admin:notify_notification_change", args=[theirs.pk])).status_code == 404


def test_the_job_page_shows_what_was_sent_lately_and_links_to_all(as_alice, acme, make_job, clock):
    job = make_job(acme, "billing.export", owner_email="oncall@example.com")
    notice(job, clock)
    page = as_alice.get(reverse("admin:jobs_jobdefinition_change", args=[job.pk])).content.decode()
    assert 'data-testid="job-notifications"' in page and "dead_letter email to oncall@example.com: sent" in page
    assert reverse("admin:notify_notification_changelist") + f"?job={job.pk}" in page


def test_it_sets_the_owner_through_the_one_validation_path(as_alice, acme):
    add = reverse("admin:jobs_jobdefinition_add")
    bad = as_alice.post(add, job_form(acme, "reports.daily", owner_email="oncall at acme", notify_skip_streak="3"))
    assert bad.status_code == 200 and "is not an email address" in bad.content.decode()

    fields = {"owner_email": "oncall@acme.example", "owner_webhook_url": "https://hooks.acme.example/x"}
    good = as_alice.post(add, job_form(acme, "reports.daily", notify_skip_streak="3", **fields))
    assert good.status_code == 302
    job = JobDefinition.objects.get(name="reports.daily")
    assert (job.owner_email, job.owner_webhook_url, job.notify_skip_streak) == (*fields.values(), 3)


def test_it_shows_a_rotated_signing_secret_once_and_audits_it(as_alice, acme):
    url = reverse("admin:portal_signing_secret")
    assert "No secret yet" in as_alice.get(url).content.decode()

    rotated = as_alice.post(url, {"tenant": "acme"}).content.decode()
    secret = SigningSecret.objects.get(tenant=acme)
    assert secret.secret in rotated and "shown only once" in rotated
    again = as_alice.get(url).content.decode()
    assert secret.secret not in again and f"In use: {secret.prefix}" in again
    assert AuditEntry.objects.filter(action="rotate_signing_secret", actor="user:alice", tenant=acme).exists()


def test_another_tenants_secret_cannot_be_rotated(as_alice, globex):
    assert as_alice.post(reverse("admin:portal_signing_secret"), {"tenant": "globex"}).status_code == 404
    assert not SigningSecret.objects.exists()
