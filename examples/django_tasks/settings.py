"""The sample project's settings: Duetime's, with its tasks backend as the default one.

A project of your own does the same in its settings: Duetime's apps installed and its
database configured (here by importing Duetime's settings), then TASKS.
"""

from scheduler_project.settings import *  # noqa: F403

TASKS = {
    "default": {
        "BACKEND": "tasks_backend.backend.DuetimeBackend",
        "QUEUES": ["default", "emails"],
        # The tenant whose jobs these tasks become; retry a failed task up to 3 times.
        "OPTIONS": {"tenant": "shop", "job": {"max_attempts": 3, "retry_base_seconds": 1, "retry_max_seconds": 10}},
    }
}
# The worker may only import listed modules (jobs/registry.py).
DUETIME_TASK_MODULES = [*DUETIME_TASK_MODULES, "examples.django_tasks.tasks"]  # noqa: F405
