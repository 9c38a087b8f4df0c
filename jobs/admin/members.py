"""A tenant's members and their roles in the portal: add a member, change a role, remove members.

Every member sees who belongs to their tenants and as what; owners (and
superusers) change it. Each change goes through jobs.members (`grant`,
`remove`), which audits it, so the portal adds no rule of its own. A user is
added by name: a superuser creates users (and marks them staff); an owner
makes them members.
"""

from django import forms
from django.contrib import admin
from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError

from jobs import members
from jobs.audit import actor_for_user
from jobs.models import Membership
from jobs.roles import OWN
from scheduler_project.admin.confirm import confirm_action
from scheduler_project.admin.filters import TenantFilter
from scheduler_project.admin.permissions import needs
from scheduler_project.admin.scoping import TenantScopedAdmin
from scheduler_project.admin.site import site

ROLE_HELP = (
    "viewer: reads every page, acts on nothing. operator: also pauses, resumes, triggers, cancels runs, "
    "replays and discards dead letters, backfills. owner: also edits job definitions, tokens, members, "
    "windows and calendars."
)


class MemberAddForm(forms.ModelForm):
    username = forms.CharField(label="User name", max_length=150, help_text="An existing staff user.")

    class Meta:
        model = Membership
        fields = ["tenant", "role"]
        help_texts = {"role": ROLE_HELP}

    def clean_username(self):
        name = self.cleaned_data["username"].strip()
        user = get_user_model().objects.filter(username=name, is_active=True, is_staff=True).first()
        if user is None:
            raise ValidationError(
                f"No active staff user is called {name!r}. A superuser creates users and marks them staff."
            )
        return user

    def clean(self):
        data = super().clean()
        tenant, user = data.get("tenant"), data.get("username")
        if tenant and user and Membership.objects.filter(tenant=tenant, user=user).exists():
            raise ValidationError(
                f"{user.get_username()} is already a member of {tenant.name}: change the role on their membership."
            )
        return data


@admin.register(Membership, site=site)
class MembershipAdmin(TenantScopedAdmin):
    list_display = ["member", "tenant", "role", "created_at"]
    list_filter = [TenantFilter, "role"]
    search_fields = ["user__username"]
    list_select_related = ["tenant", "user"]
    actions = ["remove_members"]

    def has_add_permission(self, request):
        return self.may_edit(request)

    def get_form(self, request, obj=None, change=False, **kwargs):
        if obj is None:
            kwargs["form"] = MemberAddForm
            kwargs["fields"] = ["tenant", "username", "role"]
        else:
            kwargs["fields"] = ["role"]
            kwargs.setdefault("help_texts", {"role": ROLE_HELP})
        return super().get_form(request, obj, change, **kwargs)

    def get_fields(self, request, obj=None):
        return ["tenant", "username", "role"] if obj is None else ["member", "tenant", "role", "created_at"]

    def get_readonly_fields(self, request, obj=None):
        return [] if obj is None else ["member", "tenant", "created_at"]

    @admin.display(description="user", ordering="user__username")
    def member(self, membership):
        return membership.user.get_username()

    def save_model(self, request, obj, form, change):
        """Through jobs.members.grant (audited), never a bare save()."""
        user = obj.user if change else form.cleaned_data["username"]
        saved = members.grant(obj.tenant, user, form.cleaned_data["role"], actor=actor_for_user(request.user))
        obj.pk, obj.user, obj.role, obj.created_at = saved.pk, user, saved.role, saved.created_at

    @needs(OWN)
    @admin.action(description="Remove selected members")
    def remove_members(self, request, queryset):
        def preview(qs, data):
            rows = list(qs.select_related("tenant", "user")[:60])
            return {
                "lines": [
                    f"{qs.count()} member(s) will leave their tenant: they no longer see it, at their next request.",
                    "Their past actions stay in the audit log.",
                ],
                "rows": [(m, f"remove {m.user.get_username()} ({m.role}) from {m.tenant.name}") for m in rows],
                "blocked": not rows,
            }

        def perform(qs, data):
            actor = actor_for_user(request.user)
            removed = [
                m
                for m in qs.select_related("tenant", "user")
                if members.remove(m.tenant, m.user, actor=actor, note=data["note"])
            ]
            return f"Removed {len(removed)} member(s)."

        return confirm_action(
            self,
            request,
            queryset,
            action="remove_members",
            title="Remove members",
            preview=preview,
            perform=perform,
            submit="Remove",
        )
