"""Maintenance windows and business-day calendars over HTTP (team tokens): reads for any role, edits for owners.

Every edit goes through calendars.edits, as the portal's forms do: the
models' rules, one audit entry with what changed. A window names its job and
its calendar by name, both of the caller's tenant (another tenant's answers as
unknown). `POST /v1/calendars/{name}:import` adds the holidays of an
iCalendar file (calendars/ical.py, as the portal's upload).
"""

import re

from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import IntegrityError, transaction
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework.response import Response

from calendars import edits, ical
from calendars.api.serializers import ImportSerializer
from calendars.models import Calendar, Window
from jobs.models import JobDefinition
from scheduler_project.api.endpoints import PAGE_PARAMETERS, CursorPage, TeamEndpoint, page_of
from scheduler_project.api.lookups import get_scoped, scoped
from scheduler_project.api.problems import invalid, problem_responses, validated
from scheduler_project.api.windows import CALENDAR_NAME_RE, CalendarSerializer, WindowSerializer

WINDOW_ID = OpenApiParameter("window_id", int, OpenApiParameter.PATH, description="The window's id.")
CALENDAR = OpenApiParameter("calendar", str, OpenApiParameter.PATH, description="The calendar's name.")
MODEL_TO_BODY = {**edits.WINDOW_BODY, "job_id": "job", "calendar_id": "calendar", "__all__": "window"}


def model_errors(exc):
    """A model's ValidationError as problem `errors`, named by body field."""
    return [
        {"field": MODEL_TO_BODY.get(field, field), "pointer": "#/" + MODEL_TO_BODY.get(field, field), "detail": m}
        for field, messages in exc.message_dict.items()
        for m in messages
    ]


def window_or_404(request, window_id):
    return get_scoped(request, Window.objects.select_related("job", "calendar", "tenant"), "window", pk=int(window_id))


def calendar_or_404(request, name):
    if not re.fullmatch(CALENDAR_NAME_RE, name):
        raise invalid([{"field": "name", "pointer": "#", "detail": "is not a calendar name"}], "not-found")
    return get_scoped(request, Calendar.objects.select_related("tenant"), "calendar", name=name)


def fill_window(request, window, values):
    """Set `window`'s fields from the body; the job and calendar by name within the caller's tenant."""
    errors = []
    window.job = None
    if values["job"] is not None:
        window.job = scoped(request, JobDefinition.objects).filter(name=values["job"]).first()
        if window.job is None:
            errors.append({"field": "job", "pointer": "#/job", "detail": f"no job named {values['job']!r}"})
    window.calendar = None
    if values["calendar"] is not None:
        window.calendar = scoped(request, Calendar.objects).filter(name=values["calendar"]).first()
        if window.calendar is None:
            errors.append(
                {"field": "calendar", "pointer": "#/calendar", "detail": f"no calendar {values['calendar']!r}"}
            )
    if errors:
        raise invalid(errors)
    window.tenant = request.auth.tenant
    window.name = values["name"]
    for field, key in edits.WINDOW_BODY.items():
        if field not in ("job", "calendar"):  # by name, looked up above
            setattr(window, field, values[key])


def save_window(request, window, values, actor):
    fill_window(request, window, values)
    try:
        return edits.save_window(window, actor=actor)
    except DjangoValidationError as exc:
        raise invalid(model_errors(exc)) from exc


class WindowListView(TeamEndpoint):
    @extend_schema(
        operation_id="windows_list",
        summary="The tenant's maintenance windows",
        parameters=PAGE_PARAMETERS,
        responses={200: page_of(WindowSerializer, "WindowPage"), **problem_responses(400)},
    )
    def get(self, request):
        page = CursorPage()
        rows = page.paginate_queryset(scoped(request, Window.objects.select_related("job", "calendar")), request, self)
        return page.get_paginated_response(WindowSerializer(rows, many=True).data)

    @extend_schema(
        operation_id="windows_create",
        summary="Add a maintenance window (owner)",
        request=WindowSerializer,
        responses={201: WindowSerializer, **problem_responses(400, 415)},
    )
    def post(self, request):
        values = validated(WindowSerializer, request.data)
        window = save_window(request, Window(), values, self.actor)
        return Response(WindowSerializer(window).data, status=201)


