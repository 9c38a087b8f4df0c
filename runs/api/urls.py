"""/v1 routes for runs: a job's runs and its trigger, one run, cancel, and the worker endpoints."""

from django.urls import re_path

from runs.api import ledger, views
from scheduler_project.api.endpoints import offload

NAME = r"(?P<name>[^/:]+)"
RUN = r"(?P<run_id>[0-9]{1,18})"  # ids fit a bigint; anything else is an unknown URL (404)

urlpatterns = [
    re_path(rf"^jobs/{NAME}/runs$", views.JobRunsView.as_view(), name="api-job-runs"),
    re_path(rf"^jobs/{NAME}:trigger$", views.JobTriggerView.as_view(), name="api-job-trigger"),
    re_path(rf"^jobs/{NAME}/ledger$", ledger.JobLedgerView.as_view(), name="api-job-ledger"),
    re_path(rf"^runs/{RUN}$", views.RunView.as_view(), name="api-run"),
    re_path(rf"^runs/{RUN}:cancel$", views.RunCancelView.as_view(), name="api-run-cancel"),
    re_path(r"^lease$", offload(views.LeaseView.as_view()), name="api-lease"),
    re_path(rf"^runs/{RUN}/heartbeat$", views.HeartbeatView.as_view(), name="api-run-heartbeat"),
    re_path(rf"^runs/{RUN}/complete$", views.CompleteView.as_view(), name="api-run-complete"),
]
