"""DuetimeBackend in the test process: validation, arguments, the mapping onto a run, the job per task."""

import datetime as dt
import math

import pytest
from django.db import transaction
from django.tasks import TaskResultStatus, task
from django.tasks.exceptions import InvalidTask, InvalidTaskBackend, TaskResultDoesNotExist

from jobs.definitions import save_definition
from jobs.models import JobDefinition, Tenant
from runs.models import Run
from tasks_backend import task_jobs
from tasks_backend.backend import DuetimeBackend, duetime_priority
from tests.tasks_backend import tasks


def enqueued_run(result):
    return Run.objects.select_related("job").get(pk=result.id)


# Validation of the task, as Django's own test_tasks.py expects it of every backend.


def test_it_refuses_a_function_not_defined_at_module_level(initech):
    def inner():
        pass

    with pytest.raises(InvalidTask, match="module level"):
        task(backend="duetime")(inner)


def test_it_refuses_a_context_task_without_a_context_parameter(initech):
    with pytest.raises(InvalidTask, match="first argument of 'context'"):
        task(backend="duetime", takes_context=True)(tasks.not_a_task)


@pytest.mark.parametrize("priority", [-101, 101, 1.5])
def test_it_refuses_priorities_outside_minus_100_to_100(priority):
    with pytest.raises(InvalidTask, match="priority must be a whole number between -100 and 100"):
        tasks.noop_task.using(priority=priority)


def test_it_refuses_a_naive_run_after():
    with pytest.raises(InvalidTask, match="run_after must be an aware datetime"):
        tasks.noop_task.using(run_after=dt.datetime(2026, 12, 1, 9, 0))


def test_it_refuses_queues_the_backend_does_not_list_and_names_duetime_refuses():
    listing = DuetimeBackend("listing", {"QUEUES": ["default"], "OPTIONS": {"tenant": "initech"}})
    with pytest.raises(InvalidTask, match="Queue 'emails' is not valid for backend"):
        listing.validate_task(tasks.send_email)
    with pytest.raises(InvalidTask, match="not a Duetime queue name"):
        tasks.noop_task.using(queue_name="Not A Queue")


def test_it_supports_what_the_framework_asks_of_a_production_backend(backend):
    assert backend.supports_defer and backend.supports_async_task
    assert backend.supports_get_result and backend.supports_priority


# Arguments: positional ones in the run's args, keyword ones in its payload, exactly as given; JSON only.


def test_it_keeps_positional_and_keyword_arguments_apart_as_given(initech):
    result = tasks.add.enqueue(40, b=2)

    assert result.status == TaskResultStatus.READY and result.args == [40] and result.kwargs == {"b": 2}
    run = enqueued_run(result)
    assert run.args == [40] and run.payload == {"b": 2}
    again = tasks.add.get_result(result.id)
    assert (again.args, again.kwargs) == (result.args, result.kwargs)


def test_it_accepts_variadic_and_positional_only_arguments(initech):
    variadic = tasks.noop_task.enqueue(1, "two", [3], four=4)
    positional = tasks.divide.enqueue(1, 3, places=3)

    assert (enqueued_run(variadic).args, enqueued_run(variadic).payload) == ([1, "two", [3]], {"four": 4})
    assert (enqueued_run(positional).args, enqueued_run(positional).payload) == ([1, 3], {"places": 3})


def test_a_run_without_positional_arguments_stores_none(initech):
    run = enqueued_run(tasks.add.enqueue(a=1))

    assert run.args is None and run.payload == {"a": 1}
    assert tasks.add.get_result(run.pk).args == []


def test_it_turns_tuples_into_lists_as_json_does(initech):
    result = tasks.noop_task.enqueue((1, 2), pair=(3, 4))

    assert result.args == [[1, 2]] and result.kwargs == {"pair": [3, 4]}
    assert enqueued_run(result).args == [[1, 2]] and enqueued_run(result).payload == {"pair": [3, 4]}


def test_it_refuses_arguments_that_are_not_json_with_djangos_error(initech):
    with pytest.raises(TypeError, match="Unsupported type"):
        tasks.noop_task.enqueue(when=dt.datetime(2026, 12, 1, tzinfo=dt.UTC))
    with pytest.raises(ValueError, match="not JSON"):
        tasks.noop_task.enqueue(ratio=math.nan)
    assert not Run.objects.exists()


