"""/v1/windows and /v1/calendars routes."""

from django.urls import re_path

from calendars.api import views

WINDOW = r"(?P<window_id>[0-9]{1,18})"
CALENDAR = r"(?P<name>[^/:]+)"

urlpatterns = [
    re_path(r"^windows$", views.WindowListView.as_view(), name="api-windows"),
    re_path(rf"^windows/{WINDOW}$", views.WindowView.as_view(), name="api-window"),
    re_path(r"^calendars$", views.CalendarListView.as_view(), name="api-calendars"),
    re_path(rf"^calendars/{CALENDAR}$", views.CalendarView.as_view(), name="api-calendar"),
    re_path(rf"^calendars/{CALENDAR}:import$", views.CalendarImportView.as_view(), name="api-calendar-import"),
]
