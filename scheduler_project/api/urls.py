"""Routes of the /v1 API: jobs, runs, the DLQ, the OpenAPI schema and its docs page.

The last route answers every unknown /v1 URL with a 404 problem, so clients
never see Django's HTML error pages.
"""

from django.urls import include, path, re_path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from scheduler_project.api.problems import not_found

urlpatterns = [
    path("", include("jobs.api.urls")),
    path("", include("runs.api.urls")),
    path("", include("dlq.api.urls")),
    path("schema", SpectacularAPIView.as_view(), name="api-schema"),
    path("docs", SpectacularSwaggerView.as_view(url_name="api-schema"), name="api-docs"),
    re_path(r"^[\s\S]*\Z", not_found),  # any path, newlines included
]
