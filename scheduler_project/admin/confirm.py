"""Intermediate pages for admin actions, in the manner of `delete_selected`.

An action that changes things first shows what it will do (counts, what the
overlap policy will do, the objects concerned) and asks for a note that goes
into the audit record; only the second POST (`post=yes`) acts. Actions that
need input (backfill's window) show their form, then the preview of that
input (`post=preview`), then act.

Selections survive the round trip either as the selected ids or, when the
operator chose "select all N", as `select_across` with the changelist's
filters (the form posts back to the same URL), so a 10,000-row action does
not carry 10,000 ids.
"""

from django import forms
from django.contrib import messages
from django.contrib.admin import helpers
from django.template.response import TemplateResponse

PREVIEW_ROWS = 50


class NoteForm(forms.Form):
    note = forms.CharField(
        label="Audit note",
        required=False,
        max_length=2000,
        widget=forms.Textarea(attrs={"rows": 3, "cols": 60}),
        help_text="Why you are doing this. It is saved with the audit record of every object changed.",
    )


def confirm_action(
    modeladmin, request, queryset, *, action, title, preview, perform, form_class=NoteForm, submit="Yes, do it"
):
    """Run `perform(queryset, cleaned_data)` after a confirmation page, or show the page.

    `preview(queryset, cleaned_data)` returns {"lines": [...], "rows": [(obj, text)], "blocked": bool}.
    `perform` returns a message for the changelist, or an HttpResponse to show instead.
    """
    selected = set(request.POST.getlist(helpers.ACTION_CHECKBOX_NAME))
    missing = len(selected) - queryset.count() if request.POST.get("select_across") != "1" else 0
    if missing > 0:
        # Ids the operator cannot see (another tenant's, a crafted post) or that are gone are left out and
        # said so; with none left, nothing is done rather than answering "done 0" as if all went well.
        level, outcome = (
            (messages.WARNING, "they are left out") if missing < len(selected) else (messages.ERROR, "nothing was done")
        )
        modeladmin.message_user(
            request,
            f"{missing} of the {len(selected)} selected item(s) do not exist or are not yours; {outcome}.",
            level,
        )
        if missing == len(selected):
            return None
    stage = request.POST.get("post")
    form = form_class(request.POST if stage in ("yes", "preview") else None)
    valid = stage in ("yes", "preview") and form.is_valid()
    if stage == "yes" and valid:
        outcome = perform(queryset, form.cleaned_data)
        if isinstance(outcome, str):
            modeladmin.message_user(request, outcome)
            return None
        return outcome
    needs_input = form_class is not NoteForm and not valid
    shown = None if needs_input else preview(queryset, form.cleaned_data if valid else {})
    opts = modeladmin.model._meta
    context = {
        **modeladmin.admin_site.each_context(request),
        "title": title,
        "opts": opts,
        "app_label": opts.app_label,
        "action": action,
        "form": form,
        "needs_input": needs_input,
        "preview": shown,
        "rows": (shown or {}).get("rows", [])[:PREVIEW_ROWS],
        "more_rows": max(0, len((shown or {}).get("rows", [])) - PREVIEW_ROWS),
        "select_across": request.POST.get("select_across") == "1",
        # With "select all", the page's ids still go back (Django routes on them) and
        # select_across widens the action to the whole filtered changelist again.
        "selected": request.POST.getlist(helpers.ACTION_CHECKBOX_NAME),
        "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
        "submit": submit,
        "count": queryset.count(),
    }
    return TemplateResponse(request, "portal/confirm_action.html", context)
