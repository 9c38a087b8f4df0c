"""A claiming process for the concurrency test: claim and complete until nothing is due.

Usage: python -m tests.runs.claimer QUEUE OUTFILE  (environment: the test database)
"""

import json
import os
import sys
import time

import django
from django.utils import timezone

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "scheduler_project.settings")
django.setup()

from runs import claims, transitions  # noqa: E402
from runs.models import Run  # noqa: E402
from tests.waiting import wait_until  # noqa: E402

PAUSE = float(os.environ.get("CLAIMER_PAUSE", "0.002"))


def main(queue, outfile):
    """Signal readiness, wait for the start line (so all really race), then drain."""
    ready, go = f"{outfile}.ready", os.path.join(os.path.dirname(outfile), "go")
    open(ready, "w").close()
    wait_until(lambda: os.path.exists(go), timeout=300, interval=0.01, message="the start line")
    claimed = []
    while True:
        leases = claims.claim([queue], 50, f"claimer-{os.getpid()}")
        if not leases:
            # An empty claim may only mean another claimer holds the tenant
            # (SKIP LOCKED): stop once nothing of the queue waits any more.
            if not Run.objects.filter(queue=queue).ready(timezone.now()).exists():
                break
            time.sleep(PAUSE)
            continue
        claimed += [lease.run_id for lease in leases]
        transitions.complete_many(
            [transitions.Completion(lease.run_id, lease.fencing_token, "succeeded") for lease in leases]
        )
        time.sleep(PAUSE)  # the handlers' work: lets the others in (SQLite's busy wait is not fair)
    with open(outfile, "w") as out:
        json.dump(claimed, out)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
