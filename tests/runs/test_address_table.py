"""docs/security.md's table of addresses, row by row: what a save says and what an execution does.

Each case of tests/fixtures/address_cases.py is saved as tenant acme's http target
and owner webhook (acme may call no private network; DUETIME_HTTP_ALLOW_PRIVATE is
off), then executed as the worker does. The last test checks that the page shows
exactly these cases.
"""

from pathlib import Path

import pytest
from django.core.exceptions import ValidationError

from jobs import addresses
from jobs.models import JobDefinition
from runs import targets
from tests.fixtures import address_cases
from tests.fixtures.address_cases import CASES, NOT_A_URL, NOT_CALLED, NOT_FOLLOWED, NOT_PUBLIC, NOT_RESOLVED, REFUSED
from tests.runs.test_targets import context

SECURITY_MD = Path(__file__).resolve().parents[2] / "docs" / "security.md"
BEGIN, END = "<!-- address-table: begin -->", "<!-- address-table: end -->"


def save_verdicts(tenant, url):
    """What saving `url` says, as the table's words: (as an http target, as an owner webhook)."""
    job = JobDefinition(
        tenant=tenant,
        name="probe",
        schedule_kind="none",
        target_kind="http",
        target_ref=url,
        owner_webhook_url=url,
        payload={},
    )
    try:
        job.full_clean(validate_unique=False, validate_constraints=False)
        errors = {}
    except ValidationError as exc:
        errors = {field: " ".join(messages) for field, messages in exc.message_dict.items()}
    return verdict(errors.get("target_ref", "")), verdict(errors.get("owner_webhook_url", ""))


def verdict(message):
    if "is refused: not a public address" in message:
        return NOT_PUBLIC
    if "is not an http(s) URL" in message:
        return NOT_A_URL
    assert message == ""
    return "accepted"


def answer_lookups(dns, case, phase):
    """The case's DNS answers; a case with an answer per phase (a rebinding name) gets the phase's."""
    if case.dns:
        name, answers = case.dns
        dns.add(name, *(answers[0] if phase == "save" else answers[-1]) if isinstance(answers, tuple) else answers)


def check_execution(outcome, dials, case):
    if case.run == REFUSED:
        assert outcome.error.startswith("permanent: refused: not a public address"), outcome
        assert (outcome.retryable, dials.made) == (False, [])
    elif case.run == NOT_CALLED:
        assert "is not an http(s) URL" in outcome.error and dials.made == []
    elif case.run == NOT_RESOLVED:
        assert outcome.error.startswith("Unresolvable: could not resolve") and outcome.retryable
        assert dials.made == []
    elif case.run == NOT_FOLLOWED:
        assert "redirects are not followed" in outcome.error and not outcome.retryable, outcome
        assert len(dials.made) == 1, "only the URL itself was dialled, never the Location"
    else:
        assert dials.made == [case.dialled]
        assert outcome.error.startswith("ConnectionRefusedError")  # the recorder's refusal: nothing left


@pytest.mark.parametrize("case", CASES, ids=[f"{n}:{c.url}" for n, c in enumerate(CASES, 1)])
def test_it_treats_each_address_as_the_table_says(case, acme, dns, dials):
    answer_lookups(dns, case, "save")
    expected = "accepted" if case.save.startswith("accepted") else case.save
    assert save_verdicts(acme, case.url) == (expected, expected), "a webhook is held to the same rule"
    answer_lookups(dns, case, "run")
    if case.answer:
        dials.answer(answered_from(case), case.answer)
    outcome = targets.execute("http", case.url, context(tenant_id=acme.pk), 10)
    assert outcome.outcome == "failed"
    check_execution(outcome, dials, case)


def answered_from(case):
    """The address a redirect case's URL is answered from: its literal, or its name's answer."""
    return case.dns[1][0] if case.dns else addresses.Destination.of(case.url).host


def test_it_tries_at_least_35_targets_of_every_kind():
    kinds = {case.run.split(" ")[0] for case in CASES}
    assert len(CASES) >= 35 and {"refused,", "connects", "not"} <= kinds


def test_it_shows_exactly_these_cases_in_docs_security_md():
    page = SECURITY_MD.read_text()
    shown = page.split(BEGIN, 1)[1].split(END, 1)[0].strip()
    assert shown == address_cases.markdown(), (
        "docs/security.md's address table differs from tests/fixtures/address_cases.py: "
        "paste the output of `python -m tests.fixtures.address_cases` between its markers"
    )
