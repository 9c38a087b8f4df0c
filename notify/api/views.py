"""The tenant's notification history over HTTP (team tokens, any role): what Duetime told a job's owner.

The same rows as the portal's Notifications page: one per event and channel
(a dead letter, a skip streak, lateness over the job's threshold), with its
delivery status, attempts and the last answer of the webhook or mail server.
"""

import re

from drf_spectacular.utils import OpenApiParameter, extend_schema

from jobs.validation import NAME_RE
from notify.api.serializers import NotificationSerializer
from notify.models import Notification
from scheduler_project.api.endpoints import PAGE_PARAMETERS, CursorPage, TeamEndpoint, page_of
from scheduler_project.api.lookups import scoped
from scheduler_project.api.problems import invalid, problem_responses

CHOICES = {
    "kind": Notification.Kind.values,
    "channel": Notification.Channel.values,
    "status": Notification.Status.values,
}


class NotificationListView(TeamEndpoint):
    @extend_schema(
        operation_id="notifications_list",
        summary="Notifications sent (or being sent) to the tenant's job owners, newest first",
        parameters=[
            OpenApiParameter("job", {"type": "string", "pattern": NAME_RE}, description="Only this job's."),
            *(OpenApiParameter(name, str, enum=values) for name, values in CHOICES.items()),
            *PAGE_PARAMETERS,
        ],
        responses={200: page_of(NotificationSerializer, "NotificationPage"), **problem_responses(400)},
    )
    def get(self, request):
        rows = scoped(request, Notification.objects.select_related("job"))
        errors = []
        for name, values in CHOICES.items():
            if name in request.query_params:
                if request.query_params[name] not in values:
                    errors.append({"field": name, "pointer": "#", "detail": f"must be one of {', '.join(values)}"})
                else:
                    rows = rows.filter(**{name: request.query_params[name]})
        if "job" in request.query_params:
            if not re.fullmatch(NAME_RE, request.query_params["job"]):
                errors.append({"field": "job", "pointer": "#", "detail": "is not a job name"})
            else:
                rows = rows.filter(job__name=request.query_params["job"])
        if errors:
            raise invalid(errors)
        page = CursorPage()
        chosen = page.paginate_queryset(rows, request, view=self)
        return page.get_paginated_response(NotificationSerializer(chosen, many=True).data)
