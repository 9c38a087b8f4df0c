"""Alice manages Acme's job definitions over /v1/jobs."""

import datetime as dt
import threading

import pytest

from jobs.models import AuditEntry, JobDefinition
from runs.models import Run
from tests.fixtures.api import assert_problem, nightly, on_demand


def test_it_creates_a_job_with_documented_defaults(api, acme_team):
    response = api.put("/v1/jobs/billing.export-invoices", token=acme_team, json=nightly())

    assert response.status_code == 201
    assert response.headers["Location"] == "/v1/jobs/billing.export-invoices"
    job = response.json()
    assert job["name"] == "billing.export-invoices"
    assert job["tenant"] == "acme"
    assert job["status"] == "active"
    assert job["version"] == 1
    assert job["schedule"] == {
        "kind": "cron",
        "cron": "0 2 * * *",
        "time_zone": "Europe/Berlin",
        "at": None,
        "every_seconds": None,
        "start_at": None,
        "end_at": None,
        "remaining_runs": None,
        "ended": None,
        # Duetime's default jitter: 10 % of a day, capped at 300 s (docs/schedules-as-code.md).
        "jitter_seconds": 300,
        "jitter_chosen_by": "duetime",
        "jitter": "300 s, chosen by Duetime (10 % of the schedule's shortest interval, at most 300 s); "
        "this job's runs start 36 s after their due time",
        "missed_run_policy": "run_once",
        "starting_deadline_seconds": None,
    }
    assert job["target"] == {
        "kind": "external",
        "ref": None,
        "method": "POST",
        "headers": {},
        "bearer_secret": None,
        "signing_secret": None,
    }
    assert job["priority"] == "default"
    assert job["timeout_seconds"] == 900
    assert job["retry"] == {"max_attempts": 5, "base_seconds": 30, "max_seconds": 1800}
    assert job["concurrency"] is None
    assert job["overlap_policy"] == "forbid"
    assert job["payload"] == {}
    # 02:00 in Berlin is 00:00 or 01:00 UTC, depending on the season.
    assert job["next_due_at"][11:19] in ("00:00:00", "01:00:00")


def test_it_gives_an_external_job_without_a_queue_a_queue_of_its_own(api, acme_team):
    body = on_demand()
    del body["queue"]
    external = api.put("/v1/jobs/billing.export", token=acme_team, json=body)
    python = {"schedule": {"kind": "none"}, "target": {"kind": "python", "ref": "tests.handlers.noop"}}
    internal = api.put("/v1/jobs/billing.noop", token=acme_team, json=python)

    assert external.status_code == 201 and external.json()["queue"] == "external"
    assert internal.status_code == 201 and internal.json()["queue"] == "default"


def test_it_maps_every_body_field_onto_the_definition(api, acme_team, acme):
    body = {
        "schedule": {
            "kind": "cron", "cron": "*/15 * * * *", "time_zone": "America/New_York", "jitter_seconds": 30,
            "missed_run_policy": "skip", "starting_deadline_seconds": 120,
        },
        "target": {"kind": "python", "ref": "tests.handlers.noop"},
        "queue": "billing",
        "priority": "critical",
        "timeout_seconds": 60,
        "retry": {"max_attempts": 3, "base_seconds": 5, "max_seconds": 50},
        "concurrency": 2,
        "overlap_policy": "allow",
        "payload": {"format": "pdf"},
    }  # fmt: skip

    assert api.put("/v1/jobs/billing.export", token=acme_team, json=body).status_code == 201

    job = JobDefinition.objects.get(tenant=acme, name="billing.export")
    assert (job.cron_expr, job.time_zone, job.jitter_seconds) == ("*/15 * * * *", "America/New_York", 30)
    assert (job.missed_run_policy, job.starting_deadline_seconds) == ("skip", 120)
    assert (job.target_kind, job.target_ref, job.queue) == ("python", "tests.handlers.noop", "billing")
    assert (job.priority, job.timeout_seconds, job.concurrency) == (JobDefinition.Priority.CRITICAL, 60, 2)
    assert (job.max_attempts, job.retry_base_seconds, job.retry_max_seconds) == (3, 5, 50)
    assert (job.overlap_policy, job.payload) == ("allow", {"format": "pdf"})


