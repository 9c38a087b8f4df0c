"""A window's own rules (calendars.models.Window.clean)."""

import datetime as dt

import pytest
from django.core.exceptions import ValidationError

from calendars.models import Window


def test_a_one_off_window_outside_the_years_a_schedule_can_express_is_refused(acme):
    window = Window(
        tenant=acme,
        name="forever",
        kind="one_off",
        starts_at=dt.datetime(2026, 12, 20, tzinfo=dt.UTC),
        ends_at=dt.datetime(9999, 12, 31, tzinfo=dt.UTC),
    )
    with pytest.raises(ValidationError) as caught:
        window.full_clean()
    assert "between 1970-01-01 and 9990-12-31" in caught.value.message_dict["ends_at"][0]
