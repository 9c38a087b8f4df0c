"""A tenant's members and their roles: who belongs, as what, and the one door that changes it.

`grant` adds a member or changes a member's role, `remove` takes a member
out; both write an audit entry in the same transaction, and the portal (the
Members page) calls them, as a command or the API would. Who may call them is
the door's check (an owner of the tenant, or a superuser: jobs/roles.py).

`roles_of` and `role_in` read the roles at the moment they are asked, one
indexed query, so every request of the portal sees a change made a moment
before (a demoted member loses an action at the next request).
"""

from django.db import transaction

from jobs import audit
from jobs.choices import Role
from jobs.models import Membership


def sees_all(user):
    """Superusers: every tenant, above every role."""
    return bool(user and user.is_active and user.is_superuser)


def roles_of(user):
    """{tenant id: Role} of `user`'s memberships; None for a superuser (every tenant, every action).

    An inactive or non-staff user holds no role anywhere (they cannot use the portal).
    """
    if sees_all(user):
        return None
    if not (user and user.is_active and user.is_staff):
        return {}
    return {tenant: Role(role) for tenant, role in Membership.objects.filter(user=user).values_list("tenant", "role")}


def role_in(user, tenant_id):
    """`user`'s role in one tenant: Role.OWNER for a superuser, None for a non-member."""
    roles = roles_of(user)
    return Role.OWNER if roles is None else roles.get(tenant_id)


@transaction.atomic
@transaction.atomic
def grant(tenant, user, role, *, actor, note=""):
    """Make `user` a member of `tenant` with `role`, or change the role they have; audited. Returns the membership.

    Granting the role a member already has changes nothing and writes no audit entry.
    """
    role = Role(role)
    membership = Membership.objects.select_for_update().filter(tenant=tenant, user=user).first()
    before = membership.role if membership else None
    if membership is None:
        membership = Membership.objects.create(tenant=tenant, user=user, role=role)
    elif membership.role != role:
        Membership.objects.filter(pk=membership.pk).update(role=role)
        membership.role = role
    if before != role:
        detail = {"user": user.get_username(), "role": {"before": before, "after": str(role)}}
        audit.record(actor, "grant_role" if before is None else "change_role", membership, detail=detail, note=note)
    return membership


@transaction.atomic
def remove(tenant, user, *, actor, note=""):
    """Take `user` out of `tenant`; audited. Returns whether they were a member."""
    membership = Membership.objects.select_for_update().filter(tenant=tenant, user=user).first()
    if membership is None:
        return False
    detail = {"user": user.get_username(), "role": {"before": membership.role, "after": None}}
    audit.record(actor, "remove_member", membership, detail=detail, note=note)
    membership.delete()
    return True
