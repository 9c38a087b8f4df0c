"""A Duetime worker in plain Python: lease runs over HTTP, heartbeat while working, complete.

It needs only `requests` and a worker token (`manage.py create_token --tenant acme --kind
worker --queues reports`). Nothing here imports Duetime: port it to any language.

    DUETIME_URL=http://127.0.0.1:8000 DUETIME_TOKEN=dt_w_... python external_worker.py reports

The rules it follows (docs/api.md):

- POST /v1/lease long-polls: it answers as soon as runs are due, or empty after wait_seconds.
- Each lease carries a fencing token. Heartbeat well inside the lease (a third of it here);
  pass the token to anything that can refuse stale writers.
- A heartbeat or completion answered 409 `stale-lease` means the lease was lost (expired,
  cancelled, taken by another worker): stop, and do not report. The run is someone else's now.
- A run can be executed more than once; `idempotency_key` is the same every time, so make
  the side effect idempotent with it.
"""

import logging
import os
import signal
import socket
import sys
import threading

import requests

log = logging.getLogger("external_worker")

STALE = "https://duetime.dev/problems/stale-lease"


class LeaseLost(Exception):
    """Duetime answered 409 stale-lease: this worker no longer holds the run."""


class Job:
    """One leased run while a handler works on it; `lost` is set when the lease is gone."""

    def __init__(self, lease):
        self.lease = lease
        self.lost = threading.Event()
        self.heartbeats = 0

    def __getitem__(self, key):
        return self.lease[key]


class Worker:
    def __init__(self, base_url, token, queues, *, worker_id=None, lease_seconds=30, handler=None, session=None):
        self.base_url = base_url.rstrip("/")
        self.queues = list(queues)
        self.worker_id = worker_id or f"{socket.gethostname()}-{os.getpid()}"
        self.lease_seconds = lease_seconds
        self.heartbeat_every = lease_seconds / 3
        self.handler = handler or print_payload
        self.session = session or requests.Session()
        self.session.headers["Authorization"] = f"Bearer {token}"
        self.stopping = threading.Event()

    def _post(self, path, body, timeout=10):
        response = self.session.post(self.base_url + path, json=body, timeout=timeout)
        if response.status_code == 409 and response.json().get("type") == STALE:
            raise LeaseLost(response.json()["detail"])
        response.raise_for_status()
        return response.json()

    def lease(self, max_runs=1, wait_seconds=10):
        """Long-poll for up to `max_runs` due runs; returns a list of leases (maybe empty)."""
        body = {
            "queues": self.queues,
            "max": max_runs,
            "lease_seconds": self.lease_seconds,
            "wait_seconds": wait_seconds,
            "worker_id": self.worker_id,
        }
        return self._post("/v1/lease", body, timeout=wait_seconds + 10)["leases"]

    def heartbeat(self, lease):
        body = {"fencing_token": lease["fencing_token"], "lease_seconds": self.lease_seconds}
        return self._post(f"/v1/runs/{lease['run_id']}/heartbeat", body)["lease_expires_at"]

    def complete(self, lease, outcome, error="", retryable=True):
        """Report the attempt; returns the run's new state. Raises LeaseLost on 409 stale-lease."""
        body = {"fencing_token": lease["fencing_token"], "outcome": outcome, "error": error, "retryable": retryable}
        return self._post(f"/v1/runs/{lease['run_id']}/complete", body)["state"]

    def _keep_alive(self, job, done):
        """Heartbeat until the handler is done or the lease is lost."""
        while not done.wait(self.heartbeat_every):
            try:
                self.heartbeat(job.lease)
                job.heartbeats += 1
            except LeaseLost:
                log.warning("run %s: lease lost; stopping", job["run_id"])
                job.lost.set()
                return
            except requests.RequestException as exc:
                log.warning("run %s: heartbeat failed (%s); retrying", job["run_id"], exc)

    def work(self, lease):
        """Run the handler under heartbeats and report; returns the new state, or None if the lease was lost."""
        job = Job(lease)
        done = threading.Event()
        beats = threading.Thread(target=self._keep_alive, args=(job, done), daemon=True)
        beats.start()
        try:
            self.handler(job)
            outcome, error, retryable = "succeeded", "", True
        except PermanentError as exc:
            outcome, error, retryable = "failed", str(exc), False
        except Exception as exc:  # noqa: BLE001 - any handler failure is reported, then retried
            outcome, error, retryable = "failed", f"{type(exc).__name__}: {exc}", True
        finally:
            done.set()
            beats.join()
        if job.lost.is_set():
            return None
        try:
            return self.complete(lease, outcome, error, retryable)
        except LeaseLost:
            log.warning("run %s: lease lost before completion; the run is another worker's now", lease["run_id"])
            return None

    def run_forever(self, max_runs=1, wait_seconds=10):
        while not self.stopping.is_set():
            try:
                leases = self.lease(max_runs, wait_seconds)
            except requests.RequestException as exc:
                log.warning("lease failed (%s); retrying in 5 s", exc)
                self.stopping.wait(5)
                continue
            for lease in leases:
                state = self.work(lease)
                log.info("run %s attempt %s: %s", lease["run_id"], lease["attempt"], state or "lease lost")


class PermanentError(Exception):
    """Raise from a handler to skip the remaining attempts (the run goes to the dead-letter queue)."""


def print_payload(job):
    print(f"run {job['run_id']} ({job['idempotency_key']}): {job['payload']}", flush=True)


def main(argv):
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    queues = argv[1:] or ["default"]
    worker = Worker(os.environ.get("DUETIME_URL", "http://127.0.0.1:8000"), os.environ["DUETIME_TOKEN"], queues)
    signal.signal(signal.SIGTERM, lambda *_: worker.stopping.set())
    signal.signal(signal.SIGINT, lambda *_: worker.stopping.set())
    worker.run_forever()


if __name__ == "__main__":
    main(sys.argv)
