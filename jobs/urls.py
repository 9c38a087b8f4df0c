"""/v1/jobs routes. Actions use the `name:action` style (AIP-136); names may hold dots and dashes, never ':' or '/'."""

from django.urls import re_path

from jobs import api

NAME = r"(?P<name>[^/:]+)"

urlpatterns = [
    re_path(r"^jobs$", api.JobListView.as_view(), name="api-jobs"),
    re_path(rf"^jobs/{NAME}$", api.JobView.as_view(), name="api-job"),
    re_path(rf"^jobs/{NAME}:pause$", api.JobPauseView.as_view(), name="api-job-pause"),
    re_path(rf"^jobs/{NAME}:resume$", api.JobResumeView.as_view(), name="api-job-resume"),
    re_path(rf"^jobs/{NAME}:trigger$", api.JobTriggerView.as_view(), name="api-job-trigger"),
    re_path(rf"^jobs/{NAME}:backfill$", api.JobBackfillView.as_view(), name="api-job-backfill"),
]
