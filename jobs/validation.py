"""The one set of rules for a job definition.

`clean_definition` is called by JobDefinition.clean(), so the admin form, the
API serializer and the management commands all get the same messages, each
naming the field and saying how to fix it.
"""

import datetime as dt
import json
import re

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import validate_email

from jobs import addresses, cron, http_secrets, occurrences, registry, secrets
from jobs.choices import HttpMethod, MissedRunPolicy, OverlapPolicy, Priority, ScheduleKind, TargetKind

# Here rather than in jobs.models so that the rules never import the model (the model calls them).
NAME_RE = r"^[a-z0-9][a-z0-9._-]{0,199}$"
QUEUE_RE = r"^[a-z0-9][a-z0-9._-]{0,63}$"

MAX_TIMEOUT_SECONDS = 6 * 3600
MAX_ATTEMPTS = 100
MAX_RETRY_SECONDS = 7 * 86400
MAX_JITTER_SECONDS = 3600
DOTTED_PATH_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)+$")
# An http target and an owner's webhook: parsed and checked by jobs.addresses here as when they are called
# (runs.targets, notify.delivery). A name is resolved at save for at most this long; one that does not
# resolve in time (or at all: it may resolve from the workers' network) is checked at each call only.
SAVE_RESOLVE_SECONDS = 2
MAX_SKIP_STREAK = 10_000
# An http target's own headers (runs/targets.py adds Duetime's). A header name is an RFC 9110 token; a value
# is visible ASCII with inner spaces (http_secrets.VALUE_RE): no line break can smuggle in another header.
HEADER_NAME_RE = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]{1,64}$")
MAX_HEADERS = 20
MAX_HEADER_VALUE_CHARS = 1000
MAX_HEADERS_BYTES = 4096  # names, values and ": " + CRLF of each, as sent
# Headers a job may not set, lowercased, with why. Hop-by-hop headers (RFC 9110 7.6.1) and the message's
# framing belong to the connection, which http.client owns; Duetime's own say what the call is and sign it.
REFUSED_HEADERS = {
    **dict.fromkeys(
        ["connection", "keep-alive", "proxy-connection", "te", "trailer", "transfer-encoding", "upgrade"],
        "is a hop-by-hop header: it belongs to the connection, which Duetime opens",
    ),
    **dict.fromkeys(["proxy-authenticate", "proxy-authorization"], "is a hop-by-hop header (proxies are not used)"),
    "host": "is set from the URL (name the host in target.ref)",
    "content-length": "is set from the body Duetime sends",
    "expect": "is not supported: Duetime sends the body at once",
    "content-type": "is set by Duetime (application/json; a GET sends no body)",
    **dict.fromkeys(["idempotency-key", "duetime-signature"], "is set by Duetime on every call"),
    **dict.fromkeys(
        ["authorization", "cookie"],
        "would store a credential in the job: name an operator-configured secret in bearer_secret instead",
    ),
}
# How deep JSON may nest (a payload, an API body): far beyond any real arguments, far below what
# walking it costs. Every walk of a payload is iterative anyway (has_nul, json_depth, jobs.secrets).
MAX_JSON_DEPTH = 64
# The instants a schedule, a run or a window may name: the years cron can express. Python's datetime ends
# with 9999, and the cron walk (jobs.cron) looks up to HORIZON_YEARS past an instant for the next
# occurrence; before the Unix epoch there is nothing to schedule or backfill (and `every` counts from it).
EARLIEST = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
LATEST = dt.datetime(9990, 12, 31, 23, 59, 59, 999999, tzinfo=dt.UTC)


def payload_size(payload):
    """Bytes of the payload as stored and sent: compact UTF-8 JSON."""
    return len(json.dumps(payload, separators=(",", ":"), ensure_ascii=False).encode())


