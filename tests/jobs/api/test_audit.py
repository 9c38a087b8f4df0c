"""The audit log over HTTP: Alice reads who changed what in acme, filtered and paged, and never globex's."""

import pytest

from jobs.models import AuditEntry
from tests.fixtures.api import assert_problem


@pytest.fixture
def entries(acme, globex):
    made = [
        AuditEntry.objects.create(
            tenant=acme,
            actor="user:alice",
            action="pause",
            object_type="jobs.jobdefinition",
            object_id="1",
            object_repr="billing.nightly",
        ),
        AuditEntry.objects.create(
            tenant=acme,
            actor="token:dt_t_abc",
            action="trigger",
            object_type="jobs.jobdefinition",
            object_id="1",
            object_repr="billing.nightly",
            note="customer asked",
        ),
        AuditEntry.objects.create(
            tenant=acme,
            actor="user:alice",
            action="replay",
            object_type="dlq.deadletter",
            object_id="7",
            object_repr="dead letter 7",
        ),
    ]
    AuditEntry.objects.create(
        tenant=globex,
        actor="user:bob",
        action="pause",
        object_type="jobs.jobdefinition",
        object_id="2",
        object_repr="globex.secret",
    )
    return made


def test_it_lists_the_tenants_entries_newest_first_and_filters_them(api, acme_team, entries):
    everything = api.get("/v1/audit", token=acme_team).json()["results"]
    by_alice = api.get("/v1/audit?actor=user:alice", token=acme_team).json()["results"]
    triggers = api.get("/v1/audit?action=trigger&object_type=jobs.jobdefinition", token=acme_team).json()["results"]

    assert [e["id"] for e in everything if e["id"] in {x.pk for x in entries}] == [e.pk for e in reversed(entries)]
    assert "globex.secret" not in str(everything), "another tenant's entries never show"
    assert {e["action"] for e in by_alice} == {"pause", "replay"}
    assert [(e["actor"], e["note"]) for e in triggers] == [("token:dt_t_abc", "customer asked")]


def test_it_pages_by_cursor(api, acme_team, entries):
    first = api.get("/v1/audit?limit=2", token=acme_team).json()
    second = api.call("GET", first["next"], token=acme_team).json()
    assert len(first["results"]) == 2 and second["results"]
    assert not {e["id"] for e in first["results"]} & {e["id"] for e in second["results"]}


def test_bad_filters_are_problems(api, acme_team, entries):
    assert_problem(api.get("/v1/audit?acton=pause", token=acme_team), 400, "validation-error")
    assert_problem(api.get("/v1/audit?action=PAUSE;drop", token=acme_team), 400, "validation-error")
    assert_problem(api.get("/v1/audit?since=yesterday", token=acme_team), 400, "validation-error")
    assert_problem(api.get("/v1/audit?actor=%00", token=acme_team), 400, "validation-error")
