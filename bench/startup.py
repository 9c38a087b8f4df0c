"""Worker start-up: from spawning `run_worker` to its first lease of a run already due (issue 10, item 6).

What replacing a crashed worker costs: the command as an operator or systemd
starts it (system checks included), one run due before it starts, the time
from the spawn to that run's lease (`started_at`, stamped by the claim).
Median of --repeat spawns, each a fresh process.
"""

import datetime as dt
import signal
import statistics
import subprocess
import sys
import time

from bench.processes import MANAGE, engine_env
from bench.setup import bench_tenant, db_now, insert_runs
from runs.models import Run


def run(options):
    tenant, job = bench_tenant("startup")
    seconds = [_spawn_to_first_lease(job, i) for i in range(options["repeat"])]
    return {
        "workload": "startup",
        "tenant": tenant.name,
        "median_seconds": round(statistics.median(seconds), 3),
        "seconds": [round(s, 3) for s in seconds],
    }


def _spawn_to_first_lease(job, index, timeout=60):
    insert_runs(job, db_now() - dt.timedelta(seconds=1), 1, start_index=index)
    spawned = db_now()
    command = [sys.executable, MANAGE, "run_worker", "--queues", job.queue, "--worker-id", f"bench-startup-{index}"]
    worker = subprocess.Popen(command, env=engine_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            started = Run.objects.filter(job=job, worker_id=f"bench-startup-{index}").values_list(
                "started_at", flat=True
            )
            if started and started[0]:
                return (started[0] - spawned).total_seconds()
            time.sleep(0.01)
        raise TimeoutError(f"run_worker did not lease a due run within {timeout} s")
    finally:
        worker.send_signal(signal.SIGTERM)
        worker.wait(timeout=40)