def check_payload(payload):
    """Return an error message for the payload, or None when it is acceptable."""
    if json_depth(payload) > MAX_JSON_DEPTH:
        return f"nests deeper than {MAX_JSON_DEPTH} levels of objects and arrays; flatten it"
    try:
        size = payload_size(payload)  # also refuses lone surrogates (UnicodeEncodeError)
    except (TypeError, ValueError, RecursionError) as exc:
        return f"must be JSON ({exc.__class__.__name__}: {str(exc)[:200]})"
    if has_nul(payload):
        return "must not contain the NUL character (\\u0000): PostgreSQL cannot store it in JSON"
    limit = settings.DUETIME_MAX_PAYLOAD_BYTES
    if size > limit:
        return f"is {size} bytes of JSON; the limit is {limit} bytes (256 KB). Store large data elsewhere and pass a reference."
    return payload_credential(payload)


def payload_credential(payload):
    """Return an error message if the payload carries an obvious credential (jobs.secrets), else None."""
    credential = secrets.find_in(payload)
    if credential:
        # Stored, shown in the portal and sent to every attempt: pass the name of a secret, never the secret.
        return (
            f"seems to carry {credential}: payloads are stored and shown as they are; "
            "pass the name of a secret your handler reads from its own secret store instead"
        )
    return None


def has_nul(value):
    """True when a string of the JSON value `value` (a key or a value) holds the NUL character.

    Iterative: a value nested as deep as any door lets through never overflows the stack here.
    """
    pending = [value]
    while pending:
        item = pending.pop()
        if isinstance(item, str):
            if "\x00" in item:
                return True
        elif isinstance(item, dict):
            pending.extend(item.keys())
            pending.extend(item.values())
        elif isinstance(item, (list, tuple)):
            pending.extend(item)
    return False


def json_depth(value, stop=MAX_JSON_DEPTH + 1):
    """How many levels of objects and arrays `value` nests (a scalar: 0), counted up to `stop` at most.

    Iterative, and it stops at `stop`: a value nested far deeper costs no more than one at the limit.
    """
    deepest, pending = 0, [(value, 1)]
    while pending:
        item, depth = pending.pop()
        if isinstance(item, dict):
            children = item.values()
        elif isinstance(item, (list, tuple)):
            children = item
        else:
            continue
        deepest = max(deepest, depth)
        if deepest >= stop:
            return deepest
        pending.extend((child, depth + 1) for child in children if isinstance(child, (dict, list, tuple)))
    return deepest


def instant_problem(value):
    """Why the instant `value` (a datetime, or None) cannot be scheduled, or None: outside EARLIEST..LATEST."""
    if value is None:
        return None
    aware = value if value.tzinfo is not None else value.replace(tzinfo=dt.UTC)  # code may hand a naive UTC one
    if not EARLIEST <= aware <= LATEST:
        return (
            f"must be between {EARLIEST:%Y-%m-%d} and {LATEST:%Y-%m-%d} (the years a schedule can express), "
            f"got {value.isoformat()}"
        )
    return None


def clean_definition(job):
    """Raise ValidationError({field: [message]}) listing every problem of `job`."""
    errors = {}
    for check in (
        _check_name,
        _check_schedule,
        _check_bounds,
        _check_limits,
        _check_retry,
        _check_target,
        _check_http,
        _check_owner,
    ):
        for field, message in check(job):
            errors.setdefault(field, []).append(message)
    problem = check_payload(job.payload)
    if problem:
        errors.setdefault("payload", []).append(f"payload {problem}")
    if errors:
        raise ValidationError(errors)


def _check_name(job):
    if not re.fullmatch(NAME_RE, job.name or ""):
        yield (
            "name",
            (
                f"'{job.name}' is not a valid job name: use 1-200 lowercase letters, digits, '.', '_' or '-', "
                "starting with a letter or digit (for example billing.export-invoices)"
            ),
        )
    if not re.fullmatch(QUEUE_RE, job.queue or ""):
        yield "queue", f"'{job.queue}' is not a valid queue name: use 1-64 lowercase letters, digits, '.', '_' or '-'"


