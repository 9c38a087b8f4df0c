"""One validation path: code, admin and API get the same messages; nothing invalid is stored."""

import datetime as dt

import pytest
from django.core.exceptions import ValidationError

from jobs.definitions import save_definition
from jobs.models import JobDefinition
from jobs.secrets import find_in
from jobs.validation import MAX_JSON_DEPTH, check_payload, has_nul, json_depth


def definition(tenant, **fields):
    values = dict(
        tenant=tenant,
        name="billing.export",
        schedule_kind="cron",
        cron_expr="0 2 * * *",
        time_zone="Europe/Berlin",
        target_kind="python",
        target_ref="tests.handlers.noop",
    )
    values.update(fields)
    return JobDefinition(**values)


JAN = dt.datetime(2027, 1, 1, tzinfo=dt.UTC)


def errors_of(job):
    with pytest.raises(ValidationError) as caught:
        save_definition(job, "test")
    return caught.value.message_dict


def test_it_accepts_a_valid_definition_and_computes_next_due(acme):
    job, created = save_definition(definition(acme), "user:alice")
    assert created
    assert job.next_due_at is not None
    assert job.next_due_at.minute == 0
    assert job.version == 1


def test_it_names_the_field_and_the_fix_for_a_bad_minute(acme):
    errors = errors_of(definition(acme, cron_expr="61 * * * *"))
    assert "minute must be 0-59" in errors["cron_expr"][0]
    assert "61 * * * *" in errors["cron_expr"][0]
    assert not JobDefinition.objects.exists()


def test_it_refuses_an_unknown_time_zone(acme):
    errors = errors_of(definition(acme, time_zone="Mars/Olympus_Mons"))
    assert "Mars/Olympus_Mons" in errors["time_zone"][0]
    assert not JobDefinition.objects.exists()


@pytest.mark.parametrize(
    "fields, field",
    [
        ({"timeout_seconds": 6 * 3600 + 1}, "timeout_seconds"),
        ({"timeout_seconds": 0}, "timeout_seconds"),
        ({"max_attempts": 0}, "max_attempts"),
        ({"retry_base_seconds": 60, "retry_max_seconds": 30}, "retry_max_seconds"),
        ({"missed_run_policy": "sometimes"}, "missed_run_policy"),
        ({"overlap_policy": "queue"}, "overlap_policy"),
        ({"name": "Billing Export"}, "name"),
        ({"queue": "Bad Queue"}, "queue"),
        ({"target_kind": "http", "target_ref": "ftp://example.com"}, "target_ref"),
        ({"target_ref": "not a path"}, "target_ref"),
        ({"schedule_kind": "at", "cron_expr": ""}, "run_at"),
        ({"schedule_kind": "none"}, "cron_expr"),
        ({"cron_expr": ""}, "cron_expr"),
        ({"concurrency": 0}, "concurrency"),
        ({"jitter_seconds": 7200}, "jitter_seconds"),
        ({"schedule_kind": "every", "cron_expr": ""}, "every_seconds"),
        ({"schedule_kind": "every", "cron_expr": "", "every_seconds": 0}, "every_seconds"),
        ({"schedule_kind": "every", "cron_expr": "", "every_seconds": 366 * 86400 + 1}, "every_seconds"),
        ({"every_seconds": 60}, "every_seconds"),
        ({"start_at": JAN, "end_at": JAN}, "end_at"),
        ({"start_at": JAN, "end_at": JAN - dt.timedelta(seconds=1)}, "end_at"),
        ({"schedule_kind": "at", "cron_expr": "", "run_at": JAN, "start_at": JAN + dt.timedelta(hours=1)}, "run_at"),
        ({"schedule_kind": "at", "cron_expr": "", "run_at": JAN, "end_at": JAN}, "run_at"),
        ({"schedule_kind": "none", "cron_expr": "", "remaining_runs": 3}, "remaining_runs"),
        ({"schedule_kind": "none", "cron_expr": "", "end_at": JAN}, "end_at"),
        ({"remaining_runs": -1}, "remaining_runs"),
    ],
)
def test_it_refuses_each_bad_field_with_its_name(acme, fields, field):
    assert field in errors_of(definition(acme, **fields))
    assert not JobDefinition.objects.exists()


def test_it_refuses_a_payload_over_256_kb(acme, settings):
    big = {"blob": "x" * (256 * 1024)}
    errors = errors_of(definition(acme, payload=big))
    assert "256 KB" in errors["payload"][0]


