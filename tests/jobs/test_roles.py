"""Roles rank viewer < operator < owner; a door asks `require`, which says what was needed and what was held."""

import pytest

from jobs import roles
from jobs.choices import Role

ORDER = [Role.VIEWER, Role.OPERATOR, Role.OWNER]


@pytest.mark.parametrize("held", ORDER)
@pytest.mark.parametrize("needed", ORDER)
def test_it_allows_a_role_what_it_and_every_role_below_it_may_do(held, needed):
    assert roles.allows(held, needed) == (ORDER.index(held) >= ORDER.index(needed))
    assert roles.allows(held.value, needed.value) == roles.allows(held, needed)  # as stored: plain strings


@pytest.mark.parametrize("held", [None, ""])
def test_it_allows_nothing_to_no_role_not_even_reading(held):
    assert not roles.allows(held, roles.VIEW)


def test_it_says_what_was_needed_and_what_was_held():
    with pytest.raises(roles.InsufficientRole) as refused:
        roles.require("viewer", roles.OPERATE, "Pausing jobs", where="acme")

    assert str(refused.value) == "Pausing jobs needs the role operator or above; you have the role viewer in acme."
    assert (refused.value.role, refused.value.needed) == ("viewer", Role.OPERATOR)


def test_it_lets_an_owner_through_every_door():
    for needed in (roles.VIEW, roles.OPERATE, roles.OWN):
        roles.require(Role.OWNER, needed, "anything")


def test_it_takes_the_weakest_role_of_several_tenants():
    assert roles.weakest(["owner", "viewer", "operator"]) == Role.VIEWER
    assert roles.weakest(["owner", None]) is None
    assert roles.weakest([]) is None