def _check_schedule(job):
    kind = job.schedule_kind
    if kind not in ScheduleKind.values:
        yield "schedule_kind", f"'{kind}' is not a schedule kind: use cron, at, every or none"
    try:
        cron.get_zone(job.time_zone)
    except cron.ZoneError as exc:
        yield "time_zone", str(exc)
    if kind == "cron":
        if not job.cron_expr:
            yield "cron_expr", "a cron schedule needs an expression, for example '0 2 * * *' (02:00 every day)"
        else:
            try:
                cron.validate(job.cron_expr)
            except cron.CronError as exc:
                yield "cron_expr", str(exc)
    elif job.cron_expr:
        yield "cron_expr", "only a cron schedule takes an expression; clear it or set the schedule kind to cron"
    if kind == "at" and job.run_at is None:
        yield "run_at", "an 'at' schedule needs the instant to run at (ISO 8601 with an offset)"
    yield from _check_period(job)
    if job.missed_run_policy not in MissedRunPolicy.values:
        yield "missed_run_policy", f"'{job.missed_run_policy}' is not a policy: use run_once, run_all or skip"
    if job.overlap_policy not in OverlapPolicy.values:
        yield "overlap_policy", f"'{job.overlap_policy}' is not a policy: use forbid, allow or replace"
    if job.starting_deadline_seconds is not None and job.starting_deadline_seconds < 1:
        yield "starting_deadline_seconds", "must be at least 1 second, or empty for no deadline"
    if not 0 <= (job.jitter_seconds or 0) <= MAX_JITTER_SECONDS:
        yield "jitter_seconds", f"must be between 0 and {MAX_JITTER_SECONDS} seconds"


def _check_period(job):
    """An `every` schedule's period: whole seconds, at least 1, at most MAX_EVERY_SECONDS."""
    period, most = job.every_seconds, occurrences.MAX_EVERY_SECONDS
    if job.schedule_kind != "every":
        if period is not None:
            yield "every_seconds", "only an 'every' schedule takes a period; clear it or set the schedule kind to every"
    elif period is None:
        yield "every_seconds", "an 'every' schedule needs a period in seconds, for example 90 (every 90 seconds)"
    elif not 1 <= period <= most:
        yield "every_seconds", f"the period must be between 1 second and {most} seconds (366 days), got {period}"


def _check_bounds(job):
    """start_at, end_at and remaining_runs: for a scheduled job only, the end after the start, an `at` inside."""
    start, end, left = job.start_at, job.end_at, job.remaining_runs
    for field in ("run_at", "start_at", "end_at"):
        problem = instant_problem(getattr(job, field))
        if problem:
            yield field, problem
    if job.schedule_kind == "none":
        for field, value in (("start_at", start), ("end_at", end), ("remaining_runs", left)):
            if value is not None:
                yield field, "an on-demand job (schedule kind none) has no occurrences to bound; clear it"
        return
    if start is not None and end is not None and end <= start:
        yield "end_at", f"must be after start_at ({start.isoformat()}): the schedule would have no occurrence"
    if left is not None and left < 0:
        yield "remaining_runs", "must be 0 or more, or empty for no limit"
    run_at = job.run_at if job.schedule_kind == "at" else None
    if run_at is not None and start is not None and run_at < start:
        yield "run_at", f"is before start_at ({start.isoformat()}): the job would never run; move one of them"
    if run_at is not None and end is not None and run_at >= end:
        yield "run_at", f"is not before end_at ({end.isoformat()}): the job would never run; move one of them"


def _check_limits(job):
    if not 1 <= (job.timeout_seconds or 0) <= MAX_TIMEOUT_SECONDS:
        yield "timeout_seconds", f"must be between 1 and {MAX_TIMEOUT_SECONDS} seconds (6 h)"
    if job.concurrency is not None and job.concurrency < 1:
        yield "concurrency", "must be at least 1, or empty for no limit"
    if job.concurrency_group and not re.fullmatch(QUEUE_RE, job.concurrency_group):
        yield "concurrency_group", "must be lower-case letters, digits, '.', '_' or '-' (like a queue name), or empty"
    if (job.concurrency_group_limit or 0) < 1:
        yield "concurrency_group_limit", "must be at least 1"
    if job.priority not in Priority.values:
        yield "priority", "must be critical, default or bulk"


