"""Credentials that Duetime must not store: refused in payloads, redacted in errors and logs.

A payload is stored, shown in the portal and sent to every attempt, so a
credential in it leaks to everyone who can read the job: `find_in` names the
first obvious one (jobs.validation refuses the payload). Errors and
tracebacks come from handlers Duetime does not control, so they are kept
but `redact`ed where they enter the engine (runs.transitions.complete_runs)
and in every log record (`RedactingFilter`, installed in settings.LOGGING).

The patterns are the unmistakable ones (a fixed prefix or shape); a random
password in a free-text field cannot be told from other text and is not caught.
"""

import json
import logging
import re

REDACTED = "[REDACTED]"

# Where a token may start: not inside a longer word or number, but after `_` or `-` (`aws_AKIA...`, `token_ghp_...`).
_START = r"(?<![A-Za-z0-9])"
_END = r"(?![A-Za-z0-9])"


class _CredentialPairs:
    """`"password": "hunter2"`, `api_key=abc123`: a key that names a credential, holding a literal value.

    The key must be one of KEY as a whole: `dsn_secret`, `fencing_token` and
    `page_token` name a secret or hold an id, and pass. It ends with a quote and
    `:` or `=` (JSON, a dict, quoted YAML) or with `=` (env, a query string,
    keyword arguments): `key: value` unquoted reads like prose ("the token:
    weekly"). A value that is empty, a number, null/true/false, or a reference
    (`$VAR`, `${VAR}`, `{{ var }}`, `<token>`, `%(x)s`, `***`, `[REDACTED]`,
    `vault://...`) is not a literal, and passes. The search starts at the word
    (password, secret, token, key), the only place worth looking: a text without
    one costs a scan, not a regular expression tried at every position.
    """

    KEY = re.compile(
        r"(?:[a-z0-9]+[_.-]?)?pass(?:word|wd|phrase)"  # password, db_password, dbPassword, PASSWD
        r"|(?:client|app|api|shared|signing|webhook)?[_-]?secret(?:[_-]?key)?"  # secret, client_secret, secretKey
        r"|(?:access|refresh|auth|api|bearer|bot|session|oauth|id)?[_-]?token"  # token, access_token, authToken
        r"|(?:api|private)[_-]?key|(?:aws[_-]?)?secret[_-]?access[_-]?key",
        re.I,
    )
    _REFERENCE = r"(?:[$<{%*\[(]|(?:null|none|true|false|undefined)\b|[a-z][a-z0-9+.-]*://)"
    _NUMBER = r"""-?\d+(?:\.\d+)?(?![^\s"'\\,;&}\]])"""
    _CANDIDATE = r"""(?:pass(?:word|wd|phrase)|secret(?:[_-]?key)?|token|(?:api|private|access)[_-]?key)"""
    _CANDIDATE += r"""((?:\\?["']\s*[:=]|\s*=)\s*)"""  # what ends the key (group 1)
    _CANDIDATE += (
        rf"""(?:(\\?["'])(?!{_REFERENCE})[^"'\\\r\n]{{4,}}|(?!{_REFERENCE}|{_NUMBER})[^\s"'\\,;&}}\]]{{4,}})"""
    )
    # Searched in the lower-cased text (a case-sensitive search is three times faster), or, when lowering
    # changed the text's length (a few non-ASCII letters), in the text itself, ignoring case.
    _LOWER = re.compile(_CANDIDATE)
    _ANY_CASE = re.compile(_CANDIDATE, re.I)
    _KEY_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-")

    def _pairs(self, text):
        lowered = text.lower()
        candidates = self._LOWER.finditer(lowered) if len(lowered) == len(text) else self._ANY_CASE.finditer(text)
        for match in candidates:
            start = match.start()
            while start > 0 and text[start - 1] in self._KEY_CHARS and match.start() - start < 64:
                start -= 1
            if self.KEY.fullmatch(text, start, match.start(1)):
                yield match

    def search(self, text):
        return next(self._pairs(text), None)

    def sub(self, _replacement, text):
        """`text` with each pair's value replaced by [REDACTED]; the key, what ends it and an opening quote stay."""
        pieces, last = [], 0
        for match in self._pairs(text):
            opening = text[match.start(2) : match.end(2)] if match.start(2) >= 0 else ""
            pieces += [text[last : match.end(1)], opening, REDACTED]
            last = match.end()
        return "".join(pieces) + text[last:] if pieces else text


