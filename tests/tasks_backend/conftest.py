import pytest
from django.tasks import task_backends

from jobs.models import Tenant
from tasks_backend import task_jobs


@pytest.fixture(autouse=True)
def forget_jobs():
    """Each test has its own database rows: what a previous test's backend remembered is gone."""
    task_jobs.forget()
    yield
    task_jobs.forget()


@pytest.fixture
def initech(db):
    """The backend's tenant (DUETIME_TASKS_TENANT in tests/environment.py), allowed the contract tasks."""
    return Tenant.objects.create(name="initech", task_module_prefixes="tests.tasks_backend")


@pytest.fixture
def backend():
    return task_backends["duetime"]
