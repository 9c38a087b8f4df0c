"""The replica router: the replica serves reads only inside a replica scope, and never
a read that must see a write (in a transaction, after the scope wrote, sessions and tokens).

The router is called directly: it decides an alias and opens no connection. That
the aliases reach a real primary and its streaming replica is shown end to end
in tests/acceptance/test_replica.py.
"""

import threading

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.auth import get_user_model
from django.contrib.contenttypes.models import ContentType
from django.contrib.sessions.models import Session
from django.db import transaction

from dlq.models import DeadLetter
from jobs.models import ApiToken, IdempotencyRecord, JobDefinition, Tenant
from runs.models import Attempt, Run
from scheduler_project.routers import REPLICA, ReplicaRouter, reads_replica, replica_reads

router = ReplicaRouter()


def test_it_reads_the_primary_outside_a_replica_scope():
    """The engine and the management commands never open a scope: they read the primary."""
    assert router.db_for_read(Run) == "default"
    assert router.db_for_read(JobDefinition) == "default"


@pytest.mark.parametrize("model", [Tenant, JobDefinition, Run, Attempt, DeadLetter])
def test_it_reads_lists_and_dashboards_from_the_replica_in_a_scope(model):
    with replica_reads():
        assert router.db_for_read(model) == REPLICA


@pytest.mark.parametrize("model", [get_user_model(), Session, ContentType, LogEntry, ApiToken, IdempotencyRecord])
def test_it_keeps_users_sessions_and_tokens_on_the_primary(model):
    """A login must hold on the next page and a revoked token must fail at once, however late the replica."""
    with replica_reads():
        assert router.db_for_read(model) == "default"


def test_it_writes_to_the_primary_everywhere():
    assert router.db_for_write(Run) == "default"
    with replica_reads():
        assert router.db_for_write(Run) == "default"


def test_it_reads_the_primary_once_the_scope_wrote():
    """A safe request that writes (a token's last-used stamp, a session) reads its own write afterwards."""
    with replica_reads():
        router.db_for_write(ApiToken)
        assert router.db_for_read(Run) == "default"
        assert not reads_replica()


def test_a_scope_ends_with_its_block():
    with replica_reads():
        router.db_for_write(Run)
    assert not reads_replica()
    with replica_reads():
        assert reads_replica(), "the next scope starts clean"
    assert router.db_for_read(Run) == "default"


def test_a_scope_does_not_reach_another_thread():
    seen = []
    with replica_reads():
        thread = threading.Thread(target=lambda: seen.append(router.db_for_read(Run)))
        thread.start()
        thread.join()
    assert seen == ["default"]


@pytest.mark.django_db(transaction=True)
def test_it_reads_the_primary_inside_a_transaction():
    """Claims, transitions and every atomic block read what they are about to write."""
    with replica_reads():
        assert router.db_for_read(Run) == REPLICA
        with transaction.atomic():
            assert router.db_for_read(Run) == "default"
        assert router.db_for_read(Run) == REPLICA


def test_it_never_migrates_the_replica():
    assert router.allow_migrate(REPLICA, "runs") is False
    assert router.allow_migrate("default", "runs") is None


def test_rows_read_from_either_database_relate():
    assert router.allow_relation(Run(), JobDefinition()) is True
