"""The portal's record of owner notifications, and the page that rotates a tenant's signing secret.

Notifications are read-only: notify.events writes them and notify.delivery
settles them; the portal shows what was sent, what failed (with the receiver's
answer) and what the rate limit held back, per tenant and per job (the job page
links here). The signing secret is shown once, when it is rotated; rotating is audited.
"""

import json

from django.contrib import admin, messages
from django.http import HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils import timezone
from django.utils.html import format_html

from jobs import audit
from jobs.audit import actor_for_user
from jobs.roles import OWN
from notify.models import Notification, SigningSecret
from scheduler_project.admin import permissions, scoping
from scheduler_project.admin.display import status_text, utc_seconds
from scheduler_project.admin.filters import JobFilter, TenantFilter
from scheduler_project.admin.pagination import CappedPaginator
from scheduler_project.admin.scoping import TenantScopedAdmin
from scheduler_project.admin.site import site


@admin.register(Notification, site=site)
class NotificationAdmin(TenantScopedAdmin):
    list_display = ["created_shown", "job", "tenant", "kind", "channel", "recipient", "status_shown", "attempts"]
    list_filter = ["status", "kind", "channel", TenantFilter, JobFilter]
    search_fields = ["^job__name", "recipient", "subject"]
    list_select_related = ["job", "tenant"]
    show_full_result_count = False
    paginator = CappedPaginator
    list_per_page = 50
    fields = [
        "job",
        "tenant",
        "kind",
        "channel",
        "recipient",
        "subject",
        "status_shown",
        "attempts",
        "created_at",
        "next_attempt_at",
        "sent_at",
        "response",
        "body_shown",
        "event_key",
    ]
    readonly_fields = fields

    class Media:
        css = {"all": ["portal/portal.css"]}

    def has_change_permission(self, request, obj=None):
        return False

    @admin.display(description="created", ordering="created_at")
    def created_shown(self, notification):
        return utc_seconds(notification.created_at)

    @admin.display(description="status")
    def status_shown(self, notification):
        return status_text(notification.status)

    @admin.display(description="body as sent")
    def body_shown(self, notification):
        return format_html('<pre class="portal-pre">{}</pre>', json.dumps(notification.body, indent=2)[:20_000])


@site.register_view("notify/signing-secret/", name="portal_signing_secret")
def signing_secret_page(request):
    """GET: the tenant's secret's prefix and age. POST: rotate it and show the new one once."""
    name = request.POST.get("tenant") or request.GET.get("tenant")
    tenant = scoping.tenant_or_404(request.user, name) if name else scoping.default_tenant(request.user)
    context = {
        **site.each_context(request),
        "title": "Webhook signing secret",
        "tenant": tenant,
        "tenants": scoping.tenants(request.user),
    }
    context["can_rotate"] = tenant is not None and permissions.allows(request, tenant.pk, OWN)
    if tenant is not None and request.method == "POST":
        permissions.require(request, [tenant.pk], OWN, "Rotating the webhook signing secret")  # secrets: the owners'
        context["secret"] = SigningSecret.rotate(tenant, timezone.now())
        audit.record(actor_for_user(request.user), "rotate_signing_secret", tenant, tenant=tenant)
        messages.success(
            request, f"The webhook signing secret of {tenant.name} was rotated: the old one no longer signs."
        )
    elif request.method == "POST":
        return HttpResponseRedirect(reverse("admin:portal_signing_secret"))
    context["current"] = SigningSecret.objects.filter(tenant=tenant).first() if tenant else None
    return TemplateResponse(request, "portal/signing_secret.html", context)
