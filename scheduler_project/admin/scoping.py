"""The portal's one tenant-scoping helper: who sees and acts on which tenants.

Staff users belong to tenants (`Tenant.members`, each with a role) and see
only those tenants' objects; superusers see every tenant. Every portal surface (admin lists,
detail pages and actions, dashboards, the schedule preview and heatmap, live
updates) narrows its querysets through `scope()` and resolves a tenant from
a request through `tenant_or_404()`, so another tenant's object is a 404,
never a 403 that confirms it exists. `TenantScopedAdmin` is the base of
every portal ModelAdmin and applies the same narrowing to its lists, pages,
actions and choices, and the role checks of scheduler_project.admin.permissions
to its actions, forms and deletes (a 403 there: the object is the user's to see).
"""

import dataclasses
import functools

from django.contrib import admin
from django.contrib.admin.options import ActionLocation
from django.contrib.admin.utils import model_format_dict
from django.core.exceptions import PermissionDenied
from django.http import Http404

from jobs import roles
from jobs.models import SYSTEM_TENANT, JobDefinition, QueuePause, Tenant
from scheduler_project.admin import permissions


def sees_all(user):
    return bool(user and user.is_active and user.is_superuser)


def is_operator(user):
    """May use the portal at all (any role, viewer included): an active staff user who is a superuser
    or belongs to a tenant. What they may change is their role's (scheduler_project.admin.permissions)."""
    if not (user and user.is_active and user.is_staff):
        return False
    return sees_all(user) or user.tenants.exists()


def tenants(user):
    """The tenants `user` may see, as a queryset (none for anonymous or non-staff users).

    The system tenant (the canaries) is in no list: a superuser opens it by name (`tenant_or_404`).
    """
    if sees_all(user):
        return Tenant.objects.exclude(name=SYSTEM_TENANT)
    if not (user and user.is_active and user.is_staff):
        return Tenant.objects.none()
    return Tenant.objects.filter(members=user)


def paused_tenants(user, limit=20):
    """The paused among `user`'s tenants, for the banner every portal page shows: [{tenant, since, queues}].

    `queues` is None for a pause of the whole tenant, else the queues paused
    on their own ({queue: since}). Two small queries: the partial index
    tenant_paused, and the tenants' queue pauses.
    """
    mine = tenants(user)
    found = {}
    for tenant in mine.filter(paused_at__isnull=False).order_by("name")[:limit]:
        found[tenant.pk] = {"tenant": tenant, "since": tenant.paused_at, "queues": None}
    pauses = QueuePause.objects.filter(tenant__in=mine).select_related("tenant").order_by("tenant__name", "queue")
    for pause in pauses[:limit]:
        entry = found.setdefault(pause.tenant_id, {"tenant": pause.tenant, "since": None, "queues": {}})
        if entry["queues"] is not None:
            entry["queues"][pause.queue] = pause.paused_at
    return sorted(found.values(), key=lambda e: e["tenant"].name)


def tenant_ids(user):
    """The ids of `user`'s tenants, or None meaning "every tenant" (superusers)."""
    if sees_all(user):
        return None
    return set(tenants(user).values_list("pk", flat=True))


def system_tenant_id():
    """The pk of the system tenant (the canaries), or None before the scheduler created it."""
    return Tenant.objects.filter(name=SYSTEM_TENANT).values_list("pk", flat=True).first()


def scope(queryset, user, field="tenant", *, system=False):
    """`queryset` narrowed to the rows of `user`'s tenants; `field` is the path to the tenant.

    A superuser's lists leave out the system tenant's rows (64 canary jobs and
    a run of each a minute would bury the tenants' own); `system=True` keeps
    them, for a canary's own page and a list filtered to that tenant.
    """
    ids = tenant_ids(user)
    if ids is None:
        hidden = None if system else system_tenant_id()
        if hidden is None:
            return queryset
        if queryset.model is Tenant and field == "tenant":
            return queryset.exclude(pk=hidden)
        return queryset.exclude(**{f"{field}_id": hidden})
    if queryset.model is Tenant and field == "tenant":
        return queryset.filter(pk__in=ids)
    return queryset.filter(**{f"{field}_id__in": ids})


def can_see_tenant(user, tenant_id):
    ids = tenant_ids(user)
    return ids is None or tenant_id in ids


def tenant_or_404(user, name):
    """The tenant called `name` if `user` may see it; otherwise 404, whether it exists or not."""
    tenant = (Tenant.objects.all() if sees_all(user) else tenants(user)).filter(name=name).first()
    if tenant is None:
        raise Http404("No such tenant.")
    return tenant


def default_tenant(user):
    """The tenant a dashboard opens on: the first of the user's tenants by name, or None."""
    return tenants(user).order_by("name").first()