# name -> (pattern, replacement, hints). A replacement keeps the context that helps debugging (the scheme
# and user of a URL, the word Bearer, a key's name) and drops the secret. `hints`: lower-case strings, one of
# which is in every match; a text that has none skips the pattern (most log lines have none). Order
# matters: `find` names the first kind that matches, `redact` applies them in turn.
PATTERNS = {
    "a private key": (
        re.compile(r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----.*?(?:-----END [A-Z0-9 ]*PRIVATE KEY-----|\Z)", re.S),
        "[REDACTED PRIVATE KEY]",
        ("private key",),
    ),
    # 40 characters of base64 are a secret access key only in context: after its name, or after an
    # access key id (a sha1, a digest or data of that length elsewhere is not one).
    "an AWS secret access key": (
        re.compile(
            r"""((?i:secret[_-]?access[_-]?key)\\?["']?\s*[:=]\s*\\?["']?"""
            r"""|(?:AKIA|ASIA)(?<![A-Za-z0-9]A[KS]IA)[0-9A-Z]{16}[\s:,;|/"'=]{1,5})"""
            r"([A-Za-z0-9/+]{40})(?![A-Za-z0-9/+=])"
        ),
        rf"\g<1>{REDACTED}",
        ("access", "akia", "asia"),
    ),
    # Upper case as AWS issues them, or all lower case (a lowered copy, with a digit, so prose passes).
    "an AWS access key id": (
        re.compile(
            rf"{_START}(?:(?:AKIA|ASIA)[0-9A-Z]{{16}}|(?:akia|asia)(?=[0-9a-z]{{0,15}}[0-9])[0-9a-z]{{16}}){_END}"
        ),
        REDACTED,
        ("akia", "asia"),
    ),
    "a GitHub token": (
        re.compile(rf"{_START}(?:gh[pousr]_[A-Za-z0-9]{{36,}}|github_pat_[A-Za-z0-9_]{{22,}})"),
        REDACTED,
        ("ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_"),
    ),
    "a Slack token": (re.compile(rf"{_START}xox[abposr]-[A-Za-z0-9-]{{10,}}"), REDACTED, ("xox",)),
    "a Stripe secret key": (
        re.compile(rf"{_START}(?:sk|rk)_(?:live|test)_[A-Za-z0-9]{{16,}}"),
        REDACTED,
        ("k_live_", "k_test_"),
    ),
    "a Duetime API token": (re.compile(rf"{_START}dt_[tw]_[A-Za-z0-9_-]{{20,}}"), REDACTED, ("dt_t_", "dt_w_")),
    "a bearer token": (
        re.compile(r"\b(Bearer\s+)[A-Za-z0-9._~+/=-]{20,}", re.I),
        rf"\g<1>{REDACTED}",
        ("bearer",),
    ),
    # header.payload.signature, each base64url; the first two are JSON objects, so they start with eyJ ('{"').
    "a JSON Web Token": (
        re.compile(rf"{_START}eyJ[A-Za-z0-9_-]{{8,}}\.eyJ[A-Za-z0-9_-]{{8,}}\.[A-Za-z0-9_-]*"),
        REDACTED,
        ("eyj",),
    ),
    # scheme://user:password@host (the scheme stays, outside the match).
    "a password in a URL": (
        re.compile(r"(://[^\s:/@]+:)(?!\[REDACTED\]@)[^\s@/]+(@)"),
        rf"\g<1>{REDACTED}\g<2>",
        ("://",),
    ),
    "a password, secret or token under a key named so": (
        _CredentialPairs(),
        None,
        ("pass", "secret", "token", "key"),
    ),
}


def _kinds(text):
    """The (name, pattern, replacement) of the kinds whose hints `text` holds."""
    lowered = text.lower()
    for name, (pattern, replacement, hints) in PATTERNS.items():
        if any(hint in lowered for hint in hints):
            yield name, pattern, replacement


def find(text):
    """The name of the first kind of credential in `text` (e.g. "an AWS access key id"), or None."""
    for name, pattern, _ in _kinds(text):
        if pattern.search(text):
            return name
    return None


def find_in(payload):
    """`find` over a JSON payload, its keys and values alike (as the text json.dumps gives, at any depth)."""
    return find(json_text(payload))


class _Token(str):
    """Punctuation json_text writes as it is (a string of the payload is encoded)."""


def json_text(value):
    """`json.dumps(value, ensure_ascii=False)`, built with a stack instead of recursion: no depth overflows it.

    The same text to the character, so every pattern (a key and its value
    included) sees what it saw before; TypeError for what JSON cannot hold.
    """
    parts, pending = [], [value]
    while pending:
        item = pending.pop()
        if isinstance(item, _Token):
            parts.append(item)
        elif isinstance(item, dict):
            tokens = [_Token("{")]
            for index, (key, child) in enumerate(item.items()):
                name = key if isinstance(key, str) else json.dumps(key)  # json.dumps's own keys: 1 -> "1"
                tokens += [_Token((", " if index else "") + json.dumps(name, ensure_ascii=False) + ": "), child]
            pending.extend(reversed([*tokens, _Token("}")]))
        elif isinstance(item, (list, tuple)):
            tokens = [_Token("[")]
            for index, child in enumerate(item):
                tokens += [_Token(", "), child] if index else [child]
            pending.extend(reversed([*tokens, _Token("]")]))
        else:
            parts.append(json.dumps(item, ensure_ascii=False))
    return "".join(parts)


def redact(text):
    """`text` with every known credential replaced by [REDACTED]."""
    if not text:
        return text
    for _, pattern, replacement in list(_kinds(text)):
        text = pattern.sub(replacement, text)
    return text


class RedactingFilter(logging.Filter):
    """A logging filter that redacts credentials from a record's message and traceback.

    It formats the record once (message with its arguments, and the
    traceback) and keeps only the redacted text, so no handler after it sees
    the secret; a record of JSON lines (`lines`, runs.move_log) has their
    values redacted. Installed on every handler in settings.LOGGING.
    """

    def filter(self, record):
        message = record.getMessage()
        cleaned = redact(message)
        if cleaned != message:
            record.msg, record.args = cleaned, None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = redact(record.exc_text)
        lines = getattr(record, "lines", None)
        if lines:
            record.lines = redact_lines(lines)
        return True


# A member's text value with no escape in it (`:"billing.close@2026-06-01T11:00:00+02:00"`).
_PLAIN_STRING = re.compile(r':"([^"\\]*)"')


def redact_lines(lines):
    """`lines` (the members of JSON objects, `"event":"leased","run":7,...`: runs.move_log) with every
    credential in their values redacted; the same list when none carries one.

    The move log passes here once per batch of moves, so the search is made cheap: only the text
    values, each distinct one once (a batch repeats its worker, job and tenant names), never the members'
    names (`fencing_token`, `idempotency_key` are not a credential's keys) nor numbers; lines with an
    escaped character are searched whole. A line that carries one is decoded, its text values are
    redacted, and it is encoded again, so that it stays JSON whatever the credential was.
    """
    text = "\n".join(lines)
    probe = text if "\\" in text else "\n".join(set(_PLAIN_STRING.findall(text)))
    if find(probe) is None:
        return lines
    return [_redact_members(line) for line in lines]


def _redact_members(line):
    members = json.loads("{" + line + "}")
    cleaned = {name: redact(value) if isinstance(value, str) else value for name, value in members.items()}
    return json.dumps(cleaned, ensure_ascii=False, separators=(",", ":"))[1:-1]
