"""A run that dead-letters under the real worker and scheduler: its owner gets one email and one signed webhook."""

import pytest
from django.utils import timezone

from dlq.models import DeadLetter
from notify import signing
from notify.models import Cursor, Notification, SigningSecret
from runs import enqueue
from tests.acceptance.test_processes import Processes
from tests.notify.receiver import Receiver, serve
from tests.waiting import wait_until

pytestmark = [pytest.mark.acceptance, pytest.mark.concurrency, pytest.mark.django_db(transaction=True)]

ENV = {"EMAIL_URL": "consolemail://"}


def test_a_dead_lettered_run_sends_one_email_and_one_signed_webhook(acme, make_job):
    secret = SigningSecret.rotate(acme, timezone.now())
    acme.private_networks = "127.0.0.1/32  # the receiver: the scheduler reads it when it sends"
    acme.save()
    with serve() as url, Processes() as fleet:
        job = make_job(
            acme,
            "doomed",
            target_ref="tests.handlers.fail",
            max_attempts=1,
            owner_email="oncall@acme.example",
            owner_webhook_url=url,
        )
        fleet.start("scheduler", "run_scheduler", **ENV)
        wait_until(lambda: Cursor.objects.filter(name="dead_letters").exists(), message="the notifier's first pass")
        run, _ = enqueue.enqueue(job)
        fleet.start("worker", "run_worker", **ENV)
        wait_until(lambda: DeadLetter.objects.filter(run=run).exists(), message="the run to die")
        wait_until(
            lambda: (
                set(Notification.objects.values_list("status", flat=True)) == {"sent"}
                and Notification.objects.count() == 2
            ),
            message="both notifications sent",
        )
    (got,) = Receiver.seen
    header = got["headers"]["Duetime-Signature"]
    sent_at = int(header.split(",")[0].removeprefix("t="))
    assert signing.verify(secret, got["body"], header, sent_at)
    assert b'"type":"dead_letter"' in got["body"]
    _code, scheduler_output = fleet.outputs["scheduler"]
    assert scheduler_output.count("Subject: [Duetime] run ") == 1 and "To: oncall@acme.example" in scheduler_output