def test_it_answers_the_same_put_twice_without_a_new_version(api, acme_team, acme):
    api.put("/v1/jobs/billing.export", token=acme_team, json=nightly())

    again = api.put("/v1/jobs/billing.export", token=acme_team, json=nightly())

    assert again.status_code == 200
    assert again.json()["version"] == 1
    assert AuditEntry.objects.filter(action="update").count() == 0


def test_it_bumps_the_version_when_something_changed(api, acme_team):
    api.put("/v1/jobs/billing.export", token=acme_team, json=nightly())

    changed = api.put("/v1/jobs/billing.export", token=acme_team, json=nightly(priority="bulk"))

    assert changed.status_code == 200
    assert changed.json()["version"] == 2
    assert changed.json()["priority"] == "bulk"


def test_it_resets_omitted_fields_to_their_defaults_on_put(api, acme_team):
    api.put("/v1/jobs/billing.export", token=acme_team, json=nightly(retry={"max_attempts": 9}, priority="bulk"))

    job = api.put("/v1/jobs/billing.export", token=acme_team, json=nightly()).json()

    assert job["retry"]["max_attempts"] == 5
    assert job["priority"] == "default"


def test_it_ignores_read_only_fields_in_the_body(api, acme_team, globex):
    body = nightly(tenant="globex", status="paused", version=99, name="other", next_due_at="2030-01-01T00:00:00Z")

    job = api.put("/v1/jobs/billing.export", token=acme_team, json=body).json()

    assert (job["tenant"], job["status"], job["version"], job["name"]) == ("acme", "active", 1, "billing.export")
    assert not JobDefinition.objects.filter(tenant=globex).exists()


def test_it_lists_jobs_by_name_a_page_at_a_time(api, acme_team, globex_team):
    for name in ("c.job", "a.job", "b.job"):
        api.put(f"/v1/jobs/{name}", token=acme_team, json=on_demand())
    api.put("/v1/jobs/globex.job", token=globex_team, json=on_demand())

    first = api.get("/v1/jobs?limit=2", token=acme_team).json()
    second = api.get(first["next"], token=acme_team).json()

    assert [j["name"] for j in first["results"]] == ["a.job", "b.job"]
    assert [j["name"] for j in second["results"]] == ["c.job"]
    assert second["next"] is None


def test_it_reads_one_job(api, acme_team):
    api.put("/v1/jobs/billing.export", token=acme_team, json=nightly())

    response = api.get("/v1/jobs/billing.export", token=acme_team)

    assert response.status_code == 200
    assert response.json()["schedule"]["cron"] == "0 2 * * *"


def test_it_deletes_a_job_and_cancels_its_future_runs(api, acme_team, acme, make_run, wall_clock):
    api.put("/v1/jobs/billing.export", token=acme_team, json=on_demand())
    job = JobDefinition.objects.get(tenant=acme, name="billing.export")
    waiting = make_run(job, due_at=wall_clock.ahead(hours=1))  # the future by the real clock, the live server's
    done = make_run(job, state="succeeded")

    response = api.delete("/v1/jobs/billing.export", token=acme_team)

    assert response.status_code == 200
    assert response.json() == {"name": "billing.export", "status": "cancelled", "cancelled_runs": 1}
    waiting.refresh_from_db()
    done.refresh_from_db()
    assert (waiting.state, waiting.reason) == ("cancelled", "job deleted")
    assert done.state == "succeeded"
    assert api.get("/v1/jobs", token=acme_team).json()["results"] == []
    assert [j["name"] for j in api.get("/v1/jobs?status=cancelled", token=acme_team).json()["results"]] == [
        "billing.export"
    ]
    assert api.delete("/v1/jobs/billing.export", token=acme_team).json()["cancelled_runs"] == 0


def test_it_brings_a_deleted_job_back_with_put(api, acme_team):
    api.put("/v1/jobs/billing.export", token=acme_team, json=nightly())
    api.delete("/v1/jobs/billing.export", token=acme_team)

    again = api.put("/v1/jobs/billing.export", token=acme_team, json=nightly())

    assert again.status_code == 200
    assert again.json()["status"] == "active"
    assert again.json()["next_due_at"] is not None
    assert again.json()["version"] == 2


