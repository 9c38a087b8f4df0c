"""Alice clears a batch of dead letters over the API: by ids or by filter, with a dry run first."""

import pytest

from dlq.models import DeadLetter
from jobs.models import AuditEntry
from runs.models import Run
from tests.fixtures.api import assert_problem


@pytest.fixture
def letters(acme, make_job, make_dead_letter):
    export, imports = make_job(acme, "billing.export"), make_job(acme, "billing.import")
    return [make_dead_letter(export), make_dead_letter(export), make_dead_letter(imports)]


def test_a_dry_run_by_filter_says_what_would_change_and_changes_nothing(api, acme_team, letters):
    answer = api.post("/v1/dlq:replay", token=acme_team, json={"job": "billing.export", "dry_run": True})

    assert answer.status_code == 200, answer.text
    assert answer.json() == {
        "dry_run": True,
        "matched": 2,
        "changed": 0,
        "letters": [letters[0].pk, letters[1].pk],
        "more": False,
    }
    assert DeadLetter.objects.filter(replayed_at__isnull=True).count() == 3
    assert not AuditEntry.objects.filter(action="replay").exists()


def test_it_replays_by_filter_each_run_once_audited(api, acme_team, letters):
    answer = api.post("/v1/dlq:replay", token=acme_team, json={"job": "billing.export", "note": "printer fixed"})
    again = api.post("/v1/dlq:replay", token=acme_team, json={"job": "billing.export"})

    assert (answer.json()["changed"], answer.json()["letters"]) == (2, [letters[0].pk, letters[1].pk])
    assert again.json()["matched"] == 0, "replayed letters are closed"
    assert set(Run.objects.filter(pk__in=[d.run_id for d in letters[:2]]).values_list("state", flat=True)) == {
        "scheduled"
    }
    assert Run.objects.get(pk=letters[2].run_id).state == "dead", "the other job's letter is left alone"
    assert list(AuditEntry.objects.filter(action="replay").values_list("note", flat=True)) == ["printer fixed"] * 2


def test_it_discards_by_ids_and_ignores_another_tenants_ids(
    api, acme_team, letters, globex, make_job, make_dead_letter
):
    theirs = make_dead_letter(make_job(globex, "billing.export"))
    answer = api.post("/v1/dlq:discard", token=acme_team, json={"ids": [letters[2].pk, theirs.pk]})

    assert answer.json() == {"dry_run": False, "matched": 1, "changed": 1, "letters": [letters[2].pk], "more": False}
    theirs.refresh_from_db()
    assert theirs.discarded_at is None, "another tenant's letter is not even matched"


def test_bad_bulk_requests_are_problems(api, acme_team, letters, acme):
    both = api.post("/v1/dlq:replay", token=acme_team, json={"ids": [letters[0].pk], "job": "billing.export"})
    empty_ids = api.post("/v1/dlq:replay", token=acme_team, json={"ids": []})
    backwards = api.post(
        "/v1/dlq:discard",
        token=acme_team,
        json={"dead_after": "2026-06-02T00:00:00Z", "dead_before": "2026-06-01T00:00:00Z"},
    )
    assert_problem(both, 400, "validation-error")
    assert_problem(empty_ids, 400, "validation-error")
    assert_problem(backwards, 400, "validation-error")
    assert DeadLetter.objects.filter(replayed_at__isnull=True, discarded_at__isnull=True).count() == 3


def test_a_viewer_may_not_replay_in_bulk(api, acme, letters):
    from tests.fixtures.api import issue

    viewer = issue(acme, "team", role="viewer")
    assert_problem(api.post("/v1/dlq:replay", token=viewer, json={"dry_run": True}), 403, "insufficient-role")


def test_a_bulk_replay_and_a_bulk_discard_at_once_close_each_letter_once(
    api, acme, acme_team, make_job, make_dead_letter
):
    """Concurrent closes move letters to their history partition under each other's locks (PostgreSQL): the
    loser's step runs again and passes them over; no 500, each letter closed by exactly one of them."""
    import threading

    job = make_job(acme, "billing.export")
    letters = [make_dead_letter(job) for _ in range(30)]
    answers = {}

    def close(move):
        answers[move] = api.post(f"/v1/dlq:{move}", token=acme_team, json={}, timeout=60)

    threads = [threading.Thread(target=close, args=(move,)) for move in ("replay", "discard")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert {move: answer.status_code for move, answer in answers.items()} == {"replay": 200, "discard": 200}
    changed = answers["replay"].json()["letters"] + answers["discard"].json()["letters"]
    assert sorted(changed) == sorted(letter.pk for letter in letters), "each letter closed once, by one of them"
    assert not DeadLetter.objects.filter(replayed_at__isnull=True, discarded_at__isnull=True).exists()