def test_it_accepts_a_payload_of_exactly_the_limit(acme):
    overhead = len('{"blob":""}')
    job, _ = save_definition(definition(acme, payload={"blob": "x" * (256 * 1024 - overhead)}), "test")
    assert job.pk


def test_it_refuses_a_second_job_of_the_same_name_in_one_tenant(acme, globex):
    save_definition(definition(acme), "test")
    save_definition(definition(globex), "test")  # another tenant may reuse the name
    assert "__all__" in errors_of(definition(acme)) or "name" in errors_of(definition(acme))


def test_it_bumps_the_version_and_audits_each_edit(acme):
    job, _ = save_definition(definition(acme), "user:alice")
    job.cron_expr = "30 3 * * *"
    job, created = save_definition(job, "user:alice")
    assert not created and job.version == 2
    assert job.next_due_at.minute == 30
    assert [e.action for e in acme.audit.order_by("id")] == ["create", "update"]


def test_it_refuses_an_invalid_definition_saved_directly_from_code(acme):
    with pytest.raises(ValidationError) as caught:
        JobDefinition.objects.create(
            tenant=acme, name="raw", schedule_kind="cron", cron_expr="* * *", target_ref="tests.handlers.noop"
        )
    assert "cron_expr" in caught.value.message_dict
    assert not JobDefinition.objects.exists()


@pytest.mark.parametrize("payload", [{"text": "nul \x00 here"}, {"text": "half a pair \ud800"}])
def test_it_refuses_a_payload_the_database_cannot_store(acme, payload):
    errors = errors_of(definition(acme, payload=payload))
    assert "payload" in errors


def test_it_refuses_a_name_with_a_trailing_newline(acme):
    assert "name" in errors_of(definition(acme, name="billing.export\n"))


def test_it_accepts_a_registered_task_inside_the_tenants_prefixes(acme):
    job, _ = save_definition(definition(acme, target_ref="tests.handlers.echo"), "user:alice")
    assert job.target_ref == "tests.handlers.echo"


@pytest.mark.parametrize(
    "ref, says",
    [
        ("tests.handlers.plain_function", "is not a Django task"),
        ("tests.handlers.missing", "is not a Django task"),
        ("os.system", "may not run tasks from 'os'"),
    ],
)
def test_it_refuses_what_is_not_a_registered_task_and_says_how_to_register_it(acme, ref, says):
    (message,) = errors_of(definition(acme, target_ref=ref))["target_ref"]
    assert says in message
    assert "@task" in message and "DUETIME_TASK_MODULES" in message
    assert not JobDefinition.objects.exists()


def test_it_refuses_a_module_the_operator_did_not_list_even_inside_the_tenants_prefixes(acme, settings):
    settings.DUETIME_TASK_MODULES = ["examples.demo_handlers"]
    (message,) = errors_of(definition(acme, target_ref="tests.handlers.noop"))["target_ref"]
    assert "'tests.handlers' is not a registered task module" in message


def test_it_refuses_another_tenants_task_module(globex):
    globex.task_module_prefixes = "examples"
    globex.save()
    (message,) = errors_of(definition(globex, target_ref="tests.handlers.noop"))["target_ref"]
    assert message.startswith(
        "tenant 'globex' may not run tasks from 'tests.handlers' (allowed module prefixes: examples)"
    )


def test_it_matches_prefixes_on_whole_module_names(globex):
    globex.task_module_prefixes = "tests.hand"
    globex.save()
    assert "target_ref" in errors_of(definition(globex, target_ref="tests.handlers.noop"))


def test_it_refuses_a_payload_that_cannot_be_keyword_arguments(acme):
    assert "payload" in errors_of(definition(acme, payload=[1, 2]))


@pytest.mark.parametrize(
    ("payload", "named"),
    [
        ({"ssh_key": "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAA"}, "a private key"),
        ({"aws": {"id": "AKIAIOSFODNN7EXAMPLE"}}, "an AWS access key id"),
        ({"headers": ["Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJhY21lIn0"]}, "a bearer token"),
        ({"dsn": "postgres://billing:hunter2@db.internal/billing"}, "a password in a URL"),
    ],
)
def test_it_refuses_a_payload_that_carries_a_credential(payload, named):
    problem = check_payload(payload)
    assert problem.startswith(f"seems to carry {named}")
    assert "secret store" in problem


