"""The Celery app the Celery tests start real workers with (`celery -A tests.celery_app worker`).

It is what a team's Celery app looks like once pointed at Duetime: Django's
settings first (DJANGO_SETTINGS_MODULE, so Celery's Django fixup sets Django
up in every worker process), the CELERY_* settings, then the one line that
installs Duetime's task.
"""

import os

from celery import Celery

from runs.celery_task import install

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "scheduler_project.settings")

app = Celery("duetime-tests")
app.config_from_object("django.conf:settings", namespace="CELERY")
install(app)


@app.task(name="tests.plain_noop", ignore_result=True)
def plain_noop():
    """A plain Celery task: what the bench's side-by-side runs without Duetime."""
