"""The portal's page of an http job's signing secret: its prefix and age, and rotating it (owners; audited).

The secret itself is shown once: on this page right after a rotation, or
right after a save that made it (JobDefinitionAdmin answers a save of an http
job that got its first secret with this page instead of the usual redirect).
It never travels in a message, a cookie or a URL.
"""

from django.contrib import messages
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse
from django.utils import timezone

from jobs import definitions
from jobs.audit import actor_for_user
from jobs.models import JobDefinition, JobSigningSecret
from jobs.roles import OWN
from scheduler_project.admin import permissions, scoping
from scheduler_project.admin.site import site


@site.register_view("jobs/<int:job_id>/signing-secret/", name="portal_job_signing_secret")
def job_signing_secret_page(request, job_id):
    """GET: the job's secret's prefix and age. POST: rotate it (owners) and show the new one once."""
    job = get_object_or_404(scoping.scope(JobDefinition.objects.select_related("tenant"), request.user), pk=job_id)
    secret = None
    if request.method == "POST":
        permissions.require(request, [job.tenant_id], OWN, "Rotating a job's signing secret")  # secrets: the owners'
        secret = definitions.rotate_signing_secret(job, actor_for_user(request.user), now=timezone.now())
        messages.success(request, f"The signing secret of {job.name} was rotated: the old one no longer signs.")
    return page(request, job, secret)


def page(request, job, secret=None):
    """The page for `job`, showing `secret` (just made) when given."""
    context = {
        **site.each_context(request),
        "title": f"Signing secret: {job.name}",
        "job": job,
        "tenant": job.tenant,
        "secret": secret,
        "is_http": job.target_kind == JobDefinition.TargetKind.HTTP,
        "current": JobSigningSecret.objects.filter(job=job).first(),
        "can_rotate": permissions.allows(request, job.tenant_id, OWN),
    }
    return TemplateResponse(request, "portal/job_signing_secret.html", context)
