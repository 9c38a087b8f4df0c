"""/v1 routes for runs: a job's runs, one run, cancel, and the worker endpoints."""

from django.urls import re_path

from runs import api
from scheduler_project.endpoints import offload

NAME = r"(?P<name>[^/:]+)"
RUN = r"(?P<run_id>[0-9]{1,18})"  # ids fit a bigint; anything else is an unknown URL (404)

urlpatterns = [
    re_path(rf"^jobs/{NAME}/runs$", api.JobRunsView.as_view(), name="api-job-runs"),
    re_path(rf"^runs/{RUN}$", api.RunView.as_view(), name="api-run"),
    re_path(rf"^runs/{RUN}:cancel$", api.RunCancelView.as_view(), name="api-run-cancel"),
    re_path(r"^lease$", offload(api.LeaseView.as_view()), name="api-lease"),
    re_path(rf"^runs/{RUN}/heartbeat$", api.HeartbeatView.as_view(), name="api-run-heartbeat"),
    re_path(rf"^runs/{RUN}/complete$", api.CompleteView.as_view(), name="api-run-complete"),
]
