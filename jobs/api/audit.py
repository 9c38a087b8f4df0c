"""The tenant's audit log over HTTP (team tokens, any role): every privileged change, newest first.

The same entries as the portal's Audit log page: who (`actor`) did what
(`action`) to which object, when, with the change's detail and note.
Filterable by action, actor, object and time; paged by cursor.
"""

from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers

from jobs.models import AuditEntry
from scheduler_project.api.endpoints import PAGE_PARAMETERS, CursorPage, TeamEndpoint, page_of
from scheduler_project.api.fields import AwareDateTimeField, Pattern
from scheduler_project.api.lookups import scoped
from scheduler_project.api.problems import invalid, problem_responses, validated


class AuditEntrySerializer(serializers.ModelSerializer):
    class Meta:
        model = AuditEntry
        fields = ["id", "at", "actor", "action", "object_type", "object_id", "object_repr", "detail", "note"]
        read_only_fields = fields


class AuditFilterSerializer(serializers.Serializer):
    action = Pattern(r"^[a-z_]{1,40}$", required=False, help_text="e.g. pause, trigger, replay, change_role.")
    actor = Pattern(
        r"^[^\x00-\x1f]{1,200}$", required=False, help_text="e.g. user:alice, token:dt_t_abc123, cli:create_token."
    )
    object_type = Pattern(
        r"^[a-z_]{1,20}(\.[a-z_]{1,20})?$",
        required=False,
        help_text="app.model, e.g. jobs.jobdefinition, runs.run, dlq.deadletter, calendars.window.",
    )
    object_id = Pattern(r"^[A-Za-z0-9._:@-]{1,64}$", required=False)
    since = AwareDateTimeField(required=False, help_text="Entries at or after this instant.")
    until = AwareDateTimeField(required=False, help_text="Entries before this instant.")


FILTERS = {"action": "action", "actor": "actor", "object_type": "object_type", "object_id": "object_id"}


class AuditLogView(TeamEndpoint):
    @extend_schema(
        operation_id="audit_list",
        summary="The tenant's audit log, newest first",
        parameters=[
            *(
                OpenApiParameter(name, str, description=field.help_text or "")
                for name, field in AuditFilterSerializer().fields.items()
                if name not in ("since", "until")
            ),
            OpenApiParameter("since", {"type": "string", "format": "date-time"}, description="At or after."),
            OpenApiParameter("until", {"type": "string", "format": "date-time"}, description="Before."),
            *PAGE_PARAMETERS,
        ],
        responses={200: page_of(AuditEntrySerializer, "AuditEntryPage"), **problem_responses(400)},
    )
    def get(self, request):
        wanted = {k: v for k, v in request.query_params.items() if k not in ("cursor", "limit")}
        unknown = sorted(set(wanted) - set(AuditFilterSerializer().fields))
        if unknown:
            raise invalid(
                [{"field": name, "pointer": "#", "detail": "is not a filter of the audit log"} for name in unknown]
            )
        values = validated(AuditFilterSerializer, wanted)
        entries = scoped(request, AuditEntry.objects.all())
        entries = entries.filter(**{column: values[name] for name, column in FILTERS.items() if name in values})
        if "since" in values:
            entries = entries.filter(at__gte=values["since"])
        if "until" in values:
            entries = entries.filter(at__lt=values["until"])
        page = CursorPage()
        rows = page.paginate_queryset(entries, request, view=self)
        return page.get_paginated_response(AuditEntrySerializer(rows, many=True).data)
