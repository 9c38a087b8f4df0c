"""The roles migration keeps what existing installs could do: members become owners, team tokens operators,
worker tokens stay without a role (docs/security.md, Roles: upgrading)."""

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

BEFORE = [("jobs", "0007_tenant_private_networks")]
AFTER = [("jobs", "0008_membership_roles_and_token_roles")]


def migrate(targets):
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(targets)
    return executor.loader.project_state(targets).apps


@pytest.fixture(autouse=True)
def latest_schema_afterwards():
    """Each test migrates back and forth; the tests after it need every migration applied, later ones too."""
    yield
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(executor.loader.graph.leaf_nodes())


@pytest.mark.django_db(transaction=True)
def test_it_makes_existing_members_owners_and_existing_team_tokens_operators(django_user_model):
    old = migrate(BEFORE)
    try:
        Tenant, ApiToken = old.get_model("jobs", "Tenant"), old.get_model("jobs", "ApiToken")
        User = old.get_model(*django_user_model._meta.label.split("."))
        acme = Tenant.objects.create(name="acme")
        alice = User.objects.create(username="alice", is_staff=True)
        acme.members.add(alice)
        ApiToken.objects.create(tenant=acme, kind="team", name="ci", prefix="dt_t_a", secret_hash="a" * 64)
        ApiToken.objects.create(tenant=acme, kind="worker", name="w", prefix="dt_w_b", secret_hash="b" * 64)
    finally:
        new = migrate(AFTER)

    Membership, ApiToken = new.get_model("jobs", "Membership"), new.get_model("jobs", "ApiToken")
    assert list(Membership.objects.values_list("tenant__name", "user__username", "role")) == [
        ("acme", "alice", "owner")
    ]
    assert dict(ApiToken.objects.values_list("name", "role")) == {"ci": "operator", "w": ""}
