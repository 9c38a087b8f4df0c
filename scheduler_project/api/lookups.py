"""Every object an API view names is found through `scoped`: the caller's tenant only.

Another tenant's job, run or dead letter is simply not found (404, the same
answer as for one that does not exist). `NAME` is the OpenAPI path parameter
of the endpoints that name a job.
"""

import re

from drf_spectacular.utils import OpenApiExample, OpenApiParameter

from jobs.models import JobDefinition
from jobs.validation import NAME_RE
from scheduler_project.api.problems import Problem

NAME = OpenApiParameter(
    "name",
    {"type": "string", "pattern": NAME_RE},
    OpenApiParameter.PATH,
    description="The job's name: lowercase letters, digits, '.', '_' and '-'.",
    examples=[OpenApiExample("A job", value="billing.export-invoices")],
)


def scoped(request, queryset):
    """`queryset` narrowed to the caller's tenant: the one gate of every API lookup."""
    return queryset.filter(tenant_id=request.auth.tenant_id)


def get_scoped(request, queryset, what, **lookup):
    """The caller's tenant's object matching `lookup`, or a 404 problem (also for other tenants' objects)."""
    found = scoped(request, queryset).filter(**lookup).first()
    if found is None:
        described = ", ".join(f"{key.split('__')[0]} {value}" for key, value in lookup.items())
        raise Problem("not-found", f"No {what} with {described}.")
    return found


def job_or_404(request, name):
    if not re.fullmatch(NAME_RE, name):
        raise Problem("not-found", "No job with that name (job names are lowercase letters, digits, '.', '_', '-').")
    return get_scoped(request, JobDefinition.objects.select_related("tenant"), "job", name=name)


def live_job_or_409(request, name):
    """The caller's job, refusing one that was deleted (cancelled)."""
    job = job_or_404(request, name)
    if job.status == JobDefinition.Status.CANCELLED:
        raise Problem("invalid-state", f"Job {name} was deleted; PUT it again to bring it back.")
    return job
