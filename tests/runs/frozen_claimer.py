"""A claimer that stops inside its claim transaction, just after lock_ready_tenants locked its tenants.

Usage: python -m tests.runs.frozen_claimer QUEUE READYFILE  (environment: the test database)
Writes {"tenants": [...], "backend": pid} to READYFILE once it holds the tenants' rows, then
sleeps inside the transaction: the test stops the process there (SIGSTOP), as a GC pause,
a VM steal or a debugger would.
"""

import json
import os
import sys
import time

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "scheduler_project.settings")
django.setup()

from django.db import connection  # noqa: E402

from runs import claims  # noqa: E402

lock_ready_tenants = claims.lock_ready_tenants


def lock_and_stall(ready):
    def locked(params):
        tenants = lock_ready_tenants(params)
        with open(f"{ready}.part", "w") as out:
            json.dump({"tenants": tenants, "backend": connection.connection.info.backend_pid}, out)
        os.rename(f"{ready}.part", ready)
        time.sleep(300)
        return tenants

    return locked


def main(queue, ready):
    claims.lock_ready_tenants = lock_and_stall(ready)
    claims.claim([queue], 10, f"frozen-{os.getpid()}")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
