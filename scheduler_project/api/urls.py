"""Routes of the /v1 API: jobs, runs, the DLQ, notifications, windows and calendars, the OpenAPI schema and its docs page.

The last route answers every unknown /v1 URL with a 404 problem, so clients
never see Django's HTML error pages.
"""

from django.conf import settings
from django.urls import include, path, re_path
from django.utils.csp import CSP
from django.views.decorators.csp import csp_override
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerSplitView

from scheduler_project.api.problems import not_found

# Swagger UI's page: its start-up script is a file of its own (the split view), so scripts stay 'self'
# only; its stylesheet sets inline styles and its icons are data: images, which this one page allows.
DOCS_CSP = {**settings.SECURE_CSP, "style-src": [CSP.SELF, CSP.UNSAFE_INLINE], "img-src": [CSP.SELF, "data:"]}

urlpatterns = [
    path("", include("jobs.api.urls")),
    path("", include("runs.api.urls")),
    path("", include("dlq.api.urls")),
    path("", include("notify.api.urls")),
    path("", include("calendars.api.urls")),
    path("schema", SpectacularAPIView.as_view(), name="api-schema"),
    path("docs", csp_override(DOCS_CSP)(SpectacularSwaggerSplitView.as_view(url_name="api-schema")), name="api-docs"),
    re_path(r"^[\s\S]*\Z", not_found),  # any path, newlines included
]