class WindowView(TeamEndpoint):
    @extend_schema(
        operation_id="windows_get", parameters=[WINDOW_ID], responses={200: WindowSerializer, **problem_responses()}
    )
    def get(self, request, window_id):
        return Response(WindowSerializer(window_or_404(request, window_id)).data)

    @extend_schema(
        operation_id="windows_put",
        summary="Replace a maintenance window (owner; the body is the whole window)",
        parameters=[WINDOW_ID],
        request=WindowSerializer,
        responses={200: WindowSerializer, **problem_responses(400, 415)},
    )
    def put(self, request, window_id):
        window = window_or_404(request, window_id)
        values = validated(WindowSerializer, request.data)
        return Response(WindowSerializer(save_window(request, window, values, self.actor)).data)

    @extend_schema(
        operation_id="windows_delete",
        summary="Delete a maintenance window (owner)",
        parameters=[WINDOW_ID],
        responses={204: None, **problem_responses()},
    )
    def delete(self, request, window_id):
        window = window_or_404(request, window_id)
        edits.delete_windows(Window.objects.filter(pk=window.pk), actor=self.actor)
        return Response(status=204)


class CalendarListView(TeamEndpoint):
    @extend_schema(
        operation_id="calendars_list",
        summary="The tenant's business-day calendars",
        parameters=PAGE_PARAMETERS,
        responses={200: page_of(CalendarSerializer, "CalendarPage"), **problem_responses(400)},
    )
    def get(self, request):
        page = CursorPage()
        rows = page.paginate_queryset(scoped(request, Calendar.objects.all()), request, self)
        return page.get_paginated_response(CalendarSerializer(rows, many=True).data)


class CalendarView(TeamEndpoint):
    @extend_schema(
        operation_id="calendars_get", parameters=[CALENDAR], responses={200: CalendarSerializer, **problem_responses()}
    )
    def get(self, request, name):
        return Response(CalendarSerializer(calendar_or_404(request, name)).data)

    @extend_schema(
        operation_id="calendars_put",
        summary="Create or replace a calendar (owner; the body is the whole calendar)",
        parameters=[CALENDAR],
        request=CalendarSerializer,
        responses={200: CalendarSerializer, 201: CalendarSerializer, **problem_responses(400, 415)},
    )
    def put(self, request, name):
        if not re.fullmatch(CALENDAR_NAME_RE, name):
            detail = "use 1-100 letters, digits, spaces, '.', '_' or '-', starting with a letter or digit"
            raise invalid([{"field": "name", "pointer": "#", "detail": detail}])
        values = validated(CalendarSerializer, request.data)
        try:
            with transaction.atomic():
                calendar = scoped(request, Calendar.objects.select_for_update()).filter(name=name).first()
                created = calendar is None
                calendar = calendar or Calendar(tenant=request.auth.tenant, name=name)
                calendar.time_zone, calendar.weekend_days = values["time_zone"], sorted(set(values["weekend_days"]))
                calendar.holidays = [dict(h) for h in values["holidays"]]
                edits.save_calendar(calendar, actor=self.actor)
        except DjangoValidationError as exc:
            raise invalid(model_errors(exc)) from exc
        except IntegrityError as exc:  # a concurrent PUT created it first
            raise invalid([{"field": "name", "pointer": "#", "detail": "was created meanwhile; retry"}]) from exc
        return Response(CalendarSerializer(calendar).data, status=201 if created else 200)

    @extend_schema(
        operation_id="calendars_delete",
        summary="Delete a calendar and the windows that use it (owner)",
        parameters=[CALENDAR],
        responses={204: None, **problem_responses()},
    )
    def delete(self, request, name):
        calendar = calendar_or_404(request, name)
        edits.delete_calendars(Calendar.objects.filter(pk=calendar.pk), actor=self.actor)
        return Response(status=204)


class CalendarImportView(TeamEndpoint):
    @extend_schema(
        operation_id="calendars_import",
        summary="Add (or replace) a calendar's holidays from an iCalendar file (owner)",
        parameters=[CALENDAR],
        request=ImportSerializer,
        responses={200: CalendarSerializer, **problem_responses(400, 415)},
    )
    def post(self, request, name):
        calendar = calendar_or_404(request, name)
        values = validated(ImportSerializer, request.data)
        try:
            found = ical.holidays(values["ical"].encode(), calendar.time_zone)
        except (ical.ICalError, ValueError) as exc:
            raise invalid([{"field": "ical", "pointer": "#/ical", "detail": str(exc)}]) from exc
        calendar.holidays = edits.valid_holidays(found) + ([] if values["replace"] else list(calendar.holidays))
        try:
            edits.save_calendar(calendar, actor=self.actor, note=values["note"])
        except DjangoValidationError as exc:
            raise invalid(model_errors(exc)) from exc
        return Response(CalendarSerializer(calendar).data)