def _check_retry(job):
    if not 1 <= (job.max_attempts or 0) <= MAX_ATTEMPTS:
        yield "max_attempts", f"must be between 1 and {MAX_ATTEMPTS}"
    base, most = job.retry_base_seconds, job.retry_max_seconds
    if base is None or not 0 <= base <= MAX_RETRY_SECONDS:
        yield "retry_base_seconds", f"must be between 0 and {MAX_RETRY_SECONDS} seconds (7 days)"
    if most is None or not 0 <= most <= MAX_RETRY_SECONDS:
        yield "retry_max_seconds", f"must be between 0 and {MAX_RETRY_SECONDS} seconds (7 days)"
    elif base is not None and most < base:
        yield "retry_max_seconds", f"must be at least retry_base_seconds ({base})"


def _check_target(job):
    kind, ref = job.target_kind, job.target_ref or ""
    if kind in ("python", "celery"):
        # A celery job names a registered Django task too: the team's Celery workers run it
        # through Duetime's one task, duetime.execute (runs.celery_task). One registry for both.
        yield from _check_task(job, ref)
    elif kind == "http":
        yield from _check_url(job, "target_ref", ref, "https://billing.example.com/hooks/export")
    elif kind == "external" and ref:
        yield "target_ref", "an external target takes no reference: the tenant's workers lease its runs over HTTP"
    elif kind not in TargetKind.values:
        yield "target_kind", f"'{kind}' is not a target kind: use python, http, celery or external"


def _check_http(job):
    """How an http target is called: its method, its own headers and the name of its bearer secret."""
    method, headers, bearer = job.http_method, job.http_headers, job.http_bearer_secret or ""
    if job.target_kind != TargetKind.HTTP:
        if method != HttpMethod.POST:
            yield "http_method", "only an http target takes a method: leave it POST, or set the target kind to http"
        if headers:
            yield "http_headers", "only an http target takes headers: clear them, or set the target kind to http"
        if bearer:
            yield "http_bearer_secret", "only an http target takes a bearer secret: clear it"
        return
    if method not in HttpMethod.values:
        yield "http_method", f"'{method}' is not a method Duetime calls with: use POST, PUT or GET"
    elif method == HttpMethod.GET and job.payload not in (None, {}):
        yield "payload", "a GET sends no body: clear the payload (or {}), or call with POST or PUT"
    for message in header_problems(headers):
        yield "http_headers", message
    if bearer:
        tenant = job.tenant if job.tenant_id else None
        try:
            http_secrets.value(tenant.name if tenant else "", bearer)
        except http_secrets.UnknownSecret as exc:
            yield "http_bearer_secret", str(exc)


def header_problems(headers):
    """What is wrong with an http target's headers (a JSON object of name: value), one message each."""
    if not isinstance(headers, dict):
        return ['the headers must be a JSON object of names and values, e.g. {"X-Team": "billing"}']
    if len(headers) > MAX_HEADERS:
        return [f"{len(headers)} headers: at most {MAX_HEADERS}"]
    problems, seen = [], set()
    for name, value in headers.items():
        lowered = name.lower()
        if not HEADER_NAME_RE.match(name):
            problems.append(f"'{name[:64]}' is not a header name: 1-64 letters, digits and !#$%&'*+.^_`|~-")
        elif lowered in REFUSED_HEADERS or lowered.startswith(("x-duetime-", "duetime-")):
            problems.append(f"{name} {REFUSED_HEADERS.get(lowered, 'is set by Duetime on every call')}")
        elif lowered in seen:
            problems.append(f"{name} is given twice (header names ignore case)")
        elif not isinstance(value, str) or len(value) > MAX_HEADER_VALUE_CHARS:
            problems.append(f"{name}: the value must be a string of at most {MAX_HEADER_VALUE_CHARS} characters")
        elif not http_secrets.VALUE_RE.match(value):
            problems.append(
                f"{name}: the value must be visible ASCII and spaces, without line breaks or other controls"
            )
        elif credential := secrets.find(value):
            problems.append(f"{name}: seems to carry {credential}: name an operator-configured secret in bearer_secret")
        seen.add(lowered)
    size = sum(len(str(name)) + len(str(value)) + 4 for name, value in headers.items())
    if not problems and size > MAX_HEADERS_BYTES:
        problems.append(f"the headers are {size} bytes as sent: at most {MAX_HEADERS_BYTES}")
    return problems


