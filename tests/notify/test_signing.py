"""The Duetime-Signature header: what a receiver checks."""

from notify import signing

SECRET = "whsec_test"
BODY = b'{"type":"dead_letter"}'


def test_a_signature_verifies_with_the_secret_it_was_made_with():
    header = signing.signature(SECRET, BODY, 1_780_000_000)
    assert signing.verify(SECRET, BODY, header, 1_780_000_010)
    assert not signing.verify("whsec_other", BODY, header, 1_780_000_010)
    assert not signing.verify(SECRET, BODY.replace(b"dead", b"live"), header, 1_780_000_010)


def test_it_refuses_an_old_timestamp_and_a_malformed_header():
    header = signing.signature(SECRET, BODY, 1_780_000_000)
    assert not signing.verify(SECRET, BODY, header, 1_780_000_000 + signing.TOLERANCE_SECONDS + 1)
    assert not signing.verify(SECRET, BODY, "v1=abc", 1_780_000_000)
    assert not signing.verify(SECRET, BODY, "t=soon,v1=abc", 1_780_000_000)


def test_the_digest_is_the_hmac_sha256_of_the_timestamp_a_dot_and_the_body():
    import hashlib
    import hmac

    expected = hmac.new(SECRET.encode(), b"1780000000." + BODY, hashlib.sha256).hexdigest()
    assert signing.signature(SECRET, BODY, 1_780_000_000) == f"t=1780000000,v1={expected}"
