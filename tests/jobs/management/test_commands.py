"""create_tenant, create_token and apply_schedules, as an operator types them."""

import io

import pytest
from django.core.management import CommandError, call_command

from jobs.models import ApiToken, Tenant


def run(*args):
    out = io.StringIO()
    call_command(*args, stdout=out)
    return out.getvalue()


def test_it_creates_a_tenant(db):
    assert "Created tenant billing" in run("create_tenant", "billing")
    assert Tenant.objects.filter(name="billing").exists()


def test_it_refuses_a_tenant_name_that_is_not_a_slug(db):
    with pytest.raises(CommandError, match="name"):
        run("create_tenant", "Billing Team")
    assert not Tenant.objects.exists()


def test_it_prints_a_worker_secret_once_as_the_last_line(acme):
    output = run("create_token", "--tenant", "acme", "--kind", "worker", "--queues", "default,billing")
    secret = output.strip().splitlines()[-1]
    token = ApiToken.objects.get()
    assert token.secret_hash == ApiToken.hash_secret(secret)
    assert token.queues == ["default", "billing"]
    assert secret not in str(list(ApiToken.objects.values()))


def test_it_refuses_a_worker_token_without_queues(acme):
    with pytest.raises(CommandError, match="--queues"):
        run("create_token", "--tenant", "acme", "--kind", "worker")


def test_it_refuses_an_unknown_tenant(db):
    with pytest.raises(CommandError, match="no tenant named 'nobody'"):
        run("create_token", "--tenant", "nobody", "--kind", "team")


SET = """
# acme's billing jobs, declared in code
source = "billing"

[jobs."billing.export"]
schedule = { kind = "cron", cron = "0 2 * * *", time_zone = "Europe/Berlin" }
target = { kind = "external" }
queue = "reports"

[jobs."billing.once"]
schedule = { kind = "at", at = 2026-07-01T09:00:00+02:00 }
target = { kind = "external" }
"""


def test_it_prints_a_plan_on_a_dry_run_applies_it_then_finds_nothing_to_do(acme, tmp_path):
    from jobs.models import JobDefinition

    path = tmp_path / "schedules.toml"
    path.write_text(SET)

    dry = run("apply_schedules", "--tenant", "acme", str(path), "--dry-run")
    assert "+ create billing.export" in dry and 'schedule.cron: "0 2 * * *"' in dry
    assert "Plan: 2 to create" in dry and "Dry run: nothing was written" in dry
    assert not JobDefinition.objects.exists()

    assert "Applied." in run("apply_schedules", "--tenant", "acme", str(path))
    once = JobDefinition.objects.get(name="billing.once")
    assert once.managed_by == "billing" and once.run_at.isoformat() == "2026-07-01T07:00:00+00:00"
    assert "No changes" in run("apply_schedules", "--tenant", "acme", str(path))


def test_it_names_the_file_job_and_field_of_each_problem_and_writes_nothing(acme, tmp_path):
    from jobs.models import JobDefinition

    path = tmp_path / "schedules.toml"
    path.write_text(SET.replace("0 2 * * *", "0 25 * * *").replace('queue = "reports"', 'queu = "reports"'))
    with pytest.raises(CommandError) as typo:
        run("apply_schedules", "--tenant", "acme", str(path))
    path.write_text(SET.replace("0 2 * * *", "0 25 * * *"))
    with pytest.raises(CommandError) as bad_cron:
        run("apply_schedules", "--tenant", "acme", str(path))
    path.write_text("[jobs.billing\n")
    with pytest.raises(CommandError, match="is not valid TOML"):
        run("apply_schedules", "--tenant", "acme", str(path))

    assert "jobs.billing.export.queu: unknown field" in str(typo.value)
    assert "jobs.billing.export.schedule.cron:" in str(bad_cron.value) and "hour" in str(bad_cron.value)
    assert not JobDefinition.objects.exists()
    with pytest.raises(CommandError, match="no tenant named 'initech'"):
        run("apply_schedules", "--tenant", "initech", str(path))


def test_it_issues_a_team_token_as_an_operator_unless_given_a_role(acme):
    assert "with the role operator" in run("create_token", "--tenant", "acme", "--kind", "team", "--name", "ops")
    assert "with the role owner" in run(
        "create_token", "--tenant", "acme", "--kind", "team", "--name", "ci", "--role", "owner"
    )
    assert dict(ApiToken.objects.values_list("name", "role")) == {"ops": "operator", "ci": "owner"}


def test_it_refuses_a_role_for_a_worker_token_and_a_role_that_is_not_one(acme):
    with pytest.raises(CommandError, match="--role is for team tokens"):
        run("create_token", "--tenant", "acme", "--kind", "worker", "--queues", "default", "--role", "owner")
    with pytest.raises(CommandError, match="invalid choice: 'admin'"):
        run("create_token", "--tenant", "acme", "--kind", "team", "--role", "admin")
    assert not ApiToken.objects.exists()


CALENDARS_AND_WINDOWS = """
source = "billing"

[calendars.office]
time_zone = "Europe/Berlin"
holidays = [{ name = "Christmas", start = 2026-12-25, end = 2026-12-27 }]

[jobs."billing.export"]
schedule = { kind = "cron", cron = "0 2 * * *", time_zone = "Europe/Berlin" }
target = { kind = "external" }

[windows."export days off"]
job = "billing.export"
kind = "calendar"
calendar = "office"

[windows."new year freeze"]
kind = "one_off"
starts_at = 2026-12-31T00:00:00+01:00
ends_at = 2027-01-02T00:00:00+01:00
resume_policy = "run_once"
"""


def test_it_applies_calendars_and_windows_from_toml_then_finds_nothing_to_do(acme, tmp_path):
    from calendars.models import Calendar, Window

    path = tmp_path / "schedules.toml"
    path.write_text(CALENDARS_AND_WINDOWS)

    dry = run("apply_schedules", "--tenant", "acme", str(path), "--dry-run")
    applied = run("apply_schedules", "--tenant", "acme", str(path))

    assert "+ create calendar office" in dry and "+ create window export days off" in dry
    assert "Windows: 2 to create" in dry and "Calendars: 1 to create" in dry
    assert "Applied." in applied
    window = Window.objects.get(name="export days off")
    assert (window.job.name, window.calendar.name, window.managed_by) == ("billing.export", "office", "billing")
    assert Calendar.objects.get().holidays == [
        {"name": "Christmas", "start": "2026-12-25", "end": "2026-12-27", "all_day": True}
    ]
    assert "No changes" in run("apply_schedules", "--tenant", "acme", str(path))


def test_it_names_the_section_name_and_field_of_a_bad_window_and_writes_nothing(acme, tmp_path):
    from calendars.models import Calendar, Window
    from jobs.models import JobDefinition

    path = tmp_path / "schedules.toml"
    path.write_text(CALENDARS_AND_WINDOWS.replace("ends_at = 2027-01-02", "ends_at = 2026-12-30"))
    with pytest.raises(CommandError) as bad_end:
        run("apply_schedules", "--tenant", "acme", str(path))
    path.write_text(CALENDARS_AND_WINDOWS.replace('calendar = "office"', 'calendar = "ofice"'))
    with pytest.raises(CommandError) as bad_name:
        call_command("apply_schedules", "--tenant", "acme", str(path))

    assert "windows.new year freeze.ends_at: must be after the start" in str(bad_end.value)
    assert "windows.export days off.calendar: no calendar named 'ofice'" in str(bad_name.value)
    assert not (Calendar.objects.exists() or Window.objects.exists() or JobDefinition.objects.exists())