def test_it_refuses_arguments_duetime_would_not_store(initech, settings):
    settings.DUETIME_MAX_PAYLOAD_BYTES = 100
    with pytest.raises(ValueError, match="the limit is 100 bytes"):
        tasks.noop_task.enqueue(blob="x" * 200)
    with pytest.raises(ValueError, match="NUL"):
        tasks.noop_task.enqueue(text="a\x00b")


def test_it_refuses_arguments_that_do_not_fit_the_function(initech):
    with pytest.raises(TypeError, match="do not fit tests.tasks_backend.tasks.add"):
        tasks.add.enqueue(1, 2, 3)
    with pytest.raises(TypeError, match="missing a required argument: 'a'"):
        tasks.add.enqueue(b=2)


def test_it_refuses_positional_only_parameters_given_by_name(initech):
    with pytest.raises(TypeError, match="do not fit tests.tasks_backend.tasks.divide"):
        tasks.divide.enqueue(numerator=1, denominator=3)
    with pytest.raises(TypeError, match="do not fit"):
        tasks.divide.enqueue(1, 3, 2)  # places is keyword-only
    assert not Run.objects.exists()


def test_it_counts_positional_arguments_in_the_payload_limit(initech, settings):
    settings.DUETIME_MAX_PAYLOAD_BYTES = 100
    with pytest.raises(ValueError, match="the limit is 100 bytes"):
        tasks.noop_task.enqueue("x" * 200)
    with pytest.raises(ValueError, match="NUL"):
        tasks.noop_task.enqueue("a\x00b")


# The run: due time, priority, queue.


def test_it_makes_run_after_the_due_time_and_never_earlier_than_now(initech):
    later = dt.datetime(2099, 1, 1, tzinfo=dt.UTC)
    future = enqueued_run(tasks.noop_task.using(run_after=later).enqueue())
    past = enqueued_run(tasks.noop_task.using(run_after=dt.datetime(2000, 1, 1, tzinfo=dt.UTC)).enqueue())

    assert future.due_at == later and future.available_at == later
    assert past.due_at > dt.datetime(2026, 1, 1, tzinfo=dt.UTC)  # now, not the past instant


@pytest.mark.parametrize(
    "priority, expected",
    [(100, "critical"), (1, "critical"), (0, "default"), (-1, "bulk"), (-100, "bulk")],
)
def test_it_maps_priorities_onto_duetimes_three(priority, expected):
    assert JobDefinition.Priority(duetime_priority(priority)).label == expected


def test_it_puts_the_run_on_the_tasks_queue_with_its_priority(initech):
    run = enqueued_run(tasks.send_email.enqueue(to="ops@example.com"))

    assert run.queue == "emails" and run.priority == JobDefinition.Priority.CRITICAL
    assert run.state == Run.State.SCHEDULED and run.origin == Run.Origin.API


# One job per (tenant, task), made on first use through save_definition.


def test_it_makes_one_on_demand_job_per_task_on_first_use(initech):
    first = enqueued_run(tasks.add.enqueue(1))
    second = enqueued_run(tasks.add.enqueue(2))

    job = first.job
    assert second.job_id == job.pk and JobDefinition.objects.filter(tenant=initech).count() == 1
    assert (job.name, job.target_kind, job.target_ref) == ("tests.tasks_backend.tasks.add", "python", job.name)
    assert job.schedule_kind == "none" and job.overlap_policy == "allow" and job.max_attempts == 1
    assert job.next_due_at is None and job.status == "active"
    assert initech.audit.filter(action="create", actor="tasks:duetime").count() == 1


def test_it_names_jobs_of_tasks_whose_path_has_capitals_apart():
    assert task_jobs.job_name("billing.tasks.export") == "billing.tasks.export"
    upper, lower = task_jobs.job_name("billing.tasks.Export"), task_jobs.job_name("billing.tasks.export_")
    assert upper.startswith("billing.tasks.export-") and upper != lower


