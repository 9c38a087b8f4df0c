"""The named queries: the same names in both dialects, each run by the function of that name."""

import inspect
import re

import psycopg
import pytest
from django.db import OperationalError, connection

from runs import claims, dispatcher, enqueue, generations, materialize, rollups, shards, sql, transitions
from tests.conftest import engine_env


def test_both_dialects_have_the_same_queries():
    assert set(sql.load("postgres")) == set(sql.load("sqlite"))


def test_each_query_is_run_by_the_function_of_its_name():
    functions = {}
    for module in (claims, dispatcher, enqueue, generations, materialize, rollups, shards, transitions):
        for name, function in inspect.getmembers(module, inspect.isfunction):
            if function.__module__ == module.__name__:
                functions[name] = inspect.getsource(function)
    for name in sql.load("postgres"):
        assert name in functions, f"no function named {name}"
        assert re.search(rf'sql\.execute\(\s*"{name}"', functions[name]), f"{name}() does not run the {name} query"


@pytest.mark.django_db
@pytest.mark.skipif(connection.vendor != "postgresql", reason="PostgreSQL's session settings")
def test_each_session_keeps_one_generic_plan_per_query_and_never_compiles_with_jit():
    # With auto, the partitioned history makes the server re-plan the completion and the claim at
    # every execution; with JIT, a fold over the day partitions compiled for seconds each pass.
    with connection.cursor() as c:
        c.execute("SELECT current_setting('plan_cache_mode'), current_setting('jit')")
        assert c.fetchone() == ("force_generic_plan", "off")


@pytest.mark.django_db
@pytest.mark.skipif(connection.vendor != "postgresql", reason="PostgreSQL's session settings")
@pytest.mark.parametrize("jit, warned", [("on", 1), ("off", 0)])
def test_behind_a_transaction_pooler_a_role_that_leaves_jit_on_is_named_once_per_process(
    settings, monkeypatch, caplog, jit, warned
):
    settings.DUETIME_DATABASE_POOLING = "transaction"  # nothing is SET at connect: the role's settings hold
    monkeypatch.setattr(sql, "_jit_checked", False)
    with connection.cursor() as c:
        c.execute(f"SET jit = {jit}")  # as the role would leave it
    try:
        for _ in range(3):  # three new connections of one process
            sql.on_connect(None, connection)
    finally:
        with connection.cursor() as c:
            c.execute("SET jit = off")
    warnings = [r.getMessage() for r in caplog.records if "jit = on" in r.getMessage()]
    assert len(warnings) == warned
    assert all("ALTER ROLE" in message for message in warnings)


def test_a_query_of_several_statements_is_split_at_the_end_of_each():
    statements = sql.load("sqlite")["complete_runs"]
    assert [s.split()[0] for s in statements] == ["WITH"] * 5
    assert all(";" not in s for s in statements)


@pytest.mark.django_db(transaction=True)
@pytest.mark.skipif(connection.vendor != "postgresql", reason="a backend to terminate")
def test_a_terminated_connection_raises_djangos_error_once_and_the_next_query_reconnects():
    shards.next_fencing_tokens(1)
    with psycopg.connect(engine_env()["DATABASE_URL"], autocommit=True) as operator:
        operator.execute("SELECT pg_terminate_backend(%s)", [connection.connection.info.backend_pid])
    with pytest.raises(OperationalError):  # Django's, which the loops catch; not psycopg's
        shards.next_fencing_tokens(1)
    assert connection.connection is None, "the broken connection was closed"
    assert len(shards.next_fencing_tokens(1)) == 1
