"""Schedules as code declare an http target's call too: method, headers, bearer secret (jobs/schedules.py)."""

import tomllib

from jobs import schedules
from jobs.api.schedules import ScheduleSetSerializer, declared_specs, jsonable
from jobs.definitions import save_definition
from jobs.models import JobDefinition, JobSigningSecret
from runs.schedule_sets import apply_set
from tests.fixtures.schedules import ping, specs

TARGET = {
    "kind": "http",
    "ref": "https://public.example/hooks/export",
    "method": "PUT",
    "headers": {"X-Team": "billing"},
    "bearer_secret": "billing-api",
}


def export(**target):
    return ping(target={**TARGET, **target}, payload={})


def test_an_apply_stores_the_call_and_makes_a_secret_nobody_has_seen(acme, clock, settings):
    settings.DUETIME_HTTP_SECRETS = {"acme": {"billing-api": "tok-acme"}}
    apply_set(acme, specs(billing_export=export()), actor="test", now=clock.now)

    job = JobDefinition.objects.get(name="billing.export")
    assert (job.http_method, job.http_headers, job.http_bearer_secret) == ("PUT", {"X-Team": "billing"}, "billing-api")
    assert JobSigningSecret.objects.filter(job=job).exists(), "rotate to learn it (docs/tasks.md)"
    assert "tok-acme" not in str(job.applied_spec)


def test_a_header_edited_outside_the_set_is_drift_and_the_next_plan_reverts_it(acme, clock, settings):
    settings.DUETIME_HTTP_SECRETS = {"acme": {"billing-api": "tok-acme"}}
    apply_set(acme, specs(billing_export=export()), actor="test", now=clock.now)
    job = JobDefinition.objects.get(name="billing.export")
    job.http_headers = {"X-Team": "payments"}
    save_definition(job, "user:alice", now=clock.now)

    assert [(d.field, d.code, d.portal) for d in schedules.drift(job)] == [
        ("target.headers", {"X-Team": "billing"}, {"X-Team": "payments"})
    ]
    (change,) = schedules.plan(acme, specs(billing_export=export()), now=clock.now).changes
    assert [(f.field, f.after, f.reverts_portal_edit) for f in change.fields] == [
        ("target.headers", {"X-Team": "billing"}, True)
    ]


def test_an_unknown_bearer_secret_refuses_the_whole_set(acme, clock):
    try:
        schedules.plan(acme, specs(billing_export=export(bearer_secret="nope")), now=clock.now)
    except schedules.SetInvalid as exc:
        assert [(name, path) for name, path, _ in exc.errors] == [("billing.export", "target.bearer_secret")]
    else:
        raise AssertionError("the set was not refused")


def test_the_declaration_reads_back_as_the_same_http_job(acme, clock, settings):
    settings.DUETIME_HTTP_SECRETS = {"acme": {"billing-api": "tok-acme"}}
    declared = specs(billing_export=export())
    apply_set(acme, declared, actor="test", now=clock.now)

    text = schedules.declaration(JobDefinition.objects.get(name="billing.export"))

    assert 'method = "PUT"' in text and '"X-Team" = "billing"' in text and 'bearer_secret = "billing-api"' in text
    serializer = ScheduleSetSerializer(data=jsonable(tomllib.loads(text)))
    assert serializer.is_valid(), (text, serializer.errors)
    assert declared_specs(serializer.validated_data)["billing.export"] == declared["billing.export"]


def test_the_declaration_of_another_kind_leaves_the_call_out(acme, clock):
    apply_set(acme, specs(billing_ping=ping()), actor="test", now=clock.now)
    text = schedules.declaration(JobDefinition.objects.get(name="billing.ping"))
    assert 'target = { kind = "python", ref = "tests.handlers.noop" }' in text
