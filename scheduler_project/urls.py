"""Top-level routes: the portal (admin + dashboards) and the versioned API."""

from django.urls import include, path
from django.views.generic import RedirectView

from scheduler_project.admin.site import site as portal
from scheduler_project.metrics import metrics

urlpatterns = [
    path("", RedirectView.as_view(url="/admin/", permanent=False)),
    path("admin/", portal.urls),
    path("v1/", include("scheduler_project.api.urls")),
    path("metrics", metrics, name="metrics"),  # Prometheus (docs/operations.md)
]
