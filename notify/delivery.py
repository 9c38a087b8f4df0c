"""Sending recorded notifications: email through Django's email backend, webhooks signed and guarded.

`deliver(now)` sends the pending notifications whose next try is due, oldest first,
at most BATCH per pass and for at most TIME_BUDGET seconds of a pass, so a slow
receiver cannot hold the scheduler's tick for long (each request also has its own
timeout, DUETIME_NOTIFY_TIMEOUT_SECONDS).

Each try is claimed by compare-and-set on (status pending, attempts) and pushed
CLAIM_SECONDS ahead before it is sent, so two scheduler nodes never send one try
twice; a node that dies mid-send leaves it to be tried again once the claim passes.

Outcome of a try: sent (the mail backend took it; the webhook answered 2xx);
retried with backoff (mail errors, connection errors and timeouts, HTTP 408, 429
and 5xx) up to MAX_ATTEMPTS tries in all; failed for good otherwise (other 4xx and 3xx:
redirects are not followed; a webhook URL refused by the network wall, jobs.addresses:
not a public address, nor in the tenant's private networks, checked before connecting).
"""

import datetime as dt
import http.client
import json
import smtplib
import time

from django.conf import settings
from django.core.mail import send_mail

from jobs import addresses
from jobs.models import Tenant
from notify import signing
from notify.models import Notification, SigningSecret
from runs.targets import HTTP_RETRYABLE, PermanentError, connection

BATCH = 20
TIME_BUDGET = 2.0  # seconds of sending per pass; the rest waits for the next tick
CLAIM_SECONDS = 120
MAX_ATTEMPTS = 6
BACKOFF_BASE = dt.timedelta(seconds=30)
BACKOFF_MAX = dt.timedelta(hours=1)
RESPONSE_CHARS = 2000
Status = Notification.Status


class Retry(Exception):
    """A try failed in a way another try may not: connection refused, timeout, HTTP 5xx, 408, 429."""


def backoff(attempts):
    """The wait after `attempts` failed tries: 30 s, 1 min, 2 min, ... at most an hour."""
    return min(BACKOFF_MAX, BACKOFF_BASE * 2 ** (attempts - 1))


def deliver(now, *, batch=BATCH, budget=TIME_BUDGET):
    """Try the due pending notifications. Returns how many tries were made."""
    due = list(
        Notification.objects.filter(status=Status.PENDING, next_attempt_at__lte=now)
        .select_related("tenant")
        .order_by("next_attempt_at", "id")[:batch]
    )
    started, tried = time.monotonic(), 0
    for notification in due:
        if time.monotonic() - started > budget:
            break
        if claim(notification, now):
            settle(notification, now, *send(notification, now))
            tried += 1
    return tried


def claim(notification, now):
    """Take the next try of `notification`; False when another node took it first."""
    attempts = notification.attempts
    taken = Notification.objects.filter(pk=notification.pk, status=Status.PENDING, attempts=attempts).update(
        attempts=attempts + 1, next_attempt_at=now + dt.timedelta(seconds=CLAIM_SECONDS)
    )
    notification.attempts = attempts + 1
    return taken == 1


def send(notification, now):
    """One try: (status, response text). Never raises."""
    try:
        if notification.channel == Notification.Channel.EMAIL:
            answer = send_email(notification)
        else:
            answer = post_webhook(notification, now)
    except Retry as exc:
        last = notification.attempts >= MAX_ATTEMPTS
        return (Status.FAILED if last else Status.PENDING), str(exc)
    except PermanentError as exc:
        return Status.FAILED, str(exc)
    except Exception as exc:  # noqa: BLE001 - a broken notification is recorded, never a crashed scheduler pass
        return Status.FAILED, f"not sent: {exc.__class__.__name__}: {exc}"
    return Status.SENT, answer


def settle(notification, now, status, response):
    """Store the try's outcome on the claimed row (only while this try still holds it)."""
    values = {"status": status, "response": response[:RESPONSE_CHARS]}
    if status == Status.SENT:
        values.update(sent_at=now, next_attempt_at=None)
    elif status == Status.PENDING:
        values["next_attempt_at"] = now + backoff(notification.attempts)
    else:
        values["next_attempt_at"] = None
    Notification.objects.filter(pk=notification.pk, status=Status.PENDING, attempts=notification.attempts).update(
        **values
    )


def send_email(notification):
    body = notification.body
    job = [f"Job: {body['job']}"] if body["job"] else []
    lines = [body["subject"], "", f"Tenant: {body['tenant']}", *job, f"When: {body['occurred_at']}"]
    lines += [f"{key}: {value}" for key, value in body["data"].items()]
    if body["job"]:
        lines += ["", "Sent by Duetime because this job names you as its owner (owner_email)."]
    else:  # a tenant-wide event (notify.events.breaker_rows): one mail to every owner of the tenant
        lines += ["", "Sent by Duetime to the owners of this tenant."]
    try:
        send_mail(
            f"[Duetime] {notification.subject}",
            "\n".join(lines),
            settings.DEFAULT_FROM_EMAIL,
            [address.strip() for address in notification.recipient.split(",")],
        )
    except (smtplib.SMTPException, OSError) as exc:
        raise Retry(f"mail not sent: {exc.__class__.__name__}: {exc}") from exc
    return "accepted by the mail backend"


def post_webhook(notification, now):
    """POST the body as JSON, signed; 2xx is sent. Raises Retry or PermanentError."""
    url = notification.recipient
    try:
        destination = addresses.Destination.of(url)
    except addresses.BadURL as exc:
        raise PermanentError(f"{url!r} is not an http(s) URL ({exc})") from exc
    body = json.dumps(notification.body, separators=(",", ":")).encode()
    secret = SigningSecret.for_tenant(notification.tenant_id, now)
    headers = {
        "Content-Type": "application/json",
        "User-Agent": "Duetime-Notifier",
        signing.HEADER: signing.signature(secret, body, int(now.timestamp())),
        "Duetime-Notification-Id": str(notification.pk),
        "Idempotency-Key": f"notification-{notification.pk}",  # the same on every try
    }
    allowance = Tenant.allowance_of(notification.tenant_id)  # as it is now: a removed network is refused
    conn = connection(
        destination, allowance, settings.DUETIME_NOTIFY_TIMEOUT_SECONDS, context=f"notification {notification.pk}"
    )
    try:
        try:
            conn.request("POST", destination.target, body=body, headers=headers)
            response = conn.getresponse()
            text = response.read(RESPONSE_CHARS).decode(errors="replace")
        finally:
            conn.close()
    except addresses.NotPublic as exc:
        raise PermanentError(str(exc)) from None  # the detail is in the operator's log only
    except (OSError, http.client.HTTPException, ValueError) as exc:  # refused, reset, timeout, unresolved
        raise Retry(f"no answer from {destination.host}: {exc.__class__.__name__}: {exc}") from exc
    answer = f"HTTP {response.status}: {text}"
    if 200 <= response.status < 300:
        return answer
    if response.status in HTTP_RETRYABLE or response.status >= 500:
        raise Retry(answer)
    if 300 <= response.status < 400:
        answer += " (redirects are not followed)"
    raise PermanentError(answer)