def test_it_pauses_and_resumes_a_job(api, acme_team):
    api.put("/v1/jobs/billing.export", token=acme_team, json=nightly())

    paused = api.post("/v1/jobs/billing.export:pause", token=acme_team)
    paused_again = api.post("/v1/jobs/billing.export:pause", token=acme_team)
    resumed = api.post("/v1/jobs/billing.export:resume", token=acme_team)

    assert (paused.status_code, paused.json()["status"]) == (200, "paused")
    assert (paused_again.status_code, paused_again.json()["status"]) == (200, "paused")
    assert (resumed.status_code, resumed.json()["status"]) == (200, "active")
    assert resumed.json()["next_due_at"] is not None
    assert list(AuditEntry.objects.filter(action__in=["pause", "resume"]).values_list("action", "actor")) == [
        ("resume", f"token:{acme_team[:12]}"),
        ("pause", f"token:{acme_team[:12]}"),
    ]


def test_it_refuses_to_act_on_a_deleted_job(api, acme_team):
    api.put("/v1/jobs/billing.export", token=acme_team, json=nightly())
    api.delete("/v1/jobs/billing.export", token=acme_team)

    for action in ("pause", "resume", "trigger"):
        assert_problem(api.post(f"/v1/jobs/billing.export:{action}", token=acme_team), 409, "invalid-state")


def test_it_triggers_a_run_now(api, acme_team, acme):
    api.put("/v1/jobs/billing.export", token=acme_team, json=on_demand(payload={"month": 5}))

    response = api.post("/v1/jobs/billing.export:trigger", token=acme_team, json={"payload": {"month": 6}})

    assert response.status_code == 201
    run = Run.objects.get(pk=response.json()["id"])
    assert (run.origin, run.state, run.payload) == ("trigger", "scheduled", {"month": 6})
    assert response.json()["job"] == "billing.export"


def test_it_refuses_a_trigger_while_the_concurrency_limit_is_full(api, acme_team, acme, make_run):
    api.put("/v1/jobs/billing.export", token=acme_team, json=on_demand(concurrency=1))
    make_run(JobDefinition.objects.get(tenant=acme, name="billing.export"), state="leased")

    response = api.post("/v1/jobs/billing.export:trigger", token=acme_team)

    body = assert_problem(response, 409, "concurrency-limit")
    assert "at most 1" in body["detail"]


def test_it_backfills_a_window_of_a_cron_job(api, acme_team, acme, clock):
    api.put("/v1/jobs/billing.hourly", token=acme_team, json=nightly(schedule={"kind": "cron", "cron": "0 * * * *"}))
    end = clock.ago(minutes=30)
    start = end - dt.timedelta(hours=5)

    response = api.post(
        "/v1/jobs/billing.hourly:backfill",
        token=acme_team,
        json={"start": start.isoformat(), "end": end.isoformat(), "max_runs": 3},
    )

    assert response.status_code == 201, response.text
    assert response.json()["created"] == 3
    assert response.json()["truncated"] is True
    assert Run.objects.filter(job__name="billing.hourly", origin="backfill").count() == 3


def test_it_explains_a_backfill_it_cannot_do(api, acme_team, wall_clock):
    api.put("/v1/jobs/billing.once", token=acme_team, json=on_demand())
    api.put("/v1/jobs/billing.hourly", token=acme_team, json=nightly())
    now = wall_clock.now  # the live server tells past from future by the real clock
    window = {"start": (now - dt.timedelta(days=1)).isoformat(), "end": now.isoformat()}
    future = {"start": now.isoformat(), "end": (now + dt.timedelta(days=1)).isoformat()}

    not_cron = assert_problem(
        api.post("/v1/jobs/billing.once:backfill", token=acme_team, json=window), 400, "invalid-schedule"
    )
    too_late = assert_problem(
        api.post("/v1/jobs/billing.hourly:backfill", token=acme_team, json=future), 400, "validation-error"
    )
    naive = api.post(
        "/v1/jobs/billing.hourly:backfill",
        token=acme_team,
        json={"start": "2026-01-01T00:00:00", "end": "2026-01-02T00:00:00"},
    )

    assert not_cron["errors"][0]["field"] == "schedule.kind"
    assert too_late["errors"][0]["field"] == "end"
    assert assert_problem(naive, 400, "validation-error")["errors"][0]["field"] == "start"


