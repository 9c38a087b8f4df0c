"""Jobs declared in code, in the portal: the code column, the drift filter and table, and Adopt into code.

A job of a declared set (jobs/schedules.py) may be edited in the portal; its
drift (code as the set applied it, vs the portal now) is shown field by
field until the set's next apply reverts it or an operator adopts it into
code, which prints the declaration to paste into the set's file.
"""

import json

from django.contrib import admin
from django.template.response import TemplateResponse
from django.utils.html import format_html, format_html_join

from jobs import schedules
from jobs.audit import actor_for_user
from jobs.models import JobDefinition
from jobs.roles import OWN
from scheduler_project.admin.confirm import confirm_action
from scheduler_project.admin.permissions import needs


def code_column(job):
    """The set that declares the job, and the fields edited outside it (its drift)."""
    if not job.managed_by:
        return "—"
    found = schedules.drift(job)
    if not found:
        return format_html('<span data-testid="code-in-sync">set {} ✓</span>', job.managed_by)
    fields = ", ".join(d.field for d in found)
    return format_html(
        '<span class="portal-drift" data-testid="code-drift">set {} ⚠ drift: {}</span>', job.managed_by, fields
    )


def drift_table(job):
    """Field by field, code (as the set last applied it) against the portal (as it is now)."""
    if not job.pk or not job.managed_by:
        return "No: made in the portal or the API."
    found = schedules.drift(job)
    if not found:
        return format_html("Set {}: as the set last applied it, no drift.", job.managed_by)
    return format_html(
        "<p>Set {}: edited outside the set. The next apply reverts these, unless you adopt them into code.</p>"
        '<table class="portal-drift-table" data-testid="drift-table"><thead><tr><th scope="col">field</th>'
        '<th scope="col">code</th><th scope="col">portal</th></tr></thead><tbody>{}</tbody></table>',
        job.managed_by,
        format_html_join("", "<tr><td>{}</td><td>{}</td><td>{}</td></tr>", drift_rows(found)),
    )


def drift_rows(drift):
    return ((d.field, json.dumps(d.code), json.dumps(d.portal)) for d in drift)


class CodeFilter(admin.SimpleListFilter):
    """Jobs declared in code: in sync with their set, drifted from it, or not declared at all."""

    title = "declared in code"
    parameter_name = "code"

    def lookups(self, request, model_admin):
        return [("drift", "drifted"), ("sync", "in sync"), ("none", "not in code")]

    def queryset(self, request, queryset):
        if self.value() == "none":
            return queryset.filter(managed_by="")
        if self.value() in ("drift", "sync"):
            drifted = schedules.drifted_ids(queryset)
            owned = queryset.exclude(managed_by="")
            return owned.filter(pk__in=drifted) if self.value() == "drift" else owned.exclude(pk__in=drifted)
        return queryset


def _drift_words(drift):
    return "; ".join(f"{d.field}: code {json.dumps(d.code)}, portal {json.dumps(d.portal)}" for d in drift)


@needs(OWN)  # it rewrites what the set applied: schedules as code are the owners'
@admin.action(description="Adopt into code (accept the portal's edits; print the declarations)")
def adopt_into_code(modeladmin, request, queryset):
    def preview(qs, data):
        owned = [job for job in qs.exclude(managed_by="").select_related("tenant")[:1000]]
        drifted = [(job, schedules.drift(job)) for job in owned]
        n = sum(1 for _, d in drifted if d)
        return {
            "lines": [
                f"{n} job(s) declared in code and edited outside it will keep their current definition: "
                "it becomes the one their set applied, so they show no drift.",
                "The next page prints each one's declaration: paste it into the set's file, "
                "or the set's next apply reverts the edits after all.",
                f"{qs.count() - len(owned)} selected job(s) are not declared in code and are left out.",
            ],
            "rows": [(job, f"adopt: {_drift_words(d)}" if d else "no drift: left as it is") for job, d in drifted[:60]],
            "blocked": n == 0,
        }

    def perform(qs, data):
        jobs = list(qs.exclude(managed_by="").select_related("tenant"))
        adopted = schedules.adopt(jobs, actor=actor_for_user(request.user), note=data["note"])
        context = {
            **modeladmin.admin_site.each_context(request),
            "title": "Adopted into code",
            "opts": JobDefinition._meta,
            "declarations": _declarations(adopted),
        }
        return TemplateResponse(request, "portal/adopted.html", context)

    return confirm_action(
        modeladmin,
        request,
        queryset,
        action="adopt_into_code",
        title="Adopt into code",
        preview=preview,
        perform=perform,
        submit="Adopt",
    )


def _declarations(jobs):
    """[{"set", "text"}]: each set's adopted jobs as TOML to paste, or why one cannot be written."""
    by_set = {}
    for job in sorted(jobs, key=lambda j: (j.managed_by, j.name)):
        try:
            text = schedules.declaration(job)
        except ValueError as exc:
            text = f"# {job.name}: {exc}\n"
        by_set.setdefault(job.managed_by, []).append(text)
    return [{"set": name, "text": "\n".join(texts)} for name, texts in by_set.items()]