def test_it_asks_for_the_job_once_then_only_inserts(
    initech, django_assert_max_num_queries, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        tasks.add.enqueue(1)  # finds the tenant, makes the job: remembered once committed
    # No lookup through the ORM; the insert is hot SQL: on SQLite its ready mark and the run, two statements
    # (on PostgreSQL one, on a raw cursor Django does not count).
    with django_assert_max_num_queries(2):
        result = tasks.add.enqueue(2)
    assert enqueued_run(result).args == [2]


def test_it_forgets_the_job_when_this_process_edits_it(initech, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        job = enqueued_run(tasks.add.enqueue(1)).job
    job.max_attempts = 3
    save_definition(job, "user:operator")

    assert enqueued_run(tasks.add.enqueue(2)).max_attempts == 3


def test_it_never_remembers_a_job_whose_transaction_rolled_back(initech, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True), pytest.raises(RuntimeError), transaction.atomic():
        tasks.add.enqueue(1)
        raise RuntimeError("rolled back")

    assert not JobDefinition.objects.exists()
    assert enqueued_run(tasks.add.enqueue(2)).job.name == "tests.tasks_backend.tasks.add"


def test_it_applies_the_backends_job_options(initech):
    tuned = DuetimeBackend("tuned", {"QUEUES": [], "OPTIONS": {"tenant": "initech", "job": {"max_attempts": 4}}})

    run = Run.objects.get(pk=tuned.enqueue(tasks.add, [1], {}).id)

    assert run.max_attempts == 4 and run.job.max_attempts == 4


def test_it_refuses_a_task_whose_prefix_a_superuser_took_away_since(initech, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        tasks.add.enqueue(1)  # the job is made, and remembered
    initech.task_module_prefixes = "billing"
    initech.save()  # a superuser's edit (in another process the backend sees it within CACHE_SECONDS)

    with pytest.raises(InvalidTask, match="permission revoked: tenant 'initech' may no longer run tasks from"):
        tasks.add.enqueue(2)
    assert Run.objects.count() == 1


def test_it_refuses_an_unknown_tenant(db):
    with pytest.raises(InvalidTaskBackend, match="tenant 'initech', which does not exist"):
        tasks.add.enqueue(1)


def test_it_refuses_tasks_outside_the_tenants_module_prefixes(db):
    Tenant.objects.create(name="initech", task_module_prefixes="billing")

    with pytest.raises(InvalidTask, match="may not run tasks from 'tests.tasks_backend.tasks'"):
        tasks.add.enqueue(1)
    assert not JobDefinition.objects.exists()


def test_it_refuses_to_enqueue_a_cancelled_job(initech):
    job = enqueued_run(tasks.add.enqueue(1)).job
    job.status = JobDefinition.Status.CANCELLED
    save_definition(job, "user:operator")

    with pytest.raises(InvalidTask, match="is cancelled"):
        tasks.add.enqueue(2)


def test_it_queues_runs_of_a_paused_job_until_it_resumes(initech):
    job = enqueued_run(tasks.add.enqueue(1)).job
    job.status = JobDefinition.Status.PAUSED
    save_definition(job, "user:operator")

    assert enqueued_run(tasks.add.enqueue(2)).state == Run.State.SCHEDULED


def test_it_refuses_a_job_name_taken_by_another_target(initech, make_job):
    make_job(initech, "tests.tasks_backend.tasks.add", target_ref="tests.tasks_backend.tasks.noop_task")

    with pytest.raises(InvalidTask, match="does not run tests.tasks_backend.tasks.add"):
        tasks.add.enqueue(1)


def test_it_checks_its_options():
    errors = list(DuetimeBackend("bare", {"OPTIONS": {"job": {"retries": 3}}}).check())

    assert [e.id for e in errors] == ["tasks_backend.E001", "tasks_backend.E002"]


# Results.


def test_it_finds_only_its_tenants_python_runs(initech, globex, make_job, make_run):
    other_tenant = make_run(make_job(globex, "billing.export", target_ref="tests.handlers.noop"))
    external = make_run(make_job(initech, "ext", target_kind="external", target_ref=""))

    for run in (other_tenant, external):
        with pytest.raises(TaskResultDoesNotExist):
            tasks.add.get_backend().get_result(str(run.pk))


def test_it_answers_for_a_cron_jobs_run_of_a_task(initech, make_job, make_run):
    job = make_job(initech, "nightly", target_ref="tests.tasks_backend.tasks.calculate_meaning_of_life")

    result = tasks.calculate_meaning_of_life.get_result(str(make_run(job).pk))

    assert result.status == TaskResultStatus.READY and result.task.func is tasks.calculate_meaning_of_life.func