def test_it_creates_a_job_once_under_concurrent_puts(api, acme_team, acme):
    answers = []
    start = threading.Barrier(6)

    def deploy():
        own = api.fresh()
        start.wait()
        answers.append(own.put("/v1/jobs/billing.export", token=acme_team, json=nightly()).status_code)

    threads = [threading.Thread(target=deploy) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)

    assert sorted(answers) == [200] * 5 + [201]
    job = JobDefinition.objects.get(tenant=acme, name="billing.export")
    assert job.version == 1


def test_it_refuses_a_target_that_is_not_a_registered_task_of_the_tenant(api, acme_team):
    plain = api.put(
        "/v1/jobs/billing.plain", token=acme_team, json=on_demand(target={"kind": "python", "ref": "os.system"})
    )
    problem = assert_problem(plain, 400, "validation-error")
    (error,) = problem["errors"]
    assert error["field"] == "target.ref"
    assert "may not run tasks from 'os'" in error["detail"] and "@task" in error["detail"]
    untasked = api.put(
        "/v1/jobs/billing.untasked",
        token=acme_team,
        json=on_demand(target={"kind": "python", "ref": "tests.handlers.plain_function"}),
    )
    assert "is not a Django task" in assert_problem(untasked, 400, "validation-error")["errors"][0]["detail"]
    assert not JobDefinition.objects.exists()


def test_it_refuses_a_payload_that_carries_a_credential_through_every_door(api, acme_team):
    put = api.put(
        "/v1/jobs/billing.export", token=acme_team, json=on_demand(payload={"aws_key": "AKIAIOSFODNN7EXAMPLE"})
    )
    problem = assert_problem(put, 400, "validation-error")
    assert "seems to carry an AWS access key id" in str(problem["errors"])
    assert not JobDefinition.objects.filter(name="billing.export").exists()

    api.put("/v1/jobs/billing.export", token=acme_team, json=on_demand())
    dsn = {"payload": {"dsn": "postgres://billing:hunter2@db.internal/billing"}}
    trigger = api.post("/v1/jobs/billing.export:trigger", token=acme_team, json=dsn)
    assert "seems to carry a password in a URL" in str(assert_problem(trigger, 400, "validation-error"))
    assert not Run.objects.exists()


def test_it_chooses_a_jitter_unless_opted_out_and_never_changes_it_when_omitted(api, acme_team):
    every_five = nightly(schedule={"kind": "cron", "cron": "*/5 * * * *"})
    first = api.put("/v1/jobs/billing.ping", token=acme_team, json=every_five)
    again = api.put("/v1/jobs/billing.ping", token=acme_team, json=every_five)
    opted_out = nightly(schedule={"kind": "cron", "cron": "*/5 * * * *", "jitter_seconds": 0})
    created = api.put("/v1/jobs/billing.quiet", token=acme_team, json=opted_out)
    rescheduled = api.put(
        "/v1/jobs/billing.quiet", token=acme_team, json=nightly(schedule={"kind": "cron", "cron": "* * * * *"})
    )

    assert first.json()["schedule"]["jitter_seconds"] == 30
    assert first.json()["schedule"]["jitter_chosen_by"] == "duetime"
    assert again.status_code == 200 and again.json()["version"] == 1  # nothing stated, nothing changed
    assert created.json()["schedule"]["jitter_seconds"] == 0
    assert created.json()["schedule"]["jitter_chosen_by"] == "owner"
    assert "jitter_seconds is 0" in created.json()["schedule"]["jitter"]
    assert rescheduled.json()["schedule"]["jitter_seconds"] == 0  # the owner's word outlives a schedule change


# --------------------------------------------------------------- every, bounds, remaining_runs


def every_body(**schedule):
    body = {"schedule": {"kind": "every", "every_seconds": 90, "jitter_seconds": 0}, "target": {"kind": "external"}}
    body["schedule"].update(schedule)
    return body


