"""Alice reads what Duetime told acme's job owners, over the API; never what it told globex's."""

from notify.models import Notification
from tests.fixtures.api import assert_problem


def notify(job, kind, status, at, channel="webhook"):
    return Notification.objects.create(
        tenant=job.tenant,
        job=job,
        kind=kind,
        channel=channel,
        recipient="https://hooks.example.com/duetime" if channel == "webhook" else "owner@example.com",
        event_key=f"{job.pk}:{kind}:{at.isoformat()}",
        subject=f"{job.name}: {kind}",
        status=status,
        created_at=at,
        sent_at=at if status == "sent" else None,
    )


def test_it_lists_the_tenants_notifications_newest_first_and_filters_them(
    api, acme, acme_team, globex, make_job, wall_clock
):
    export, imports = make_job(acme, "billing.export"), make_job(acme, "billing.import")
    dead = notify(export, "dead_letter", "sent", wall_clock.ago(hours=2))
    late = notify(imports, "lateness", "failed", wall_clock.ago(hours=1), channel="email")
    notify(make_job(globex, "billing.export"), "dead_letter", "sent", wall_clock.ago(minutes=5))

    everything = api.get("/v1/notifications", token=acme_team).json()["results"]
    failed = api.get("/v1/notifications?status=failed", token=acme_team).json()["results"]
    of_export = api.get("/v1/notifications?job=billing.export&kind=dead_letter", token=acme_team).json()["results"]

    assert [n["id"] for n in everything] == [late.pk, dead.pk], "globex's notification never shows"
    assert [(n["job"], n["channel"], n["recipient"]) for n in failed] == [
        ("billing.import", "email", "owner@example.com")
    ]
    assert [n["id"] for n in of_export] == [dead.pk]


def test_bad_filters_are_problems(api, acme_team):
    assert_problem(api.get("/v1/notifications?status=lost", token=acme_team), 400, "validation-error")
    assert_problem(api.get("/v1/notifications?job=Not%20A%20Job", token=acme_team), 400, "validation-error")
