"""Sending: email through Django's backend (locmem in tests), webhooks signed, guarded, retried."""

import datetime as dt
import json

import pytest

from jobs.models import Tenant
from notify import delivery, events, signing
from notify.models import Notification, SigningSecret
from runs import scheduler
from tests.notify.conftest import bury, flood
from tests.notify.receiver import Receiver

Status = Notification.Status


@pytest.fixture
def dead_letter_notices(watched_job, make_run, started, clock):
    """Make a job with the given webhook, dead-letter one run, record it: {channel: Notification}."""

    def make(webhook):
        job = watched_job(webhook=webhook)
        bury(make_run(job, due_at=clock.ago(minutes=5)), clock.now, error="ValueError: no invoices")
        events.record(clock.advance(seconds=5))
        return {n.channel: n for n in Notification.objects.all()}

    return make


def test_it_emails_the_owner_through_the_mail_backend(dead_letter_notices, mailoutbox, clock):
    dead_letter_notices(webhook="")
    assert delivery.deliver(clock.now) == 1

    (mail,) = mailoutbox
    assert mail.to == ["oncall@acme.example"]
    assert mail.subject.startswith("[Duetime] run ") and "billing.export dead-lettered" in mail.subject
    assert "ValueError: no invoices" in mail.body and "Tenant: acme" in mail.body
    sent = Notification.objects.get()
    assert (sent.status, sent.attempts, sent.sent_at) == ("sent", 1, clock.now)


def test_it_posts_a_webhook_the_owner_can_verify(dead_letter_notices, receiver, acme, clock):
    secret = SigningSecret.rotate(acme, clock.now)
    notice = dead_letter_notices(webhook=receiver)["webhook"]
    delivery.deliver(clock.now)

    (got,) = Receiver.seen
    header = got["headers"]["Duetime-Signature"]
    assert header.startswith(f"t={int(clock.now.timestamp())},v1=")
    assert signing.verify(secret, got["body"], header, int(clock.now.timestamp()))
    assert not signing.verify(secret, got["body"] + b" ", header, int(clock.now.timestamp()))
    assert json.loads(got["body"]) == notice.body
    assert got["headers"]["Idempotency-Key"] == f"notification-{notice.pk}" and got["path"] == "/duetime/events"
    notice.refresh_from_db()
    assert (notice.status, notice.response) == ("sent", "HTTP 200: thanks")


def test_a_webhook_answering_500_is_tried_again_after_a_backoff(dead_letter_notices, receiver, clock):
    Receiver.statuses = [500, 503, 200]
    notice = dead_letter_notices(webhook=receiver)["webhook"]
    Notification.objects.filter(channel="email").delete()

    assert delivery.deliver(clock.now) == 1
    notice.refresh_from_db()
    assert (notice.status, notice.attempts, notice.next_attempt_at) == ("pending", 1, clock.ahead(seconds=30))
    assert notice.response == "HTTP 500: try later"
    assert delivery.deliver(clock.advance(seconds=29)) == 0  # not due yet
    assert delivery.deliver(clock.advance(seconds=1)) == 1
    notice.refresh_from_db()
    assert (notice.attempts, notice.next_attempt_at) == (2, clock.ahead(minutes=1))
    delivery.deliver(clock.advance(minutes=1))
    notice.refresh_from_db()
    assert (notice.status, notice.attempts, notice.sent_at) == ("sent", 3, clock.now)
    assert len(Receiver.seen) == 3
    assert len({r["headers"]["Idempotency-Key"] for r in Receiver.seen}) == 1


def test_it_gives_up_after_the_last_try(dead_letter_notices, receiver, clock):
    Receiver.statuses = [502]
    notice = dead_letter_notices(webhook=receiver)["webhook"]
    for _ in range(delivery.MAX_ATTEMPTS):
        delivery.deliver(clock.now)
        clock.advance(hours=1)
    notice.refresh_from_db()
    assert (notice.status, notice.attempts, notice.next_attempt_at) == ("failed", delivery.MAX_ATTEMPTS, None)
    assert delivery.deliver(clock.advance(hours=1)) == 0  # the email went on the first pass; nothing is left


def test_a_4xx_answer_fails_for_good(dead_letter_notices, receiver, clock):
    Receiver.statuses = [410]
    notice = dead_letter_notices(webhook=receiver)["webhook"]
    delivery.deliver(clock.now)
    notice.refresh_from_db()
    assert (notice.status, notice.attempts) == ("failed", 1) and notice.response.startswith("HTTP 410")


