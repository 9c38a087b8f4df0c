"""Serializer fields every API body shares: strict JSON types, aware datetimes, bounded payloads.

A field refuses a value of the wrong JSON type rather than coercing it, a
datetime must carry its offset, and a payload is held to
DUETIME_MAX_PAYLOAD_BYTES (larger: 413 `payload-too-large`) and must carry
no obvious credential (400 `validation-error` on the payload field).
"""

from rest_framework import serializers

from jobs.validation import MAX_JSON_DEPTH, check_payload, instant_problem, json_depth, payload_credential
from scheduler_project.api.problems import Problem


class StrictJSON:
    """Refuse values of the wrong JSON type instead of coercing them (5 is not "5", "true" is not true)."""

    json_types = ()

    def to_internal_value(self, data):
        if isinstance(data, bool) and bool not in self.json_types or not isinstance(data, self.json_types):
            self.fail("wrong_type", type=type(data).__name__)
        return super().to_internal_value(data)

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.error_messages["wrong_type"] = f"Expected {self.json_name}, got a JSON {{type}}."


class Text(StrictJSON, serializers.CharField):
    json_types, json_name = (str,), "a string"


class Pattern(StrictJSON, serializers.RegexField):
    json_types, json_name = (str,), "a string"


class Integer(StrictJSON, serializers.IntegerField):
    json_types, json_name = (int,), "an integer"


class Number(StrictJSON, serializers.FloatField):
    json_types, json_name = (int, float), "a number"


class Boolean(StrictJSON, serializers.BooleanField):
    json_types, json_name = (bool,), "true or false"


class AwareDateTimeField(serializers.DateTimeField):
    """ISO 8601 with an explicit offset: a scheduler must not guess the zone of a bare time.

    Within the years a schedule can express (jobs.validation.EARLIEST..LATEST,
    1970-9990): an instant outside is a 400 here, never an overflow further in.
    """

    def to_internal_value(self, value):
        parsed = super().to_internal_value(value)
        text = str(value).strip()
        if not (text.endswith(("Z", "z")) or text[-6:-5] in ("+", "-") or text[-5:-4] in ("+", "-")):
            self.fail("naive")
        problem = instant_problem(parsed)
        if problem:
            raise serializers.ValidationError(problem[0].upper() + problem[1:] + ".")
        return parsed

    default_error_messages = {
        "naive": "Give a UTC offset, for example 2026-12-01T09:00:00+01:00 or ...Z.",
        "overflow": "Must be between 1970-01-01 and 9990-12-31 (the years a schedule can express).",
    }


class PayloadField(serializers.DictField):
    """A JSON object of at most DUETIME_MAX_PAYLOAD_BYTES (compact UTF-8; larger: 413), without credentials."""

    def to_internal_value(self, data):
        value = super().to_internal_value(data)
        if json_depth(value) > MAX_JSON_DEPTH:  # a body is held to the same depth; this is a field's own limit
            raise serializers.ValidationError(f"Nests deeper than {MAX_JSON_DEPTH} levels of objects and arrays.")
        unstorable = unstorable_text(value)
        if unstorable:
            raise serializers.ValidationError(unstorable)
        credential = payload_credential(value)
        if credential:  # an invalid value (400 validation-error), not a size
            raise serializers.ValidationError(f"payload {credential}")
        problem = check_payload(value)
        if problem:
            raise Problem("payload-too-large", f"payload {problem}")
        return value


def unstorable_text(value):
    """Why a JSON value's text cannot be stored, or None.

    PostgreSQL's jsonb refuses the NUL character, and no database stores a lone
    UTF-16 surrogate (which JSON's \\u escapes can produce). Iterative: nesting
    as deep as the JSON parser allows must not overflow the stack here.
    """
    pending = [value]
    while pending:
        item = pending.pop()
        if isinstance(item, dict):
            pending.extend(item.keys())
            pending.extend(item.values())
        elif isinstance(item, list):
            pending.extend(item)
        elif isinstance(item, str):
            if "\x00" in item:
                return "The NUL character (\\u0000) cannot be stored; encode binary data, e.g. as base64."
            try:
                item.encode("utf-8")
            except UnicodeEncodeError:
                return "Lone UTF-16 surrogates (\\ud800-\\udfff without their pair) are not text; send valid UTF-8."
    return None
