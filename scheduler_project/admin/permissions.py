"""The portal's role checks: which of the user's tenants allow an action, checked each time it is used.

Every portal door that changes something states the role it needs (jobs/roles.py):
an admin action with `@needs(OPERATE)` (no mark: the ModelAdmin's `edit_role`),
a ModelAdmin's add, change and delete by its `edit_role`, a custom page's
POST by calling `require`. `TenantScopedAdmin` (scoping.py) applies them to
every list, action, form and form choice. Roles are read once per request
from the database (jobs.members.roles_of), never kept in the session, so a
member demoted mid-session loses the action at the next request. A refusal
is a 403 (`PermissionDenied`, the portal's 403 page says why) and changes
nothing; hidden buttons are only a courtesy, the check is here.
"""

from django.core.exceptions import PermissionDenied

from jobs import members, roles
from jobs.choices import Role
from jobs.models import SYSTEM_TENANT, Tenant

_CACHE = "_duetime_roles"


def roles_of(request):
    """{tenant id: Role} of the request's user, read once per request; None for a superuser (everything)."""
    if not hasattr(request, _CACHE):
        setattr(request, _CACHE, members.roles_of(request.user))
    return getattr(request, _CACHE)


def role_in(request, tenant_id):
    """The user's role in one tenant (owner for a superuser; None for a non-member)."""
    held = roles_of(request)
    return Role.OWNER if held is None else held.get(tenant_id)


def allows(request, tenant_id, needed):
    """Whether the user's role in tenant `tenant_id` allows what `needed` requires."""
    held = roles_of(request)
    return held is None or roles.allows(held.get(tenant_id), needed)


def holds_anywhere(request, needed):
    """Whether the user holds `needed` (or more) in at least one tenant: the door is worth showing."""
    held = roles_of(request)
    return held is None or any(roles.allows(role, needed) for role in held.values())


def tenant_ids_allowing(request, needed):
    """The ids of the user's tenants whose role allows `needed`; None for a superuser (every tenant)."""
    held = roles_of(request)
    if held is None:
        return None
    return {tenant for tenant, role in held.items() if roles.allows(role, needed)}


def tenants_allowing(request, needed):
    """The user's tenants whose role allows `needed`, as a queryset (for a form's tenant choices).

    A superuser's are every tenant but the system one (the canaries), as in every portal list.
    """
    ids = tenant_ids_allowing(request, needed)
    return Tenant.objects.exclude(name=SYSTEM_TENANT) if ids is None else Tenant.objects.filter(pk__in=ids)


def require(request, tenant_ids, needed, what):
    """Raise PermissionDenied (403) unless the user's role allows `needed` in each of `tenant_ids`."""
    held = roles_of(request)
    if held is None:
        return
    refused = sorted(t for t in set(tenant_ids) if not roles.allows(held.get(t), needed))
    if refused:
        name = Tenant.objects.filter(pk=refused[0]).values_list("name", flat=True).first() or "this tenant"
        denied = roles.InsufficientRole(held.get(refused[0]), needed, what, where=name)
        raise PermissionDenied(str(denied))


def require_for(request, queryset, field, needed, what):
    """`require` over the tenants of the rows of `queryset` (`field`: the path to the tenant, "" for tenants)."""
    held = roles_of(request)
    if held is None or all(roles.allows(role, needed) for role in held.values()):
        return  # allowed in every tenant the user sees: no need to look at the rows
    column = "pk" if not field else f"{field}_id"
    require(request, queryset.order_by().values_list(column, flat=True).distinct(), needed, what)


def needs(role):
    """Decorator: the role an admin action needs (jobs.roles.OPERATE or OWN)."""

    def mark(action):
        action.required_role = role
        return action

    return mark