def test_it_accepts_a_payload_that_names_a_secret_instead():
    assert check_payload({"dsn_secret": "billing/db", "report": "https://reports.internal/monthly"}) is None


def test_it_accepts_an_owner_contact_and_thresholds(acme):
    job, _ = save_definition(
        definition(
            acme,
            owner_email="billing-oncall@acme.example",
            owner_webhook_url="https://hooks.acme.example/duetime?team=billing",
            notify_lateness_p99_seconds=60,
            notify_skip_streak=3,
        ),
        "user:alice",
    )
    assert job.notify_skip_streak == 3


@pytest.mark.parametrize(
    ("fields", "field", "says"),
    [
        ({"owner_email": "billing at acme"}, "owner_email", "is not an email address"),
        ({"owner_webhook_url": "hooks.acme.example/duetime"}, "owner_webhook_url", "is not an http(s) URL"),
        ({"owner_webhook_url": "file:///etc/passwd"}, "owner_webhook_url", "is not an http(s) URL"),
        ({"owner_email": "a@acme.example", "notify_skip_streak": 0}, "notify_skip_streak", "must be between 1"),
        (
            {"owner_email": "a@acme.example", "notify_lateness_p99_seconds": 0},
            "notify_lateness_p99_seconds",
            "at least 1",
        ),
        ({"notify_lateness_p99_seconds": 30}, "notify_lateness_p99_seconds", "set owner_email or owner_webhook_url"),
    ],
)
def test_it_names_the_owner_field_and_the_fix(acme, fields, field, says):
    errors = errors_of(definition(acme, **fields))
    assert says in " ".join(errors[field])


def http_job(tenant, url, **fields):
    return definition(tenant, target_kind="http", target_ref=url, payload={}, **fields)


@pytest.mark.parametrize(
    "url",
    ["http://127.0.0.1:8080/", "https://[::1]/", "http://169.254.169.254/latest/meta-data/", "HTTP://2130706433/"],
)
def test_it_refuses_an_http_target_at_a_literal_non_public_address(acme, url):
    errors = errors_of(http_job(acme, url))
    assert errors["target_ref"] == [
        f"'{url}' is refused: not a public address "
        "(Duetime calls public addresses only, unless an operator allows private networks of tenant acme)"
    ]
    assert not JobDefinition.objects.exists()


def test_it_refuses_a_name_that_resolves_to_non_public_addresses_without_saying_which(acme, dns):
    dns.add("db.corp.test", "10.2.3.4")
    (message,) = errors_of(http_job(acme, "https://db.corp.test/hooks"))["target_ref"]
    assert "refused: not a public address" in message and "10.2.3.4" not in message


def test_it_accepts_a_name_that_resolves_to_public_addresses_or_does_not_resolve_yet(acme, dns):
    dns.add("billing.example.com", "93.184.215.14", "2606:2800:21f:cb07:6820:80da:af6b:8b2c")
    save_definition(http_job(acme, "https://billing.example.com/hooks"), "user:alice")
    save_definition(http_job(acme, "https://not-yet.example.com/hooks", name="later"), "user:alice")
    assert JobDefinition.objects.count() == 2


def test_it_accepts_a_private_target_inside_the_tenants_networks(acme, dns):
    acme.private_networks = "10.2.0.0/16"
    acme.save()
    dns.add("billing.corp.test", "10.2.3.4")
    save_definition(http_job(acme, "http://billing.corp.test:8080/run"), "user:alice")
    errors = errors_of(http_job(acme, "http://10.3.0.1/", name="other"))
    assert "nor in the allowed private networks of tenant acme (10.2.0.0/16)" in errors["target_ref"][0]


def test_it_refuses_an_owner_webhook_at_a_non_public_address(acme, dns):
    dns.add("hooks.corp.test", "fd00::7")
    job = definition(acme, owner_webhook_url="https://hooks.corp.test/duetime")
    assert "refused: not a public address" in errors_of(job)["owner_webhook_url"][0]


def test_it_does_not_wait_on_a_slow_resolver_at_save(acme, dns, monkeypatch):
    """A name the resolver does not answer in time is saved; the worker checks it at each call."""
    import threading

    from jobs import validation

    release = threading.Event()
    dns.add("slow.example.com", lambda: release.wait(30) and ["127.0.0.1"])
    monkeypatch.setattr(validation, "SAVE_RESOLVE_SECONDS", 0.05)
    try:
        save_definition(http_job(acme, "https://slow.example.com/hooks"), "user:alice")
    finally:
        release.set()
    assert JobDefinition.objects.filter(target_ref="https://slow.example.com/hooks").exists()


