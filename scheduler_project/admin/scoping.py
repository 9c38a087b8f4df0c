"""The portal's one tenant-scoping helper: who sees and acts on which tenants.

Staff users belong to tenants (`Tenant.members`) and see only those tenants'
objects; superusers see every tenant. Every portal surface (admin lists,
detail pages and actions, dashboards, the schedule preview and heatmap, live
updates) narrows its querysets through `scope()` and resolves a tenant from
a request through `tenant_or_404()`, so another tenant's object is a 404,
never a 403 that confirms it exists.
"""

from django.http import Http404

from jobs.models import Tenant


def sees_all(user):
    return bool(user and user.is_active and user.is_superuser)


def is_operator(user):
    """May use the portal at all: an active staff user who is a superuser or belongs to a tenant."""
    if not (user and user.is_active and user.is_staff):
        return False
    return sees_all(user) or user.tenants.exists()


def tenants(user):
    """The tenants `user` may see, as a queryset (none for anonymous or non-staff users)."""
    if sees_all(user):
        return Tenant.objects.all()
    if not (user and user.is_active and user.is_staff):
        return Tenant.objects.none()
    return Tenant.objects.filter(members=user)


def tenant_ids(user):
    """The ids of `user`'s tenants, or None meaning "every tenant" (superusers)."""
    if sees_all(user):
        return None
    return set(tenants(user).values_list("pk", flat=True))


def scope(queryset, user, field="tenant"):
    """`queryset` narrowed to the rows of `user`'s tenants; `field` is the path to the tenant."""
    ids = tenant_ids(user)
    if ids is None:
        return queryset
    if queryset.model is Tenant and field == "tenant":
        return queryset.filter(pk__in=ids)
    return queryset.filter(**{f"{field}_id__in": ids})


def can_see_tenant(user, tenant_id):
    ids = tenant_ids(user)
    return ids is None or tenant_id in ids


def tenant_or_404(user, name):
    """The tenant called `name` if `user` may see it; otherwise 404, whether it exists or not."""
    tenant = tenants(user).filter(name=name).first()
    if tenant is None:
        raise Http404("No such tenant.")
    return tenant


def default_tenant(user):
    """The tenant a dashboard opens on: the first of the user's tenants by name, or None."""
    return tenants(user).order_by("name").first()
