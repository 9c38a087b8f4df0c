"""Alice works through Acme's dead-letter queue: list, replay, discard."""

import pytest

from jobs.models import AuditEntry
from runs.models import Run
from tests.fixtures.api import assert_problem


@pytest.fixture
def export_job(acme, make_job):
    return make_job(acme, "billing.export")


def test_it_lists_open_dead_letters_newest_first(api, acme_team, acme, make_job, export_job, make_dead_letter):
    other = make_job(acme, "billing.import")
    older = make_dead_letter(export_job, "timeout")
    newer = make_dead_letter(other, "bad input")

    everything = api.get("/v1/dlq", token=acme_team).json()["results"]
    one_job = api.get("/v1/dlq?job=billing.export", token=acme_team).json()["results"]

    assert [(d["id"], d["job"], d["last_error"]) for d in everything] == [
        (newer.pk, "billing.import", "bad input"),
        (older.pk, "billing.export", "timeout"),
    ]
    assert [d["id"] for d in one_job] == [older.pk]


def test_it_replays_a_dead_letter_once(api, acme_team, export_job, make_dead_letter):
    letter = make_dead_letter(export_job)

    replayed = api.post(f"/v1/dlq/{letter.pk}:replay", token=acme_team, json={"note": "fixed the printer"})
    again = api.post(f"/v1/dlq/{letter.pk}:replay", token=acme_team)
    discard = api.post(f"/v1/dlq/{letter.pk}:discard", token=acme_team)

    assert replayed.status_code == 200
    assert (replayed.json()["status"], replayed.json()["resolved_by"]) == ("replayed", f"token:{acme_team[:12]}")
    assert Run.objects.get(pk=letter.run_id).state == "scheduled"
    assert "already replayed" in assert_problem(again, 409, "invalid-state")["detail"]
    assert_problem(discard, 409, "invalid-state")
    assert AuditEntry.objects.get(action="replay").note == "fixed the printer"
    assert api.get("/v1/dlq", token=acme_team).json()["results"] == []
    assert [d["status"] for d in api.get("/v1/dlq?status=replayed", token=acme_team).json()["results"]] == ["replayed"]


def test_it_discards_a_dead_letter(api, acme_team, export_job, make_dead_letter):
    letter = make_dead_letter(export_job)

    discarded = api.post(f"/v1/dlq/{letter.pk}:discard", token=acme_team)

    assert discarded.json()["status"] == "discarded"
    assert Run.objects.get(pk=letter.run_id).state == "dead"
    assert [d["id"] for d in api.get("/v1/dlq?status=all", token=acme_team).json()["results"]] == [letter.pk]


def test_it_refuses_an_unknown_status_filter(api, acme_team):
    assert_problem(api.get("/v1/dlq?status=lost", token=acme_team), 400, "validation-error")