@pytest.mark.parametrize(
    "url, says",
    [
        ("http://[::1/", "Invalid IPv6 URL"),
        ("http://billing.example.com:99999/", "Port out of range"),
        ("gopher://127.0.0.1:6379/_FLUSHALL", "the scheme must be http or https"),
    ],
)
def test_it_says_what_is_wrong_with_an_http_target(acme, url, says):
    (message,) = errors_of(http_job(acme, url))["target_ref"]
    assert message.startswith(f"'{url}' is not an http(s) URL") and says in message


def test_it_says_how_to_fix_a_period_under_a_second_and_an_end_before_the_start(acme):
    errors = errors_of(definition(acme, schedule_kind="every", cron_expr="", every_seconds=0))
    assert errors["every_seconds"] == ["the period must be between 1 second and 31622400 seconds (366 days), got 0"]
    errors = errors_of(definition(acme, start_at=JAN, end_at=JAN - dt.timedelta(days=1)))
    assert errors["end_at"] == [
        "must be after start_at (2027-01-01T00:00:00+00:00): the schedule would have no occurrence"
    ]


def test_it_accepts_an_every_schedule_with_bounds_and_a_count(acme):
    job = definition(
        acme, schedule_kind="every", cron_expr="", every_seconds=1, start_at=JAN, end_at=JAN + dt.timedelta(1)
    )
    job.remaining_runs = 10
    job, _ = save_definition(job, "test")
    assert job.next_due_at == JAN


def test_the_database_refuses_an_every_job_without_a_period_and_an_end_before_its_start(acme):
    from django.db import IntegrityError, transaction

    job, _ = save_definition(definition(acme, schedule_kind="every", cron_expr="", every_seconds=60), "test")
    for fields in ({"every_seconds": None}, {"start_at": JAN, "end_at": JAN}):
        with pytest.raises(IntegrityError), transaction.atomic():
            JobDefinition.objects.filter(pk=job.pk).update(**fields)


def nested(levels):
    value = {}
    for _ in range(levels - 1):
        value = {"a": value}
    return value


@pytest.mark.parametrize("levels", [65, 1_000, 100_000])
def test_it_refuses_a_payload_nested_deeper_than_64_levels_through_every_door(acme, levels):
    (message,) = errors_of(definition(acme, target_kind="external", target_ref="", payload=nested(levels)))["payload"]
    assert message == "payload nests deeper than 64 levels of objects and arrays; flatten it"
    assert check_payload(nested(64)) is None


def test_it_walks_a_payload_at_any_depth_without_recursion():
    deep = ["bottom\x00"]
    for _ in range(200_000):
        deep = [deep]
    assert has_nul(deep)
    assert json_depth(deep) == MAX_JSON_DEPTH + 1  # counted up to the limit, no further
    assert find_in({"a": deep}) is None


@pytest.mark.parametrize(
    "fields",
    [
        {"schedule_kind": "at", "cron_expr": "", "run_at": dt.datetime(1, 1, 1, tzinfo=dt.UTC)},
        {"schedule_kind": "at", "cron_expr": "", "run_at": dt.datetime(9999, 12, 31, tzinfo=dt.UTC)},
        {"start_at": dt.datetime(1969, 12, 31, tzinfo=dt.UTC)},
        {"end_at": dt.datetime(9991, 1, 1, tzinfo=dt.UTC)},
    ],
)
def test_it_refuses_an_instant_outside_the_years_a_schedule_can_express(acme, fields):
    errors = errors_of(definition(acme, **fields))
    field = next(f for f in ("run_at", "start_at", "end_at") if f in fields)
    assert "must be between 1970-01-01 and 9990-12-31 (the years a schedule can express)" in errors[field][0]
    assert not JobDefinition.objects.exists()


def test_it_refuses_a_task_module_that_fails_as_it_is_imported_with_its_error(acme, settings):
    settings.DUETIME_TASK_MODULES = [*settings.DUETIME_TASK_MODULES, "tests.broken_handlers"]
    acme.task_module_prefixes = "tests.handlers\ntests.broken_handlers"
    acme.save()
    (message,) = errors_of(definition(acme, target_ref="tests.broken_handlers.export"))["target_ref"]
    assert message == (
        "the task module 'tests.broken_handlers' cannot be imported: "
        "RuntimeError: billing settings are missing: set BILLING_URL"
    )