def _check_owner(job):
    """The owner's contact (notify/): an email address, an http(s) webhook, and thresholds that reach someone."""
    email, url = job.owner_email or "", job.owner_webhook_url or ""
    if email:
        try:
            validate_email(email)
        except ValidationError:
            yield "owner_email", f"'{email}' is not an email address, for example billing-oncall@example.com"
    if url:
        yield from _check_url(job, "owner_webhook_url", url, "https://hooks.example.com/duetime")
    lateness, streak = job.notify_lateness_p99_seconds, job.notify_skip_streak
    if lateness is not None and lateness < 1:
        yield "notify_lateness_p99_seconds", "must be at least 1 second, or empty to never notify of lateness"
    if streak is not None and not 1 <= streak <= MAX_SKIP_STREAK:
        yield "notify_skip_streak", f"must be between 1 and {MAX_SKIP_STREAK}, or empty to never notify of skips"
    for field in ("notify_lateness_p99_seconds", "notify_skip_streak"):
        if getattr(job, field) is not None and not (email or url):
            yield field, "notifies the owner: set owner_email or owner_webhook_url too (or clear this threshold)"


def _check_url(job, field, url, example):
    """An http(s) URL whose host is a public address, or inside the tenant's private networks."""
    try:
        destination = addresses.Destination.of(url)
    except addresses.BadURL as exc:
        yield field, f"'{url}' is not an http(s) URL ({exc}), for example {example}"
        return
    tenant = job.tenant if job.tenant_id else None
    try:
        allowance = tenant.allowance if tenant else addresses.PUBLIC_ONLY
        addresses.checked(
            destination.host,
            destination.port,
            allowance,
            within=SAVE_RESOLVE_SECONDS,
            context=f"saving {field} of {tenant or '?'}/{job.name}",
        )
    except addresses.NotPublic as exc:
        yield field, f"'{url}' is {exc}"
    except (addresses.Unresolvable, ValueError):
        pass  # checked again when called; a stored allowance that no longer parses refuses it there


def _check_task(job, ref):
    """A python or celery target names a registered Django task inside the tenant's allowed module prefixes."""
    if not isinstance(job.payload, dict):
        yield "payload", "a task receives the payload as keyword arguments: make it a JSON object, e.g. {}"
    if not DOTTED_PATH_RE.match(ref):
        yield "target_ref", f"'{ref}' is not a dotted path to a Django task, for example billing.tasks.export_invoices"
        return
    tenant = job.tenant if job.tenant_id else None
    prefixes = tenant.task_prefixes if tenant else []
    # The tenant first: another team's module is refused without saying whether it exists.
    if not registry.tenant_allows(prefixes, ref):
        allowed = ", ".join(prefixes) or "none yet"
        yield (
            "target_ref",
            f"tenant '{tenant}' may not run tasks from '{ref.rpartition('.')[0]}' (allowed module prefixes: {allowed}). "
            f"{registry.HOW_TO_REGISTER}",
        )
        return
    try:
        registry.registered_task(ref)
    except registry.NotRegistered as exc:
        yield "target_ref", str(exc)
