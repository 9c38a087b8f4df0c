"""Schemathesis hooks for tests/api/test_schema.py (loaded through SCHEMATHESIS_HOOKS).

- Long polls are shortened: a generated wait_seconds within the allowed range
  is capped at 0.1 s, so the bounded run spends its time on requests, not waits.
- Path ids are often swapped for real ones the test created (DUETIME_ST_IDS, a
  JSON object {"run_id": [...], "letter_id": [...]}), so the run reaches the
  endpoints' logic and not only their 404s.
"""

import itertools
import json
import os

import schemathesis

REAL_IDS = {
    name: itertools.cycle(ids) for name, ids in json.loads(os.environ.get("DUETIME_ST_IDS", "{}")).items() if ids
}
TURN = itertools.count()


@schemathesis.hook
def before_call(context, case, kwargs):
    body = case.body
    if isinstance(body, dict):
        wait = body.get("wait_seconds")
        if isinstance(wait, (int, float)) and not isinstance(wait, bool) and 0 <= wait <= 20:
            body["wait_seconds"] = min(wait, 0.1)
    for name, ids in REAL_IDS.items():
        if case.path_parameters and name in case.path_parameters and next(TURN) % 2 == 0:
            case.path_parameters[name] = next(ids)
