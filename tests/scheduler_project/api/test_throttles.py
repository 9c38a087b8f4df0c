"""Mallory guesses tokens and floods the API; the throttles answer 429 `rate-limited` with Retry-After."""

import logging

import pytest

from tests.fixtures.api import assert_problem

GUESS = "dt_t_mallorysGuessNumber0000000000000000000000"


@pytest.fixture
def three_failures_a_minute(settings):
    settings.DUETIME_AUTH_FAILURES_PER_MINUTE = 3


def test_it_locks_out_an_address_that_guesses_tokens_even_once_it_finds_one(
    api, acme_team, three_failures_a_minute, caplog
):
    with caplog.at_level(logging.WARNING, logger="scheduler_project.api.throttles"):
        answers = [api.get("/v1/jobs", token=f"{GUESS}{i}").status_code for i in range(3)]
        locked = api.get("/v1/jobs", token=acme_team)

    assert answers == [401, 401, 401]
    problem = assert_problem(locked, 429, "rate-limited")
    assert 1 <= int(locked.headers["Retry-After"]) <= 60
    assert "failed authentications" in problem["detail"]
    (lockout,) = [r for r in caplog.records if "locked out" in r.getMessage()]
    assert "127.0.0.1" in lockout.getMessage() and "3 failed tokens" in lockout.getMessage()
    assert GUESS not in caplog.text and acme_team not in caplog.text


def test_it_does_not_count_good_tokens_against_the_address(api, acme_team, three_failures_a_minute):
    assert api.get("/v1/jobs", token=f"{GUESS}x").status_code == 401
    for _ in range(5):
        assert api.get("/v1/jobs", token=acme_team).status_code == 200
    assert api.get("/v1/jobs", token=f"{GUESS}y").status_code == 401


def test_it_throttles_one_token_and_not_another(api, acme_team, globex_team, settings):
    settings.DUETIME_TOKEN_REQUESTS_PER_MINUTE = 3
    answers = [api.get("/v1/jobs", token=acme_team).status_code for _ in range(3)]
    throttled = api.get("/v1/jobs", token=acme_team)

    assert answers == [200, 200, 200]
    assert_problem(throttled, 429, "rate-limited")
    assert 1 <= int(throttled.headers["Retry-After"]) <= 60
    assert api.get("/v1/jobs", token=globex_team).status_code == 200


def test_it_lets_an_operator_turn_the_token_throttle_off(api, acme_team, settings):
    settings.DUETIME_TOKEN_REQUESTS_PER_MINUTE = 0
    assert {api.get("/v1/jobs", token=acme_team).status_code for _ in range(5)} == {200}
