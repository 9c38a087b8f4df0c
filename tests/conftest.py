"""Named actors and factories for tests that read like stories.

Tenants: acme (Alice is its owner) and globex (Bob's). `make_job` and
`make_run(state=...)` keep columns consistent with the database's CHECKs.
"""

import datetime as dt
import itertools

import pytest
from django.core.cache import cache
from django.db import connection
from django.utils import timezone

from jobs.models import JobDefinition, Tenant, shard_for
from runs import metrics
from runs.models import Run

# Fixtures of the API (a live server, bearer tokens), the portal (logged-in actors) and the network
# (a DNS zone of the tests' own for every test, loopback listeners, a dial recorder).
pytest_plugins = ["tests.fixtures.api", "tests.fixtures.portal", "tests.fixtures.network"]

UTC = dt.UTC
NOW = dt.datetime(2026, 6, 1, 9, 0, tzinfo=UTC)
_tokens = itertools.count(10_000_000)


class Clock:
    """An instant that moves only when the test says so: `now`, `advance()`, `ago()`, `ahead()`.

    Engine code takes `now=`; a test passes `clock.now`, so what it checks never
    depends on when it runs. Hot SQL uses this instant too, instead of the
    database clock, whenever `now` is passed.
    """

    def __init__(self, now):
        self.now = now

    def advance(self, **delta):
        """Move the clock forward by `datetime.timedelta(**delta)` and return the new `now`."""
        self.now += dt.timedelta(**delta)
        return self.now

    def ago(self, **delta):
        return self.now - dt.timedelta(**delta)

    def ahead(self, **delta):
        return self.now + dt.timedelta(**delta)


@pytest.fixture(autouse=True)
def fresh_cache():
    """The API throttles count in the cache (scheduler_project/api/throttles.py): no test inherits another's counts."""
    cache.clear()


@pytest.fixture(autouse=True)
def fresh_tenant_names():
    """Tenant names are cached per process by id (runs.metrics.tenant_names, read by the metrics and the move
    log): a test database hands one id to acme in one test and to globex in the next."""
    metrics._tenant_names.clear()


@pytest.fixture(autouse=True)
def claims_idle_in_tests(monkeypatch):
    """A claim's transaction may sit idle CLAIM_IDLE_TIMEOUT (500 ms) before the server ends it: its
    callers commit right after it. A test's transaction wraps everything the test does after its claims,
    and may idle longer on a busy machine, so in this process it gets a minute; the tests of the limit
    itself set their own, and engine processes started by tests keep the real one."""
    from runs import claims

    monkeypatch.setattr(claims, "CLAIM_IDLE_TIMEOUT", "60s")


@pytest.fixture
def clock():
    """The pinned clock, at NOW (Monday 1 June 2026, 09:00 UTC)."""
    return Clock(NOW)


@pytest.fixture
def wall_clock():
    """The real clock, read once as the test starts, for code that reads the clock itself.

    A live server, the portal's views, real processes and the database's `now()`
    cannot be pinned, so a test of them places its rows relative to the real
    time, minutes or hours away, which no slow machine can cross.
    """
    return Clock(timezone.now())


def is_postgres():
    return connection.vendor == "postgresql"


@pytest.fixture
def acme(db):
    return Tenant.objects.create(name="acme", task_module_prefixes="tests.handlers")


@pytest.fixture
def globex(db):
    return Tenant.objects.create(name="globex", task_module_prefixes="tests.handlers")


@pytest.fixture
def alice(db, acme, django_user_model):
    user = django_user_model.objects.create_user("alice", password="alice-pass-123", is_staff=True)
    acme.members.add(user, through_defaults={"role": "owner"})
    return user


@pytest.fixture
def bob(db, globex, django_user_model):
    user = django_user_model.objects.create_user("bob", password="bob-pass-123", is_staff=True)
    globex.members.add(user, through_defaults={"role": "owner"})
    return user


@pytest.fixture
def make_job(db):
    def make(tenant, name="billing.export", **fields):
        fields.setdefault("schedule_kind", "cron" if fields.get("cron_expr") else "none")
        fields.setdefault("target_kind", "python")
        fields.setdefault("target_ref", "tests.handlers.noop")
        job = JobDefinition(tenant=tenant, name=name, shard=shard_for(tenant.name, name), **fields)
        job.full_clean()
        job.save()
        return job

    return make


@pytest.fixture
def make_run(db):
    def make(job, state="scheduled", due_at=None, **fields):
        # Unless told, due now by the real clock, as a live server's claims and the portal's views see it.
        due_at = due_at or fields.pop("due", None) or timezone.now()
        values = dict(
            job=job,
            tenant=job.tenant,
            due_at=due_at,
            available_at=due_at,
            state=state,
            queue=job.queue,
            priority=job.priority,
            shard=job.shard,
            max_attempts=job.max_attempts,
            timeout_seconds=job.timeout_seconds,
            payload=job.payload,
            idempotency_key=f"{job.name}@{due_at.isoformat()}",
        )
        if state == "leased":
            values.update(
                attempt=1,
                fencing_token=next(_tokens),
                worker_id="w-test",
                started_at=due_at,
                lease_expires_at=due_at + dt.timedelta(seconds=30),
            )
        if state in ("succeeded", "dead", "cancelled", "skipped"):
            values["finished_at"] = due_at
        if state in ("cancelled", "skipped"):
            values["reason"] = "test"
        created_at = fields.pop("created_at", None)
        values.update(fields)
        run = Run.objects.create(**values)
        # Like a materialised occurrence, inserted ahead of its due time (unless told otherwise):
        # lateness counts from creation when a run is created after it was due.
        created_at = created_at or min(run.created_at, due_at - dt.timedelta(minutes=1))
        if created_at != run.created_at:
            Run.objects.filter(pk=run.pk).update(created_at=created_at)
            run.created_at = created_at
        return run

    return make


# What every engine subprocess's environment gains while a test sets it (tests/acceptance/test_pooling.py
# points them at a PgBouncer in front of the test database); a test's own `extra` still wins.
ENGINE_ENV = {}


def engine_env(**extra):
    """Environment for a subprocess (a real worker or scheduler) that uses the test database."""
    import os

    settings_dict = connection.settings_dict
    if is_postgres():
        url = "postgres://{USER}@{HOST}:{PORT}/{NAME}".format(
            USER=settings_dict["USER"] or "postgres",
            HOST=settings_dict["HOST"] or "127.0.0.1",
            PORT=settings_dict["PORT"] or 5432,
            NAME=settings_dict["NAME"],
        )
    else:
        url = f"sqlite:///{settings_dict['NAME']}"
    extra = {**ENGINE_ENV, **extra}
    return {**os.environ, "DATABASE_URL": url, "PYTHONUNBUFFERED": "1", **{k: str(v) for k, v in extra.items()}}


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """On PostgreSQL a concurrency test may not be skipped: a skip there is a failure."""
    outcome = yield
    report = outcome.get_result()
    if report.skipped and item.get_closest_marker("concurrency") and is_postgres():
        report.outcome = "failed"
        report.longrepr = f"concurrency test skipped on PostgreSQL: {report.longrepr}"
