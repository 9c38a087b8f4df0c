"""/v1/jobs, /v1/schedules, /v1/tenant and /v1/audit routes. Actions use the `name:action` style (AIP-136); names may hold dots and dashes, never ':' or '/'."""

from django.urls import re_path

from jobs.api import audit, insight, schedules, tenant, views

NAME = r"(?P<name>[^/:]+)"

urlpatterns = [
    re_path(r"^jobs$", views.JobListView.as_view(), name="api-jobs"),
    re_path(rf"^jobs/{NAME}$", views.JobView.as_view(), name="api-job"),
    re_path(rf"^jobs/{NAME}:pause$", views.JobPauseView.as_view(), name="api-job-pause"),
    re_path(rf"^jobs/{NAME}:resume$", views.JobResumeView.as_view(), name="api-job-resume"),
    re_path(rf"^jobs/{NAME}:backfill$", views.JobBackfillView.as_view(), name="api-job-backfill"),
    re_path(
        rf"^jobs/{NAME}:rotate-signing-secret$",
        views.JobRotateSigningSecretView.as_view(),
        name="api-job-rotate-signing-secret",
    ),
    re_path(r"^schedules$", schedules.ScheduleSetView.as_view(), name="api-schedules"),
    re_path(r"^tenant$", tenant.TenantView.as_view(), name="api-tenant"),
    re_path(r"^audit$", audit.AuditLogView.as_view(), name="api-audit"),
    re_path(rf"^jobs/{NAME}/preview$", insight.JobPreviewView.as_view(), name="api-job-preview"),
    re_path(rf"^jobs/{NAME}/stats$", insight.JobStatsView.as_view(), name="api-job-stats"),
    re_path(r"^tenant/stats$", insight.TenantStatsView.as_view(), name="api-tenant-stats"),
    re_path(r"^tenant:pause$", tenant.TenantPauseView.as_view(), name="api-tenant-pause"),
    re_path(r"^tenant:resume$", tenant.TenantResumeView.as_view(), name="api-tenant-resume"),
    re_path(r"^tenant:close-breaker$", tenant.TenantCloseBreakerView.as_view(), name="api-tenant-close-breaker"),
]