class TenantScopedAdmin(admin.ModelAdmin):
    """A ModelAdmin whose lists, detail pages, actions and choices are narrowed
    to the request user's tenants, and whose changes are allowed by role
    (scheduler_project.admin.permissions): every member reads; an action needs
    the role it is marked with (`@permissions.needs`), or `edit_role`; adding,
    changing and deleting need `edit_role` in the object's tenant. Nothing is
    added, changed or deleted unless a subclass allows it too."""

    tenant_field = "tenant"  # path from the model to its tenant
    edit_role = roles.OWN  # what adding, changing and deleting (where allowed) and unmarked actions need

    def get_queryset(self, request):
        return scope(super().get_queryset(request), request.user, self.tenant_field, system=self._shows_system(request))

    def _shows_system(self, request):
        """An object's page, or a list filtered to the system tenant (TenantFilter's `tenant`), shows its rows."""
        if getattr(request, "duetime_shows_system", False):
            return True
        wanted = request.GET.get("tenant")
        return bool(wanted) and wanted == str(system_tenant_id())

    def get_object(self, request, object_id, from_field=None):
        request.duetime_shows_system = True  # a canary's own page opens for a superuser (its lists leave it out)
        obj = super().get_object(request, object_id, from_field)
        if obj is None:
            raise Http404("No such object.")  # another tenant's object looks exactly like a missing one
        return obj

    def tenant_id_of(self, obj):
        return obj.pk if isinstance(obj, Tenant) else getattr(obj, f"{self.tenant_field}_id")

    def may_edit(self, request, obj=None):
        """`edit_role` in `obj`'s tenant; without an object, in at least one of the user's tenants."""
        if not is_operator(request.user):
            return False
        if obj is None:
            return permissions.holds_anywhere(request, self.edit_role)
        return permissions.allows(request, self.tenant_id_of(obj), self.edit_role)

    def has_module_permission(self, request):
        return is_operator(request.user)

    def has_view_permission(self, request, obj=None):
        return is_operator(request.user)

    def has_change_permission(self, request, obj=None):
        return self.may_edit(request, obj)

    def has_add_permission(self, request):
        return False

    def has_delete_permission(self, request, obj=None):
        return False

    def action_role(self, func):
        return getattr(func, "required_role", self.edit_role)

    def action_words(self, func):
        """The action's description, as its menu shows it ("Delete selected windows")."""
        words = str(getattr(func, "short_description", func.__name__.replace("_", " ")))
        return words % model_format_dict(self.opts) if "%(" in words else words

    def get_actions(self, request, action_location=ActionLocation.CHANGE_LIST):
        """The actions the user's roles allow in at least one tenant, each checked again on its rows when run."""
        found = super().get_actions(request, action_location=action_location)
        return {
            name: dataclasses.replace(action, func=self._guarded(action.func))
            for name, action in found.items()
            if permissions.holds_anywhere(request, self.action_role(action.func))
        }

    def _guarded(self, func):
        """`func`, refusing (403) rows of a tenant where the user's role does not allow it."""
        needed = self.action_role(func)

        @functools.wraps(func)
        def guarded(modeladmin, request, queryset):
            what = self.action_words(func)
            permissions.require_for(request, queryset, "" if self.model is Tenant else self.tenant_field, needed, what)
            return func(modeladmin, request, queryset)

        return guarded

    def changelist_view(self, request, extra_context=None):
        if request.method == "POST" and "action" in request.POST:
            self._refuse_unknown_action(request)
        return super().changelist_view(request, extra_context)

    def _refuse_unknown_action(self, request):
        """A POST naming an action the user's roles do not offer (crafted, or a page from before a demotion): 403."""
        try:
            name = request.POST.getlist("action")[int(request.POST.get("index", 0))]
        except (IndexError, ValueError):
            return  # Django answers "No action selected."
        if not name or name in self.get_actions(request):
            return
        declared = [a for a in self.actions or [] if a == name or getattr(a, "__name__", None) == name]
        found = self.get_action(declared[0] if declared else name)
        if found is not None and not permissions.holds_anywhere(request, needed := self.action_role(found.func)):
            what = self.action_words(found.func)
            raise PermissionDenied(f"{what} needs the role {needed} or above; you have it in none of your tenants.")
        raise PermissionDenied(f"There is no action {name!r} you may run here.")

    def formfield_for_foreignkey(self, db_field, request, **kwargs):
        """Choices among the tenants, and their jobs, where the user may edit (`edit_role`)."""
        allowed = permissions.tenant_ids_allowing(request, self.edit_role)
        if db_field.related_model is Tenant:
            kwargs["queryset"] = permissions.tenants_allowing(request, self.edit_role)
        elif db_field.related_model is JobDefinition:
            jobs = scope(JobDefinition.objects.all(), request.user)
            kwargs["queryset"] = jobs if allowed is None else jobs.filter(tenant_id__in=allowed)
        return super().formfield_for_foreignkey(db_field, request, **kwargs)