def test_the_network_wall_refuses_a_webhook_once_its_network_is_no_longer_allowed(
    dead_letter_notices, receiver, settings, clock, acme
):
    settings.DUETIME_HTTP_ALLOW_PRIVATE = False
    acme.private_networks = "127.0.0.1/32"
    acme.save()
    notice = dead_letter_notices(webhook=receiver)["webhook"]  # saved while acme may call loopback
    Tenant.objects.filter(pk=acme.pk).update(private_networks="")  # a superuser removes it
    delivery.deliver(clock.now)
    notice.refresh_from_db()
    assert notice.status == "failed"
    assert notice.response.startswith("refused: not a public address (Duetime calls public addresses only")
    assert "127.0.0.1" not in notice.response, "what the address was is for the operator's log only"
    assert Receiver.seen == []


def test_a_webhook_inside_the_tenants_private_networks_is_sent(dead_letter_notices, receiver, settings, clock, acme):
    settings.DUETIME_HTTP_ALLOW_PRIVATE = False
    acme.private_networks = "127.0.0.0/8  # the on-call bridge"
    acme.save()
    notice = dead_letter_notices(webhook=receiver)["webhook"]
    delivery.deliver(clock.now)
    notice.refresh_from_db()
    assert notice.status == "sent" and len(Receiver.seen) == 1


def test_a_redirect_answer_is_not_followed(dead_letter_notices, receiver, clock):
    Receiver.statuses = [302]
    notice = dead_letter_notices(webhook=receiver)["webhook"]
    delivery.deliver(clock.now)
    notice.refresh_from_db()
    assert notice.status == "failed" and notice.response.endswith("(redirects are not followed)")
    assert len(Receiver.seen) == 1


def test_an_unreachable_receiver_is_tried_again(dead_letter_notices, settings, clock):
    settings.DUETIME_HTTP_ALLOW_PRIVATE = True
    notice = dead_letter_notices(webhook="http://127.0.0.1:9/nobody-listens")["webhook"]
    delivery.deliver(clock.now)
    notice.refresh_from_db()
    assert (notice.status, notice.attempts) == ("pending", 1) and "no answer from 127.0.0.1" in notice.response


def test_a_try_is_taken_by_one_node_only(dead_letter_notices, clock):
    notice = dead_letter_notices(webhook="")["email"]
    stale = Notification.objects.get(pk=notice.pk)
    assert delivery.claim(notice, clock.now)
    assert not delivery.claim(stale, clock.now)
    assert Notification.objects.get(pk=notice.pk).next_attempt_at == clock.ahead(seconds=delivery.CLAIM_SECONDS)


def test_the_backoff_doubles_up_to_an_hour():
    assert [delivery.backoff(n) for n in (1, 2, 3)] == [dt.timedelta(seconds=s) for s in (30, 60, 120)]
    assert delivery.backoff(20) == dt.timedelta(hours=1)


def test_a_scheduler_tick_sends_one_email_and_one_signed_webhook_per_dead_letter(
    watched_job, make_run, receiver, mailoutbox, acme, clock
):
    secret = SigningSecret.rotate(acme, clock.now)
    job = watched_job(webhook=receiver)
    scheduler.tick("node-a", now=clock.now)  # the first pass places the cursors
    bury(make_run(job, due_at=clock.ago(minutes=5)), clock.now)

    scheduler.tick("node-a", now=clock.advance(seconds=5))
    scheduler.tick("node-a", now=clock.advance(seconds=5))
    assert len(mailoutbox) == 1 and len(Receiver.seen) == 1
    (got,) = Receiver.seen
    assert signing.verify(secret, got["body"], got["headers"]["Duetime-Signature"], int(clock.now.timestamp()))
    assert set(Notification.objects.values_list("status", flat=True)) == {"sent"}


def test_a_flood_of_a_thousand_dead_letters_sends_one_email_and_one_webhook(
    watched_job, receiver, mailoutbox, started, clock
):
    flood(watched_job(webhook=receiver), 1000, clock.now)
    clock.advance(seconds=5)
    while events.record(clock.now) or delivery.deliver(clock.now):
        pass
    assert len(mailoutbox) == 1 and len(Receiver.seen) == 1
    assert Notification.objects.filter(status="suppressed").count() == 1998
