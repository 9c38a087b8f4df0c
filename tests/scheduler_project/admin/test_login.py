"""The portal's login, throttled per user name and per address: a guesser is locked out, the page says for how
long, and the right password does not lift the lock early."""

import pytest
from django.urls import reverse

from scheduler_project.admin import login

LOGIN = reverse("admin:login")


def attempt(client, username, password, address="203.0.113.7"):
    return client.post(LOGIN, {"username": username, "password": password, "next": "/admin/"}, REMOTE_ADDR=address)


def logged_in(response):
    return response.status_code == 302 and response["Location"] == "/admin/"


def test_it_locks_a_user_name_out_after_five_wrong_passwords_even_for_the_right_one(client, alice):
    """What was seen: 25 wrong passwords, then the right one, logged in."""
    for _ in range(4):
        assert "correct username and password" in attempt(client, "alice", "guess").content.decode()

    fifth = attempt(client, "alice", "guess").content.decode()
    right = attempt(client, "alice", "alice-pass-123")

    assert "Too many failed logins for this user name: logging in is locked for 15 minute(s)." in fifth
    assert not logged_in(right)
    assert "locked for 15 minute(s)" in right.content.decode()
    assert "_auth_user_id" not in client.session


def test_it_locks_the_user_name_from_every_address_but_not_other_users(client, alice, bob):
    for i in range(5):
        attempt(client, "alice", "guess", address=f"198.51.100.{i}")  # a spread-out guesser

    assert not logged_in(attempt(client, "alice", "alice-pass-123", address="192.0.2.50"))
    assert logged_in(attempt(client, "bob", "bob-pass-123", address="198.51.100.1"))


def test_it_locks_an_address_that_tries_many_user_names(client, settings, alice):
    settings.DUETIME_LOGIN_FAILURES_PER_ADDRESS = 3
    for name in ("root", "admin", "test"):
        attempt(client, name, "guess")

    refused = attempt(client, "alice", "alice-pass-123")

    assert "Too many failed logins from your network address" in refused.content.decode()
    assert not logged_in(refused)
    assert logged_in(attempt(client, "alice", "alice-pass-123", address="192.0.2.9"))  # another address


def test_a_success_clears_the_user_names_count(client, alice):
    for _ in range(4):
        attempt(client, "alice", "guess")
    assert logged_in(attempt(client, "alice", "alice-pass-123"))
    client.logout()

    for _ in range(4):
        attempt(client, "alice", "guess")
    assert logged_in(attempt(client, "alice", "alice-pass-123"))  # four more, not eight in a row


def test_the_lock_ends_when_it_said_and_attempts_while_locked_do_not_extend_it(rf, alice):
    request = rf.post(LOGIN, REMOTE_ADDR="203.0.113.7")
    start = 1_780_000_000.0  # an instant of the test's own: the lock is judged from `now=`, never the clock
    for _ in range(5):
        login.count_failure(request, "alice", now=start)
    kind, left = login.locked_out(request, "alice", now=start + 60)
    assert (kind, left) == ("user", 14 * 60)

    login.count_failure(request, "alice", now=start + 120)  # refused while locked: not counted

    assert login.locked_out(request, "alice", now=start + 15 * 60 - 1) == ("user", 1)
    assert login.locked_out(request, "alice", now=start + 15 * 60 + 1) is None


def test_zero_turns_the_limits_off(client, settings, alice):
    settings.DUETIME_LOGIN_FAILURES_PER_USER = settings.DUETIME_LOGIN_FAILURES_PER_ADDRESS = 0
    for _ in range(30):
        attempt(client, "alice", "guess")
    assert logged_in(attempt(client, "alice", "alice-pass-123"))


def test_every_caller_of_authenticate_honours_the_lock(rf, alice):
    """Not only the login form: the authentication backend refuses a locked-out name too."""
    from django.contrib.auth import authenticate

    request = rf.post(LOGIN, REMOTE_ADDR="203.0.113.7")
    for _ in range(5):
        assert authenticate(request, username="alice", password="guess") is None

    assert authenticate(request, username="alice", password="alice-pass-123") is None
    assert authenticate(rf.post(LOGIN, REMOTE_ADDR="192.0.2.1"), username="bob", password="x") is None


def test_the_lock_out_is_logged_with_the_address_never_the_password(client, alice, caplog):
    with caplog.at_level("WARNING", logger="scheduler_project.admin.login"):
        for _ in range(5):
            attempt(client, "alice", "hunter2-guess")

    assert "locked out for 15 minutes" in caplog.text and "203.0.113.7" in caplog.text
    assert "hunter2" not in caplog.text


@pytest.mark.parametrize("seconds, said", [(30, "30 second(s)"), (61, "2 minute(s)"), (900, "15 minute(s)")])
def test_it_says_how_long_to_wait_in_words(seconds, said):
    assert said in login.lockout_message("user", seconds)
