"""A tenant's members: granted, re-granted and removed through jobs.members, each change audited;
roles are read from the database each time they are asked."""

import pytest

from jobs import members
from jobs.choices import Role
from jobs.models import AuditEntry, Membership


@pytest.fixture
def dave(db, django_user_model):
    return django_user_model.objects.create_user("dave", password="dave-pass-123", is_staff=True)


def test_it_adds_a_member_with_a_role_and_audits_who_did_it(acme, dave):
    membership = members.grant(acme, dave, "operator", actor="user:alice", note="on call this week")

    assert members.role_in(dave, acme.pk) == Role.OPERATOR
    entry = AuditEntry.objects.get(action="grant_role")
    assert (entry.actor, entry.tenant, entry.object_id, entry.note) == (
        "user:alice",
        acme,
        str(membership.pk),
        "on call this week",
    )
    assert entry.detail == {"user": "dave", "role": {"before": None, "after": "operator"}}


def test_it_changes_a_role_and_audits_before_and_after(acme, dave):
    members.grant(acme, dave, "owner", actor="user:alice")

    members.grant(acme, dave, "viewer", actor="user:alice")

    assert Membership.objects.get(tenant=acme, user=dave).role == "viewer"
    change = AuditEntry.objects.get(action="change_role")
    assert change.detail["role"] == {"before": "owner", "after": "viewer"}


def test_it_writes_nothing_when_the_role_is_already_held(acme, dave):
    members.grant(acme, dave, "operator", actor="user:alice")
    members.grant(acme, dave, "operator", actor="user:alice")

    assert AuditEntry.objects.count() == 1
    assert Membership.objects.filter(tenant=acme, user=dave).count() == 1


def test_it_removes_a_member_and_audits_the_role_they_had(acme, dave):
    members.grant(acme, dave, "operator", actor="user:alice")

    assert members.remove(acme, dave, actor="user:alice", note="left the team")
    assert not members.remove(acme, dave, actor="user:alice")  # gone already: nothing to do, nothing audited

    assert members.role_in(dave, acme.pk) is None
    entry = AuditEntry.objects.get(action="remove_member")
    assert entry.detail["role"] == {"before": "operator", "after": None} and entry.note == "left the team"


def test_it_refuses_a_role_that_is_not_one(acme, dave):
    with pytest.raises(ValueError):
        members.grant(acme, dave, "admin", actor="user:alice")
    assert not Membership.objects.exists()


def test_it_reads_roles_per_tenant_and_none_for_those_who_cannot_use_the_portal(acme, globex, dave, django_user_model):
    members.grant(acme, dave, "owner", actor="test")
    members.grant(globex, dave, "viewer", actor="test")
    assert members.roles_of(dave) == {acme.pk: Role.OWNER, globex.pk: Role.VIEWER}

    dave.is_active = False
    assert members.roles_of(dave) == {}  # an inactive user holds nothing, whatever the rows say
    carol = django_user_model.objects.create_superuser("carol", "carol@example.com", "carol-pass-123")
    assert members.roles_of(carol) is None  # a superuser: every tenant, every action
    assert members.role_in(carol, acme.pk) == Role.OWNER


def test_a_member_added_without_a_role_is_a_viewer(acme, dave):
    acme.members.add(dave)
    assert members.role_in(dave, acme.pk) == Role.VIEWER
