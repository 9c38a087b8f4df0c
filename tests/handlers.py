"""Python targets used by tests (run inside real worker processes)."""

import json
import time
from pathlib import Path


def noop(ctx):
    return None


def fail(ctx):
    raise RuntimeError("always fails")


def hold_then_report(ctx):
    """Attempt 1 works until its lease is lost (or `hold` seconds pass); later attempts succeed at once.

    Writes what each attempt saw to `<report>/<attempt>.json`.
    """
    report = Path(ctx.payload["report"])
    (report / f"{ctx.attempt}.started").write_text(str(ctx.fencing_token))
    if ctx.attempt == 1:
        deadline = time.monotonic() + ctx.payload.get("hold", 20)
        while time.monotonic() < deadline and not ctx.lease_lost:
            time.sleep(0.05)  # the handler's work, in steps, checking its lease between them as a real one would
    (report / f"{ctx.attempt}.json").write_text(
        json.dumps(
            {
                "attempt": ctx.attempt,
                "token": ctx.fencing_token,
                "lease_lost": ctx.lease_lost,
                "key": ctx.idempotency_key,
            }
        )
    )
