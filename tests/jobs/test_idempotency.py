"""The Idempotency-Key store: Acme's billing service repeats a request, and the
first answer comes back; a key reused for something else, or still in flight, is refused.

`begin` reserves a key (or hands back the answer to replay) and `finish`
keeps the answer. Over HTTP (422, 409, the replay header): tests/jobs/api/test_idempotency.py.
"""

import pytest

from jobs import idempotency
from jobs.idempotency import KeyInFlight, KeyReused
from jobs.models import IdempotencyRecord

EXPORT = idempotency.fingerprint("POST", "/v1/jobs/billing.export/runs", {"payload": {"invoice": 42}})
OTHER = idempotency.fingerprint("POST", "/v1/jobs/billing.export/runs", {"payload": {"invoice": 43}})


def created(record, at):
    """Pretend the record was made at `at` (the column is stamped with the real time)."""
    IdempotencyRecord.objects.filter(pk=record.pk).update(created_at=at)


def reserved(tenant, key, request_hash, at):
    """A request that reserved `key` at `at` and is still running."""
    record, replay = idempotency.begin(tenant, key, request_hash, now=at)
    assert replay is False
    created(record, at)
    return record


def test_it_calls_requests_the_same_whatever_the_order_of_their_keys():
    assert idempotency.fingerprint("POST", "/v1/x", {"a": 1, "b": [1, 2]}) == idempotency.fingerprint(
        "POST", "/v1/x", {"b": [1, 2], "a": 1}
    )
    assert idempotency.fingerprint("POST", "/v1/x", {}) != idempotency.fingerprint("POST", "/v1/y", {})


def test_it_reserves_a_new_key_then_replays_its_answer(acme, clock):
    record, replay = idempotency.begin(acme, "invoice-42", EXPORT, now=clock.now)
    assert replay is False
    created(record, clock.now)
    idempotency.finish(record, 201, {"id": 7})

    again, replay = idempotency.begin(acme, "invoice-42", EXPORT, now=clock.now)

    assert replay is True
    assert (again.response_status, again.response_body) == (201, {"id": 7})


def test_it_refuses_a_key_used_for_a_different_request(acme, clock):
    record = reserved(acme, "invoice-42", EXPORT, clock.now)
    idempotency.finish(record, 201, {"id": 7})

    with pytest.raises(KeyReused) as refused:
        idempotency.begin(acme, "invoice-42", OTHER, now=clock.now)

    assert refused.value.key == "invoice-42"
    assert "different request" in str(refused.value)


def test_it_refuses_a_key_whose_first_request_is_still_running(acme, clock):
    reserved(acme, "invoice-42", EXPORT, clock.ago(seconds=2))

    with pytest.raises(KeyInFlight) as refused:
        idempotency.begin(acme, "invoice-42", EXPORT, now=clock.now)

    assert (refused.value.key, refused.value.retry_after) == ("invoice-42", 1)


def test_it_takes_over_a_key_left_in_flight_by_a_crash(acme, clock):
    record = reserved(acme, "invoice-42", EXPORT, clock.ago(minutes=6))

    taken, replay = idempotency.begin(acme, "invoice-42", EXPORT, now=clock.now)

    assert (taken.pk, replay) == (record.pk, False)
    assert taken.created_at == clock.now


def test_it_releases_the_key_after_an_error_answer(acme, clock):
    record = reserved(acme, "invoice-42", EXPORT, clock.now)
    idempotency.finish(record, 400, {"type": "validation-error"})

    again, replay = idempotency.begin(acme, "invoice-42", OTHER, now=clock.now)

    assert replay is False
    assert again.pk != record.pk


def test_it_frees_a_key_past_its_ttl(acme, clock):
    record = reserved(acme, "invoice-42", EXPORT, clock.ago(hours=25))
    idempotency.finish(record, 201, {"id": 7})

    again, replay = idempotency.begin(acme, "invoice-42", OTHER, now=clock.now)

    assert replay is False
    assert again.request_hash == OTHER


def test_it_keeps_acme_and_globex_keys_apart(acme, globex, clock):
    reserved(acme, "invoice-42", EXPORT, clock.now)

    record, replay = idempotency.begin(globex, "invoice-42", OTHER, now=clock.now)

    assert (record.tenant, replay) == (globex, False)


def test_it_purges_records_older_than_the_ttl(acme, clock):
    fresh = IdempotencyRecord.objects.create(tenant=acme, key="fresh", request_hash="a")
    stale = IdempotencyRecord.objects.create(tenant=acme, key="stale", request_hash="b")
    created(fresh, clock.ago(hours=23))
    created(stale, clock.ago(hours=24, seconds=1))

    assert idempotency.purge(clock.now) == 1

    assert list(IdempotencyRecord.objects.values_list("pk", flat=True)) == [fresh.pk]
