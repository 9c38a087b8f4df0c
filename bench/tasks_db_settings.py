"""Settings of the `tasks-drain` bench's peer side: django-tasks-db on Duetime's database.

Duetime's own settings plus the peer's app, with its DatabaseBackend as the
default tasks backend; used only by the processes `bench tasks-drain`
starts for the peer (migrate, enqueue, db_worker). Needs
`pip install -r requirements-bench.txt`.
"""

from scheduler_project.settings import *  # noqa: F403

INSTALLED_APPS = [*INSTALLED_APPS, "django_tasks_db"]  # noqa: F405
TASKS = {**TASKS, "default": {"BACKEND": "django_tasks_db.DatabaseBackend", "QUEUES": []}}  # noqa: F405