def test_it_creates_an_every_job_anchored_to_its_start_with_bounds_and_a_count(api, acme_team):
    body = every_body(start_at="2030-01-01T09:00:00+01:00", end_at="2030-01-02T09:00:00+01:00", remaining_runs=10)
    response = api.put("/v1/jobs/billing.pulse", token=acme_team, json=body)
    assert response.status_code == 201, response.json()
    schedule = response.json()["schedule"]
    assert schedule["kind"] == "every" and schedule["every_seconds"] == 90
    assert (schedule["start_at"], schedule["end_at"]) == ("2030-01-01T08:00:00Z", "2030-01-02T08:00:00Z")
    assert (schedule["remaining_runs"], schedule["ended"]) == (10, None)
    assert response.json()["next_due_at"] == "2030-01-01T08:00:00Z"


def test_it_shows_a_job_whose_count_is_spent_as_ended_with_no_next_due(api, acme_team):
    from runs import materialize

    api.put(
        "/v1/jobs/billing.pulse", token=acme_team, json=every_body(start_at="2030-01-01T09:00:00Z", remaining_runs=2)
    )
    materialize.materialize(dt.datetime(2030, 1, 1, 9, 0, tzinfo=dt.UTC), lookahead=3600)
    job = api.get("/v1/jobs/billing.pulse", token=acme_team).json()
    assert job["status"] == "active"
    assert (job["schedule"]["remaining_runs"], job["schedule"]["ended"], job["next_due_at"]) == (
        0,
        "remaining_runs",
        None,
    )
    assert Run.objects.filter(job__name="billing.pulse").count() == 2
    # Setting a new count starts it again from its next occurrence.
    again = api.put(
        "/v1/jobs/billing.pulse", token=acme_team, json=every_body(start_at="2030-01-01T09:00:00Z", remaining_runs=1)
    )
    assert (again.json()["schedule"]["ended"], again.json()["schedule"]["remaining_runs"]) == (None, 1)


def test_it_says_an_ended_at_schedule_and_a_passed_end(api, acme_team):
    body = every_body(start_at="2020-01-01T00:00:00Z", end_at="2020-01-02T00:00:00Z")
    job = api.put("/v1/jobs/billing.old", token=acme_team, json=body).json()
    assert (job["next_due_at"], job["schedule"]["ended"]) == (None, "end_at")


@pytest.mark.parametrize(
    ("schedule", "field"),
    [
        ({"every_seconds": 0}, "schedule.every_seconds"),
        ({"every_seconds": 0.5}, "schedule.every_seconds"),
        ({"every_seconds": None}, "schedule.every_seconds"),
        ({"start_at": "2030-01-02T00:00:00Z", "end_at": "2030-01-01T00:00:00Z"}, "schedule.end_at"),
        ({"start_at": "2030-01-01T00:00:00Z", "end_at": "2030-01-01T00:00:00Z"}, "schedule.end_at"),
        ({"start_at": "2030-01-01T00:00:00"}, "schedule.start_at"),  # no offset
        ({"remaining_runs": -1}, "schedule.remaining_runs"),
    ],
)
def test_it_answers_a_bad_period_or_bounds_with_a_400_problem_naming_the_field(api, acme_team, schedule, field):
    response = api.put("/v1/jobs/billing.pulse", token=acme_team, json=every_body(**schedule))
    body = assert_problem(response, 400, "invalid-schedule")
    assert field in [e["field"] for e in body["errors"]], body
    assert not JobDefinition.objects.filter(name="billing.pulse").exists()


def test_it_refuses_a_period_on_a_cron_job_and_bounds_on_an_on_demand_job(api, acme_team):
    cron = {"schedule": {"kind": "cron", "cron": "0 2 * * *", "every_seconds": 60}, "target": {"kind": "external"}}
    body = assert_problem(api.put("/v1/jobs/billing.a", token=acme_team, json=cron), 400, "invalid-schedule")
    assert [e["field"] for e in body["errors"]] == ["schedule.every_seconds"]
    none = {"schedule": {"kind": "none", "remaining_runs": 3}, "target": {"kind": "external"}}
    body = assert_problem(api.put("/v1/jobs/billing.b", token=acme_team, json=none), 400, "invalid-schedule")
    assert [e["field"] for e in body["errors"]] == ["schedule.remaining_runs"]
