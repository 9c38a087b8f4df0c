"""The default jitter (jobs/jitter.py): chosen for new jobs whose owner states none, kept otherwise.

Acme's jobs are saved through save_definition, the one save path, as the
API, the portal and schedules as code do; the clock is pinned.
"""

import datetime as dt

import pytest

from jobs import jitter
from jobs.definitions import save_definition
from jobs.models import JobDefinition
from runs.enqueue import build_runs


def new_job(tenant, name="billing.ping", cron_expr="* * * * *", **fields):
    job = JobDefinition(
        tenant=tenant,
        name=name,
        schedule_kind="cron" if cron_expr else "none",
        cron_expr=cron_expr,
        target_kind="python",
        target_ref="tests.handlers.noop",
        **fields,
    )
    jitter.state(job, fields.get("jitter_seconds"))  # what a door does: None when the owner stated none
    return job


@pytest.mark.parametrize(
    ("cron_expr", "expected"),
    [
        ("* * * * *", 6),  # 10 % of a minute
        ("*/5 * * * *", 30),
        ("*/20 9-17 * * *", 120),  # the shortest gap counts, not the night's
        ("0,1 * * * *", 6),  # an irregular schedule: its closest pair
        ("0 * * * *", 300),  # 10 % of an hour is 360 s: capped at 5 minutes
        ("0 2 * * *", 300),
    ],
)
def test_it_gives_a_new_job_a_tenth_of_its_shortest_interval_capped_at_five_minutes(acme, clock, cron_expr, expected):
    job, _ = save_definition(new_job(acme, cron_expr=cron_expr), "test", now=clock.now)

    assert (job.jitter_seconds, job.jitter_is_default) == (expected, True)


def test_it_gives_none_to_a_job_without_an_interval(acme, clock):
    job, _ = save_definition(new_job(acme, cron_expr=""), "test", now=clock.now)

    assert (job.jitter_seconds, job.jitter_is_default) == (0, True)


def test_it_keeps_an_explicit_zero_as_an_opt_out(acme, clock):
    job, _ = save_definition(new_job(acme, jitter_seconds=0), "test", now=clock.now)
    job.cron_expr = "0 * * * *"
    save_definition(job, "test", now=clock.now)

    assert (job.jitter_seconds, job.jitter_is_default) == (0, False)


def test_it_lets_an_existing_job_keep_its_jitter_when_its_owner_states_none(acme, clock):
    # A job from before the default: its jitter is its owner's, whatever it is.
    legacy, _ = save_definition(new_job(acme, jitter_seconds=0), "test", now=clock.now)
    legacy.timeout_seconds = 60
    jitter.state(legacy, None)
    save_definition(legacy, "test", now=clock.now)

    assert JobDefinition.objects.get(pk=legacy.pk).jitter_seconds == 0


def test_it_chooses_again_when_the_schedule_of_a_job_with_its_choice_changes(acme, clock):
    job, _ = save_definition(new_job(acme, cron_expr="0 * * * *"), "test", now=clock.now)
    assert job.jitter_seconds == 300
    job.cron_expr = "* * * * *"  # an hourly job made every-minute must not keep a 5-minute offset
    jitter.state(job, None)
    save_definition(job, "test", now=clock.now)

    assert (job.jitter_seconds, job.jitter_is_default) == (6, True)


def test_it_keeps_a_stated_jitter_across_a_schedule_change(acme, clock):
    job, _ = save_definition(new_job(acme, cron_expr="0 * * * *", jitter_seconds=45), "test", now=clock.now)
    job.cron_expr = "*/10 * * * *"
    save_definition(job, "test", now=clock.now)

    assert (job.jitter_seconds, job.jitter_is_default) == (45, False)


def test_it_treats_restating_its_choice_as_no_statement(acme, clock):
    job, _ = save_definition(new_job(acme, cron_expr="*/5 * * * *"), "test", now=clock.now)
    jitter.state(job, 30)
    assert job.jitter_is_default
    jitter.state(job, 31)
    assert (job.jitter_seconds, job.jitter_is_default) == (31, False)


def test_it_follows_the_settings(acme, clock, settings):
    settings.DUETIME_DEFAULT_JITTER_PERCENT = 50
    settings.DUETIME_DEFAULT_JITTER_MAX_SECONDS = 20
    every_minute, _ = save_definition(new_job(acme), "test", now=clock.now)
    settings.DUETIME_DEFAULT_JITTER_MAX_SECONDS = 0
    off, _ = save_definition(new_job(acme, "billing.off"), "test", now=clock.now)

    settings.DUETIME_DEFAULT_JITTER_MAX_SECONDS, settings.DUETIME_DEFAULT_JITTER_PERCENT = 300, 0
    leap_day, _ = save_definition(new_job(acme, "billing.leap", cron_expr="0 0 29 2 *"), "test", now=clock.now)

    assert every_minute.jitter_seconds == 20  # 30 s, capped
    assert off.jitter_seconds == 0
    assert leap_day.jitter_seconds == 0  # 0 % turns the default off, rare schedules included


def test_it_delays_each_run_by_the_jobs_fixed_offset_and_says_so(acme, clock):
    job, _ = save_definition(new_job(acme, cron_expr="*/5 * * * *"), "test", now=clock.now)
    offset = jitter.stable_jitter("acme", "billing.ping", 30)
    due = [clock.ahead(minutes=5), clock.ahead(minutes=10)]

    runs = build_runs(job, due)

    assert [r.available_at - r.due_at for r in runs] == [dt.timedelta(seconds=offset)] * 2
    assert 0 <= offset < 30
    assert jitter.describe(job) == (
        "30 s, chosen by Duetime (10 % of the schedule's shortest interval, at most 300 s); "
        f"this job's runs start {offset} s after their due time"
    )


# ------------------------------------------------- the fixed offset of each job


def test_it_keeps_each_jobs_jitter_forever():
    """Pinned numbers: changing the hash would move every job's runs."""
    assert jitter.stable_jitter("alice", "billing.export-invoices", 300) == 292
    assert jitter.stable_jitter("bob", "billing.export-invoices", 300) == 260
    assert jitter.stable_jitter("alice", "reports.nightly", 3600) == 1701
    assert jitter.stable_jitter("charlie", "x", 60) == 26
    assert jitter.stable_hash("alice", "billing.export-invoices") == 10484164579382180992


def test_it_has_no_jitter_when_none_is_asked_for():
    assert jitter.stable_jitter("alice", "billing.export-invoices", 0) == 0
    assert jitter.stable_jitter("alice", "billing.export-invoices", 1) == 0


def test_it_keeps_jitter_in_range_and_spread():
    offsets = [jitter.stable_jitter("alice", f"job-{n}", 60) for n in range(3000)]
    assert all(0 <= offset < 60 for offset in offsets)
    assert len(set(offsets)) == 60  # every second of the window gets used


def test_it_refuses_negative_jitter():
    with pytest.raises(ValueError):
        jitter.stable_jitter("alice", "billing.export-invoices", -1)
