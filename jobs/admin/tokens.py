"""API tokens in the portal: issue one (the secret is shown once), revoke, change a team token's role.

Tokens are the owners' (jobs/roles.py): issuing, revoking and changing a
role need the owner role in the token's tenant; every member sees the list.
A token is never edited; its role changes only through the action, which
calls jobs.tokens.change_role (audited) and counts from the token's next call.
"""

import re

from django import forms
from django.contrib import admin
from django.template.response import TemplateResponse

from jobs import tokens
from jobs.audit import actor_for_user
from jobs.models import QUEUE_RE, ApiToken
from jobs.roles import OWN
from scheduler_project.admin.confirm import NoteForm, confirm_action
from scheduler_project.admin.display import status_text
from scheduler_project.admin.filters import TenantFilter
from scheduler_project.admin.permissions import needs
from scheduler_project.admin.scoping import TenantScopedAdmin
from scheduler_project.admin.site import site

ROLE_HELP = (
    "Team tokens: viewer (reads only), operator (pause, resume, trigger, run, cancel, replay, discard, backfill; "
    "the default) or owner (also job definitions and schedules as code)."
)


class TokenCreateForm(forms.ModelForm):
    queue_names = forms.CharField(
        label="Queues",
        required=False,
        help_text="Worker tokens: comma-separated queues it may lease from, e.g. default,reports.",
    )
    role = forms.ChoiceField(
        label="Role",
        choices=ApiToken.Role.choices,
        initial=ApiToken.Role.OPERATOR,
        required=False,  # worker tokens have none; a team token without one is an operator
        help_text=ROLE_HELP,
    )

    class Meta:
        model = ApiToken
        fields = ["tenant", "kind", "name", "role"]

    def clean(self):
        data = super().clean()
        queues = [q.strip() for q in data.get("queue_names", "").split(",") if q.strip()]
        if data.get("kind") == ApiToken.Kind.WORKER and not queues:
            self.add_error("queue_names", "A worker token leases from named queues: list at least one.")
        if data.get("kind") == ApiToken.Kind.TEAM and queues:
            self.add_error(
                "queue_names", "Queues are for worker tokens; a team token acts on all of its tenant's jobs."
            )
        bad = [q for q in queues if not re.fullmatch(QUEUE_RE, q)]
        if bad:
            self.add_error(
                "queue_names", f"Not a queue name: {', '.join(bad)} (use lowercase letters, digits, '.', '_' or '-')."
            )
        data["queues"] = queues
        worker = data.get("kind") == ApiToken.Kind.WORKER
        data["role"] = "" if worker else data.get("role") or ApiToken.Role.OPERATOR
        self.instance.role = data["role"]  # also when the form left it out (the model's default is a team token's)
        return data


class TokenRoleForm(NoteForm):
    role = forms.ChoiceField(label="New role", choices=ApiToken.Role.choices, help_text=ROLE_HELP)
    field_order = ["role", "note"]


@admin.register(ApiToken, site=site)
class ApiTokenAdmin(TenantScopedAdmin):
    list_display = ["prefix", "name", "tenant", "kind", "role_shown", "queues", "token_status", "created_at"]
    list_filter = ["kind", "role", TenantFilter]
    search_fields = ["name", "prefix"]
    list_select_related = ["tenant"]
    actions = ["revoke_tokens", "change_token_roles"]
    add_form_template = None

    def has_add_permission(self, request):
        return self.may_edit(request)

    def has_change_permission(self, request, obj=None):
        return obj is None and self.may_edit(request)  # actions only; a token is never edited

    def get_form(self, request, obj=None, change=False, **kwargs):
        if obj is None:
            kwargs["form"] = TokenCreateForm
            kwargs["fields"] = ["tenant", "kind", "name", "role", "queue_names"]
        return super().get_form(request, obj, change, **kwargs)

    def get_fieldsets(self, request, obj=None):
        if obj is None:
            return [(None, {"fields": ["tenant", "kind", "name", "role", "queue_names"]})]
        return super().get_fieldsets(request, obj)

    @admin.display(description="role", ordering="role")
    def role_shown(self, token):
        return token.role or "—"

    @admin.display(description="status")
    def token_status(self, token):
        return status_text("active" if token.is_active else "revoked", {"active": "●", "revoked": "✕"})

    def save_model(self, request, obj, form, change):
        role = form.cleaned_data["role"] if obj.kind == ApiToken.Kind.TEAM else None
        token, secret = tokens.issue(
            obj.tenant,
            obj.kind,
            name=obj.name,
            queues=form.cleaned_data["queues"],
            role=role,
            actor=actor_for_user(request.user),
        )
        for field in ("pk", "prefix", "secret_hash", "queues", "role", "created_at"):
            setattr(obj, field, getattr(token, field))
        request._duetime_secret = secret

    def response_add(self, request, obj, post_url_continue=None):
        context = {
            **self.admin_site.each_context(request),
            "title": "Token created",
            "token": obj,
            "secret": request._duetime_secret,
            "opts": self.opts,
        }
        return TemplateResponse(request, "portal/token_secret.html", context)

    @needs(OWN)
    @admin.action(description="Revoke selected tokens")
    def revoke_tokens(self, request, queryset):
        def preview(qs, data):
            live = qs.filter(revoked_at=None)
            n = live.count()
            return {
                "lines": [
                    f"{n} active token(s) will stop working at once; callers using them get 401.",
                    "A revoked token cannot be restored: issue a new one.",
                ],
                "rows": [(t, "revoke" if t.is_active else "already revoked") for t in qs[:60]],
                "blocked": n == 0,
            }

        def perform(qs, data):
            revoked = tokens.revoke(qs, actor=actor_for_user(request.user), note=data["note"])
            return f"Revoked {len(revoked)} token(s)."

        return confirm_action(
            self,
            request,
            queryset,
            action="revoke_tokens",
            title="Revoke tokens",
            preview=preview,
            perform=perform,
            submit="Revoke",
        )

    @needs(OWN)
    @admin.action(description="Change the role of selected team tokens")
    def change_token_roles(self, request, queryset):
        def preview(qs, data):
            team = qs.filter(kind=ApiToken.Kind.TEAM)
            role = data.get("role")
            return {
                "lines": [
                    f"{team.exclude(role=role).count()} team token(s) will have the role {role} from their next call.",
                    "Worker tokens have no role and are left as they are.",
                ],
                "rows": [(t, _role_change(t, role)) for t in qs[:60]],
                "blocked": not team.exclude(role=role).exists(),
            }

        def perform(qs, data):
            changed = tokens.change_role(qs, data["role"], actor=actor_for_user(request.user), note=data["note"])
            return f"Changed the role of {len(changed)} token(s) to {data['role']}."

        return confirm_action(
            self,
            request,
            queryset,
            action="change_token_roles",
            title="Change the role of tokens",
            preview=preview,
            perform=perform,
            form_class=TokenRoleForm,
            submit="Change the role",
        )


def _role_change(token, role):
    if token.kind != ApiToken.Kind.TEAM:
        return "unchanged (a worker token has no role)"
    return f"unchanged ({role})" if token.role == role else f"{token.role} → {role}"
