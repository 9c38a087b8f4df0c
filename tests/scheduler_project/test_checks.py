"""System checks of the DUETIME_* knobs: a bad value fails `manage.py check`."""

from scheduler_project.checks import duetime_settings


def ids(errors):
    return [error.id for error in errors]


def test_it_accepts_the_test_settings():
    assert duetime_settings(None) == []


def test_it_refuses_a_task_module_that_cannot_be_imported(settings):
    settings.DUETIME_TASK_MODULES = ["tests.handlers", "billing.taks", "not a module"]
    errors = duetime_settings(None)
    assert ids(errors) == ["duetime.E003", "duetime.E003"]
    assert "'billing.taks'" in errors[0].msg


def test_it_refuses_a_negative_throttle_and_accepts_zero_as_off(settings):
    settings.DUETIME_AUTH_FAILURES_PER_MINUTE = -1
    settings.DUETIME_TOKEN_REQUESTS_PER_MINUTE = 0
    errors = duetime_settings(None)
    assert ids(errors) == ["duetime.E010"]
    assert "DUETIME_AUTH_FAILURES_PER_MINUTE" in errors[0].msg
