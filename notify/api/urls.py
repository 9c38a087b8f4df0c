"""/v1/notifications routes."""

from django.urls import re_path

from notify.api import views

urlpatterns = [
    re_path(r"^notifications$", views.NotificationListView.as_view(), name="api-notifications"),
]
