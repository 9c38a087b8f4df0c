"""examples/django_tasks: a Django project enqueues with .enqueue() and waits with get_result().refresh(),
while a real run_worker (with the project's settings) runs its tasks."""

import subprocess
import sys

import pytest

from jobs.models import JobDefinition
from tests.conftest import engine_env
from tests.spawned import spawn, stop

pytestmark = [pytest.mark.acceptance, pytest.mark.concurrency, pytest.mark.django_db(transaction=True)]

EXAMPLE = {"DJANGO_SETTINGS_MODULE": "examples.django_tasks.settings", "DUETIME_POLL_SECONDS": 0.05}


def test_the_sample_project_runs_its_tasks_on_duetime():
    command = [sys.executable, "manage.py", "run_worker", "--queues", "default,emails", "--skip-checks"]
    worker = spawn(command, env=engine_env(**EXAMPLE))
    try:
        sample = subprocess.run(
            [sys.executable, "-m", "examples.django_tasks.main"],
            env=engine_env(**EXAMPLE),
            capture_output=True,
            text=True,
            timeout=180,
        )
    finally:
        _, out = stop(worker)
    assert sample.returncode == 0, f"{sample.stdout}\n{sample.stderr}\n--- worker ---\n{out[-3000:]}"
    assert "total: 18.6 " in sample.stdout
    assert "receipt: {'order': 42, 'amount': 18.6, 'attempt': 1}" in sample.stdout
    jobs = JobDefinition.objects.filter(tenant__name="shop").order_by("name")
    assert [(j.name, j.max_attempts) for j in jobs] == [
        ("examples.django_tasks.tasks.send_receipt", 3),
        ("examples.django_tasks.tasks.total", 3),
    ]
