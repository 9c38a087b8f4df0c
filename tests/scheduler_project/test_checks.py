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


def test_it_refuses_a_lookahead_shorter_than_twice_the_scheduler_failover(settings):
    settings.DUETIME_SHARD_LEASE_SECONDS = 6
    settings.DUETIME_LOOKAHEAD_SECONDS = 13  # a dead scheduler's shards are owned again within 6 + 1 s
    errors = duetime_settings(None)
    assert ids(errors) == ["duetime.E005"]
    assert "DUETIME_LOOKAHEAD_SECONDS (13)" in errors[0].msg and "7 s" in errors[0].msg
    assert errors[0].hint.startswith("Set DUETIME_LOOKAHEAD_SECONDS=14 or more")
    settings.DUETIME_LOOKAHEAD_SECONDS = 14
    assert duetime_settings(None) == []


def test_it_holds_the_lookahead_to_a_longer_shard_lease(settings):
    settings.DUETIME_SHARD_LEASE_SECONDS = 30  # the look-ahead of 60 s was enough for the default lease
    settings.DUETIME_LOOKAHEAD_SECONDS = 60
    errors = duetime_settings(None)
    assert ids(errors) == ["duetime.E005"]
    assert "DUETIME_LOOKAHEAD_SECONDS=62" in errors[0].hint


def test_it_refuses_a_shard_lease_that_a_late_pass_would_lose(settings):
    settings.DUETIME_SHARD_LEASE_SECONDS = 2
    errors = duetime_settings(None)
    assert ids(errors) == ["duetime.E004"]
    assert "DUETIME_SHARD_LEASE_SECONDS=3" in errors[0].hint


def test_it_refuses_a_shard_lease_that_is_not_a_positive_number(settings):
    settings.DUETIME_SHARD_LEASE_SECONDS = 0
    assert ids(duetime_settings(None)) == ["duetime.E001"]


def test_it_refuses_notification_knobs_that_would_never_send(settings):
    settings.DUETIME_NOTIFY_TIMEOUT_SECONDS = 0
    settings.DUETIME_NOTIFY_RATE_LIMIT_MINUTES = -5
    errors = duetime_settings(None)
    assert ids(errors) == ["duetime.E001", "duetime.E010"]
    assert "DUETIME_NOTIFY_TIMEOUT_SECONDS" in errors[0].msg and "DUETIME_NOTIFY_RATE_LIMIT_MINUTES" in errors[1].msg


def test_it_refuses_a_metrics_port_out_of_range_and_a_canary_queue_that_is_no_queue_name(settings):
    settings.DUETIME_METRICS_PORT = 65535  # + 2 for run_dispatcher would not be a port
    settings.DUETIME_CANARY_QUEUE = "Not A Queue"
    assert ids(duetime_settings(None)) == ["duetime.E020", "duetime.E021"]
    settings.DUETIME_METRICS_PORT, settings.DUETIME_CANARY_QUEUE = 9300, "canary"
    assert ids(duetime_settings(None)) == []


def test_it_refuses_a_move_log_that_is_neither_a_stream_nor_an_absolute_file_path(settings, tmp_path):
    for good in ("stderr", "stdout", "off", str(tmp_path / "moves.jsonl")):
        settings.DUETIME_MOVE_LOG = good
        assert ids(duetime_settings(None)) == [], good
    for bad in ("moves.jsonl", str(tmp_path / "missing" / "moves.jsonl"), str(tmp_path), "", "syslog"):
        settings.DUETIME_MOVE_LOG = bad
        assert ids(duetime_settings(None)) == ["duetime.E030"], bad


def test_it_refuses_a_default_jitter_out_of_range_and_accepts_zero_as_off(settings):
    settings.DUETIME_DEFAULT_JITTER_PERCENT = 150
    settings.DUETIME_DEFAULT_JITTER_MAX_SECONDS = 0
    errors = duetime_settings(None)
    assert ids(errors) == ["duetime.E040"]
    assert "DUETIME_DEFAULT_JITTER_PERCENT" in errors[0].msg and "150" in errors[0].msg


def test_it_refuses_a_retention_that_is_not_a_whole_number_of_days(settings):
    for bad in (0, -1, 1.5, "30"):
        settings.DUETIME_RETENTION_DAYS = bad
        assert ids(duetime_settings(None)) == ["duetime.E050"], bad
    settings.DUETIME_RETENTION_DAYS = 1
    assert ids(duetime_settings(None)) == []


def test_it_refuses_http_secrets_of_the_wrong_shape_without_repeating_a_value(settings):
    settings.DUETIME_HTTP_SECRETS = {
        "acme": {"billing-api": "tok-good", "bad name": "tok-x", "crm": "tok-line\r\nbreak"},
        "globex": "tok-flat",
    }
    errors = duetime_settings(None)
    assert ids(errors) == ["duetime.E060"] * 3
    assert [error.msg for error in errors] == [
        "DUETIME_HTTP_SECRETS: tenant 'acme': 'bad name' is not a secret name (letters, digits, '.', '_', '-').",
        "DUETIME_HTTP_SECRETS: tenant 'acme', secret 'crm': the value must be a non-empty header value "
        "(visible ASCII, no line breaks).",
        "DUETIME_HTTP_SECRETS: tenant 'globex': must be an object of secret names, not str.",
    ]
    assert not any("tok-" in error.msg for error in errors)


def test_it_refuses_http_secrets_that_are_not_an_object(settings):
    settings.DUETIME_HTTP_SECRETS = ["tok-a"]
    assert [e.msg for e in duetime_settings(None)] == [
        "DUETIME_HTTP_SECRETS: must be a JSON object of tenants, not list."
    ]
