"""The demo of `bin/run`: its jobs exist once, and the login it prints works on the database in use."""

import pytest
from django.contrib.auth import authenticate
from django.core.management import call_command

from bench import demo
from jobs.models import JobDefinition, Tenant


@pytest.fixture
def kept_passwords(tmp_path, settings):
    settings.BASE_DIR = tmp_path
    return tmp_path / ".duetime"


def test_it_creates_the_demo_jobs_once(db, kept_passwords):
    demo.setup()
    demo.setup()

    names = sorted(JobDefinition.objects.filter(tenant__name="demo").values_list("name", flat=True))
    assert names == sorted(job["name"] for job in demo.DEMO_JOBS)
    assert Tenant.objects.get(name="demo").task_prefixes == ["examples.demo_handlers"]  # allowed once


def test_it_prints_a_login_that_works_and_keeps_it(db, kept_passwords, capsys):
    call_command("setup_demo")
    first = capsys.readouterr().out.strip()
    call_command("setup_demo")
    second = capsys.readouterr().out.strip()

    username, password = first.removeprefix("login: ").split(" / ")
    assert first == second
    assert authenticate(username=username, password=password).is_superuser


def test_it_keeps_one_password_per_database(db, kept_passwords, monkeypatch):
    monkeypatch.setattr(demo, "database_id", lambda: "postgres-db")
    demo.setup()
    monkeypatch.setattr(demo, "database_id", lambda: "sqlite-db")
    _, password = demo.setup()

    assert sorted(p.name for p in kept_passwords.iterdir()) == [
        "admin-password-postgres-db",
        "admin-password-sqlite-db",
    ]
    assert authenticate(username="admin", password=password) is not None


def test_it_replaces_a_kept_password_that_no_longer_works(db, kept_passwords):
    demo.setup()
    demo.password_file().write_text("not-the-password\n")

    _, new = demo.setup()

    assert new != "not-the-password"
    assert authenticate(username="admin", password=new) is not None
