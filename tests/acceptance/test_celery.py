"""Celery as the worker transport, against real brokers and real Celery workers (prefork, 2 children).

run_dispatcher, run_scheduler (the reaper) and `celery -A tests.celery_app
worker` run as subprocesses on the test database; every verdict is read from
the database (runs, attempts) and from what the handler recorded of each
execution (tests.celery_handlers: key, token, process). Each test has its own
Celery queue. RabbitMQ is the shared one on 5672 (CI starts it); the broker
restart uses a private RabbitMQ node on 5673 that this module starts and stops,
so the shared broker is never restarted. Leases are 2 s (heartbeat 0.5 s).
"""

import datetime as dt
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

import pytest
from django.utils import timezone
from kombu import Connection

from jobs.models import JobDefinition, Tenant, shard_for
from runs import celery_task, enqueue
from runs.dispatcher import RELEASED, Dispatcher, broker_app
from runs.models import Attempt, Run
from tests.acceptance.test_processes import Processes
from tests.acceptance.test_processes import start as start_command
from tests.conftest import engine_env
from tests.waiting import wait_until

pytestmark = [pytest.mark.acceptance, pytest.mark.concurrency, pytest.mark.django_db(transaction=True)]

RABBITMQ = "amqp://guest:guest@127.0.0.1:5672//"
REDIS = "redis://127.0.0.1:6379/7"
HANDLERS = "tests.celery_handlers"
FAST = {"DUETIME_LEASE_SECONDS": 2, "DUETIME_HEARTBEAT_SECONDS": 0.5, "DUETIME_POLL_SECONDS": 0.05}
PRIVATE_NODE = "duetime-test-celery@localhost"
PRIVATE_PORT = 5673


@pytest.fixture
def initech(settings):
    settings.DUETIME_TASK_MODULES = [*settings.DUETIME_TASK_MODULES, HANDLERS]
    return Tenant.objects.create(name="initech", task_module_prefixes=HANDLERS)


@pytest.fixture
def queue():
    return f"celery-test-{uuid.uuid4().hex[:10]}"


def celery_job(tenant, queue, name="reports.build", **fields):
    fields.setdefault("target_ref", f"{HANDLERS}.record")
    fields.setdefault("max_attempts", 5)
    job = JobDefinition(
        tenant=tenant,
        name=name,
        schedule_kind="none",
        target_kind="celery",
        queue=queue,
        overlap_policy="allow",
        retry_base_seconds=0,
        retry_max_seconds=0,
        shard=shard_for(tenant.name, name),
        **fields,
    )
    job.full_clean()
    job.save()
    return job


def executions(report, run):
    """What the handler recorded of each execution of `run`, in order."""
    path = Path(report) / f"{run.pk}.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


class CeleryWorker:
    """`celery -A tests.celery_app worker -P prefork -c 2` on one queue, in its own process group."""

    def __init__(self, name, queue, broker, log):
        self.log = log
        env = engine_env(**FAST, CELERY_BROKER_URL=broker, DUETIME_TASK_MODULES=f"{HANDLERS},tests.handlers")
        command = [sys.executable, "-m", "celery", "-A", "tests.celery_app", "worker", "-P", "prefork", "-c", "2"]
        command += ["-Q", queue, "-n", f"{name}@%h", "--without-gossip", "--without-mingle", "-l", "info"]
        self.process = subprocess.Popen(
            command, env=env, stdout=open(log, "w"), stderr=subprocess.STDOUT, start_new_session=True
        )

    def output(self):
        return Path(self.log).read_text()

    def stop(self):
        """Warm shutdown (SIGTERM), then SIGKILL of the whole group if it lingers; never leaves a child behind."""
        try:
            os.killpg(self.process.pid, signal.SIGCONT)  # a paused child cannot shut down
            os.killpg(self.process.pid, signal.SIGTERM)
            self.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            pass
        except ProcessLookupError:
            return
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.process.wait()


class Fleet(Processes):
    """Duetime's commands (Processes) plus Celery workers, all stopped on leaving."""

    def __init__(self, queue, broker, tmp_path):
        super().__init__()
        self.queue, self.broker, self.tmp_path = queue, broker, tmp_path
        self.workers = []

    def command(self, name, *args, **more):
        env = {**FAST, "CELERY_BROKER_URL": self.broker, "DUETIME_TASK_MODULES": f"{HANDLERS},tests.handlers", **more}
        self.procs[name] = start_command(*args, **env)
        return self.procs[name]

    def dispatcher(self, name="dispatcher", pack=1, prefetch=8):
        """run_dispatcher on this queue; one run per message unless `pack` (see `batching`)."""
        args = ["run_dispatcher", "--queues", self.queue, "--dispatcher-id", f"d-{self.queue}", "--pack", str(pack)]
        self.procs[name] = self.command(name, *args, DUETIME_DISPATCH_PREFETCH=str(prefetch))
        return self.procs[name]

    def scheduler(self):
        return self.command("scheduler", "run_scheduler")

    def worker(self, name):
        worker = CeleryWorker(name, self.queue, self.broker, self.tmp_path / f"{name}.log")
        self.workers.append(worker)
        wait_until(lambda: " ready." in worker.output(), timeout=60, message=f"Celery worker {name} to be ready")
        return worker

    def __exit__(self, exc_type, exc, tb):
        for worker in self.workers:
            worker.stop()
            if exc_type is not None:
                print(f"--- Celery worker log {worker.log} ---\n{worker.output()[-4000:]}")
        super().__exit__(exc_type, exc, tb)


def assert_every_run_ran_on_time_once_accepted(runs, report):
    """0 lost, 0 started early, one key per run, at most one accepted completion per run."""
    for run in runs:
        run.refresh_from_db()
        assert run.state == "succeeded", run
        attempts = list(Attempt.objects.filter(run=run).order_by("attempt"))
        assert [a.outcome for a in attempts].count("succeeded") == 1
        assert all(a.started_at >= a.available_at >= run.due_at for a in attempts)
        seen = executions(report, run)
        assert seen and {e["key"] for e in seen} == {run.idempotency_key}
        assert celery_task.executor(attempts[-1].worker_id), attempts[-1].worker_id


def queued(broker, queue):
    """Messages ready in `queue` (0 while it does not exist yet)."""
    with Connection(broker) as conn:
        try:
            return conn.default_channel.queue_declare(queue, passive=True).message_count
        except conn.channel_errors:
            return 0


def purge(broker, queue):
    with Connection(broker) as conn:
        return conn.default_channel.queue_purge(queue) or 0


def delete_queue(broker, queue):
    with Connection(broker) as conn:
        conn.default_channel.queue_delete(queue)


def drain(tenant, queue, broker, tmp_path, worker, *, now, later, **dispatch):
    """`now` runs due now and `later` due in 2 s, run by one Celery worker and a dispatcher until all succeed."""
    job = celery_job(tenant, queue, payload={"report": str(tmp_path)})
    start = timezone.now()
    runs = [enqueue.enqueue(job)[0] for _ in range(now)]
    runs += [enqueue.enqueue(job, run_at=start + dt.timedelta(seconds=2))[0] for _ in range(later)]
    try:
        with Fleet(queue, broker, tmp_path) as fleet:
            fleet.worker(worker)
            fleet.dispatcher(**dispatch)
            wait_until(
                lambda: not Run.objects.filter(job=job).exclude(state="succeeded").exists(),
                message="every run to succeed",
            )
    finally:
        delete_queue(broker, queue)
    return runs


@pytest.mark.parametrize("broker", [RABBITMQ, REDIS], ids=["rabbitmq", "redis"])
def test_it_runs_celery_jobs_on_celery_workers_when_due(initech, queue, broker, tmp_path):
    runs = drain(initech, queue, broker, tmp_path, "cel-normal", now=20, later=5)
    assert_every_run_ran_on_time_once_accepted(runs, tmp_path)
    for run in runs:
        [attempt] = Attempt.objects.filter(run=run)
        hostname, task_id = celery_task.executor(attempt.worker_id)
        assert hostname.startswith("cel-normal@") and task_id == f"duetime-{run.pk}-{attempt.fencing_token}"


def test_it_publishes_no_message_with_a_delay(initech, queue, tmp_path):
    job = celery_job(initech, queue, payload={"report": str(tmp_path)}, timeout_seconds=120)
    runs = [enqueue.enqueue(job)[0] for _ in range(3)]
    dispatcher = Dispatcher([queue], dispatcher_id="d-eta", app=broker_app(RABBITMQ))
    try:
        assert dispatcher.tick().published == 3
        dispatcher.disconnect()
        messages = []
        with Connection(RABBITMQ) as conn:
            simple = conn.SimpleQueue(queue)
            for _ in runs:
                message = simple.get(timeout=5)
                messages.append((message.headers, message.properties, message.payload[1]))
                message.ack()
            simple.close()
    finally:
        delete_queue(RABBITMQ, queue)
    assert sorted(kwargs["run_id"] for _, _, kwargs in messages) == sorted(run.pk for run in runs)
    for headers, properties, kwargs in messages:
        assert headers["eta"] is None and headers["expires"] is None
        assert "countdown" not in headers and "countdown" not in kwargs and "eta" not in kwargs
        assert headers["retries"] == 0 and headers["timelimit"] == [120, None]
        assert "expiration" not in properties and properties["delivery_mode"] == 2  # persistent, never expires


def test_it_runs_again_with_a_higher_token_when_a_worker_child_is_killed(initech, queue, tmp_path):
    job = celery_job(initech, queue, target_ref=f"{HANDLERS}.hold", payload={"report": str(tmp_path), "seconds": 30})
    run, _ = enqueue.enqueue(job)
    try:
        with Fleet(queue, RABBITMQ, tmp_path) as fleet:
            fleet.worker("cel-killed")
            fleet.dispatcher()
            fleet.scheduler()
            first = wait_until(lambda: executions(tmp_path, run), message="attempt 1 to start")[0]
            os.kill(first["pid"], signal.SIGKILL)  # the child dies mid-run: no completion, no goodbye
            wait_until(lambda: Run.objects.get(pk=run.pk).state == "succeeded", message="the re-execution")
    finally:
        delete_queue(RABBITMQ, queue)
    attempts = list(Attempt.objects.filter(run=run).order_by("attempt").values_list("outcome", "fencing_token"))
    assert [outcome for outcome, _ in attempts] == ["lease_expired", "succeeded"]
    assert attempts[0][1] == first["token"] < attempts[1][1]
    seen = executions(tmp_path, run)
    assert {e["key"] for e in seen} == {run.idempotency_key}
    assert [e["token"] for e in seen if e["event"] == "ended"] == [attempts[1][1]]  # the killed one never ended
    assert_every_run_ran_on_time_once_accepted([run], tmp_path)


@pytest.mark.parametrize("dispatch, messages", [({}, 10), ({"pack": 4, "prefetch": 1}, 3)], ids=["single", "batches"])
def test_it_retries_runs_whose_messages_the_broker_lost(initech, queue, tmp_path, dispatch, messages):
    job = celery_job(initech, queue, payload={"report": str(tmp_path)})
    runs = [enqueue.enqueue(job)[0] for _ in range(10)]
    try:
        with Fleet(queue, RABBITMQ, tmp_path) as fleet:
            fleet.dispatcher(**dispatch)
            wait_until(lambda: queued(RABBITMQ, queue) == messages, message="every run to be published")
            assert purge(RABBITMQ, queue) == messages  # the messages are gone; only the database remembers
            fleet.scheduler()
            fleet.worker("cel-purged")
            wait_until(
                lambda: not Run.objects.filter(job=job).exclude(state="succeeded").exists(),
                message="every run to succeed",
            )
    finally:
        delete_queue(RABBITMQ, queue)
    assert_every_run_ran_on_time_once_accepted(runs, tmp_path)
    for run in runs:
        outcomes = list(Attempt.objects.filter(run=run).order_by("attempt").values_list("worker_id", "outcome"))
        assert outcomes[0] == (f"d-{queue}", "lease_expired") and outcomes[-1][1] == "succeeded"


def test_it_refuses_the_completion_of_a_worker_paused_past_its_lease(initech, queue, tmp_path):
    job = celery_job(initech, queue, target_ref=f"{HANDLERS}.hold", payload={"report": str(tmp_path), "seconds": 3})
    run, _ = enqueue.enqueue(job)
    try:
        with Fleet(queue, RABBITMQ, tmp_path) as fleet:
            worker = fleet.worker("cel-paused")
            fleet.dispatcher()
            fleet.scheduler()
            first = wait_until(lambda: executions(tmp_path, run), message="attempt 1 to start")[0]
            os.kill(first["pid"], signal.SIGSTOP)  # a long pause: no heartbeats, the lease runs out
            try:
                # The other child runs the retry, under a new lease.
                wait_until(lambda: Run.objects.get(pk=run.pk).state == "succeeded", message="the re-execution")
            finally:
                os.kill(first["pid"], signal.SIGCONT)
            wait_until(
                lambda: [e for e in executions(tmp_path, run) if e["event"] == "ended" and e["attempt"] == 1],
                message="the paused execution to finish",
            )
            wait_until(lambda: "completion refused as stale" in worker.output(), message="the refusal to be logged")
    finally:
        delete_queue(RABBITMQ, queue)
    attempts = list(Attempt.objects.filter(run=run).order_by("attempt").values_list("outcome", "fencing_token"))
    assert attempts == [("lease_expired", first["token"]), ("succeeded", attempts[1][1])]
    assert attempts[1][1] > first["token"]
    assert_every_run_ran_on_time_once_accepted([run], tmp_path)


@pytest.fixture(scope="module")
def private_rabbitmq():
    """A RabbitMQ node of this test's own on 5673 (data in a temporary directory), stopped at the end."""
    if not shutil.which("rabbitmq-server"):
        pytest.fail("rabbitmq-server is not installed")
    base = Path(tempfile.mkdtemp(prefix="duetime-rabbitmq-"))
    (base / "rabbitmq.conf").write_text(f"listeners.tcp.local = 127.0.0.1:{PRIVATE_PORT}\n")
    (base / "enabled_plugins").write_text("[].\n")
    shutil.chown(base, user="rabbitmq") if _has_user("rabbitmq") else None
    env = {
        **os.environ,
        "RABBITMQ_NODENAME": PRIVATE_NODE,
        "RABBITMQ_NODE_PORT": str(PRIVATE_PORT),
        "RABBITMQ_DIST_PORT": str(PRIVATE_PORT + 20000),
        "RABBITMQ_MNESIA_BASE": str(base / "mnesia"),
        "RABBITMQ_LOG_BASE": str(base / "log"),
        "RABBITMQ_PID_FILE": str(base / "pid"),
        "RABBITMQ_CONFIG_FILE": str(base / "rabbitmq.conf"),
        "RABBITMQ_ENABLED_PLUGINS_FILE": str(base / "enabled_plugins"),
    }
    subprocess.run(["rabbitmq-server", "-detached"], env=env, cwd=base, check=True)
    url = f"amqp://guest:guest@127.0.0.1:{PRIVATE_PORT}//"
    try:
        wait_until(lambda: _accepts(url), timeout=60, interval=0.25, message="the private RabbitMQ node")
        yield url
    finally:
        subprocess.run(["rabbitmqctl", "-n", PRIVATE_NODE, "stop"], capture_output=True, timeout=60)
        shutil.rmtree(base, ignore_errors=True)


def _has_user(name):
    import pwd

    try:
        pwd.getpwnam(name)
        return True
    except KeyError:
        return False


def _accepts(url):
    try:
        with Connection(url, connect_timeout=1) as conn:
            conn.ensure_connection(max_retries=0)
            return True
    except Exception:  # noqa: BLE001 - not up yet
        return False


@pytest.mark.parametrize("dispatch", [{}, {"pack": 4, "prefetch": 1}], ids=["single", "batches"])
def test_it_loses_nothing_and_runs_nothing_early_across_a_broker_restart(
    initech, queue, tmp_path, private_rabbitmq, dispatch
):
    job = celery_job(initech, queue, payload={"report": str(tmp_path)})
    first = timezone.now() + dt.timedelta(seconds=1)
    dues = [first + dt.timedelta(milliseconds=40 * i) for i in range(200)]  # 25/s for 8 s
    runs = [enqueue.enqueue(job, run_at=due)[0] for due in dues]
    with Fleet(queue, private_rabbitmq, tmp_path) as fleet:
        worker = fleet.worker("cel-restart")
        fleet.dispatcher(**dispatch)
        fleet.scheduler()
        wait_until(lambda: Run.objects.filter(job=job, state="succeeded").count() >= 20, message="the load to flow")
        # The broker goes away under load and comes back: every connection to it is cut. It stays away
        # until the dispatcher has met the outage (a publish failed and its runs were given back), however
        # quick the restart would be.
        node = ["rabbitmqctl", "-n", PRIVATE_NODE]
        subprocess.run([*node, "stop_app"], check=True, capture_output=True, timeout=60)
        wait_until(
            lambda: Run.objects.filter(job=job, last_error=RELEASED).exists(),
            timeout=30,
            message="the dispatcher to give back a batch the stopped broker did not take",
        )
        subprocess.run([*node, "start_app"], check=True, capture_output=True, timeout=60)
        wait_until(
            lambda: not Run.objects.filter(job=job).exclude(state="succeeded").exists(),
            timeout=90,
            message="every run to succeed after the restart",
        )
        assert "Connection to broker lost" in worker.output()  # the restart did cut the worker off
    assert "runs failed" in fleet.outputs["dispatcher"][1]  # and the dispatcher: it released, then went on
    assert_every_run_ran_on_time_once_accepted(runs, tmp_path)


def test_a_handler_that_raises_system_exit_or_returns_no_json_fails_its_attempt_and_the_worker_serves_on(
    initech, queue, tmp_path
):
    exits = celery_job(initech, queue, "reports.exit", target_ref=f"{HANDLERS}.exits", max_attempts=1)
    odd = celery_job(initech, queue, "reports.odd", target_ref=f"{HANDLERS}.returns_a_set", max_attempts=1)
    fine = celery_job(initech, queue, payload={"report": str(tmp_path)})
    failing = [enqueue.enqueue(job)[0] for job in (exits, exits, exits, odd)]  # more than the worker's 2 children
    try:
        with Fleet(queue, RABBITMQ, tmp_path) as fleet:
            fleet.worker("cel-exits")
            fleet.dispatcher()  # no reaper: nothing but the attempts' own completions ends these runs
            wait_until(
                lambda: Run.objects.filter(pk__in=[r.pk for r in failing], state="dead").count() == 4,
                timeout=60,
                message="the failing runs to be dead",
            )
            after = [enqueue.enqueue(fine)[0] for _ in range(4)]
            wait_until(
                lambda: Run.objects.filter(pk__in=[r.pk for r in after], state="succeeded").count() == 4,
                timeout=60,
                message="the runs after them to succeed",
            )
    finally:
        delete_queue(RABBITMQ, queue)
    for run in failing:
        [attempt] = Attempt.objects.filter(run=run)
        assert attempt.outcome == "failed" and "Traceback (most recent call last)" in attempt.error
        assert celery_task.executor(attempt.worker_id), "it ran in Celery, not reaped"
    assert [Attempt.objects.get(run=run).error.split(":")[0] for run in failing] == [
        "SystemExit",
        "SystemExit",
        "SystemExit",
        "TypeError",
    ]


# --- batches: a backlog goes several runs to a message (runs.dispatcher.pack, runs.celery_task.Batch) ---------

BATCHING = {"pack": 4, "prefetch": 1}  # 4 runs to a message as soon as more than one waits


def batch_of(attempt):
    """The Celery task id an attempt ran under, if it was a batch message's ("duetime-<run>-<token>+<n>")."""
    _hostname, task = celery_task.executor(attempt.worker_id)
    return task if "+" in task else None


def test_a_backlog_runs_in_batch_messages_each_run_once_and_never_early(initech, queue, tmp_path):
    runs = drain(initech, queue, RABBITMQ, tmp_path, "cel-batch", now=30, later=10, **BATCHING)
    assert_every_run_ran_on_time_once_accepted(runs, tmp_path)
    batches = {}
    for attempt in Attempt.objects.filter(run__in=runs):
        batches.setdefault(batch_of(attempt), []).append(attempt.run_id)
    assert len([task for task in batches if task]) >= 5  # the backlog did go in batches
    assert all(len(ids) <= 4 for task, ids in batches.items() if task)  # never more than --pack to a message


def test_killing_a_child_mid_batch_loses_none_of_its_runs(initech, queue, tmp_path):
    job = celery_job(initech, queue, target_ref=f"{HANDLERS}.hold", payload={"report": str(tmp_path), "seconds": 30})
    runs = [enqueue.enqueue(job)[0] for _ in range(4)]  # one message of 4: the first holds, three wait behind it
    try:
        with Fleet(queue, RABBITMQ, tmp_path) as fleet:
            fleet.worker("cel-batch-killed")
            fleet.dispatcher(**BATCHING)
            fleet.scheduler()
            first = wait_until(lambda: [e for r in runs for e in executions(tmp_path, r)], message="a run to start")[0]
            os.kill(first["pid"], signal.SIGKILL)  # the child dies mid-batch: one run in hand, three waiting
            wait_until(
                lambda: not Run.objects.filter(job=job).exclude(state="succeeded").exists(),
                timeout=60,
                message="every run of the batch to succeed",
            )
    finally:
        delete_queue(RABBITMQ, queue)
    killed = Run.objects.get(pk=first["run_id"])
    attempts = list(Attempt.objects.filter(run=killed).order_by("attempt").values_list("outcome", "fencing_token"))
    assert [outcome for outcome, _ in attempts] == ["lease_expired", "succeeded"]
    assert attempts[0][1] == first["token"] < attempts[1][1]
    for run in runs:  # the waiting ones never started under the dead child, and ran once since
        ended = [e for e in executions(tmp_path, run) if e["event"] == "ended"]
        assert len(ended) == 1 and ended[0]["token"] == Attempt.objects.get(run=run, outcome="succeeded").fencing_token
    assert_every_run_ran_on_time_once_accepted(runs, tmp_path)


def test_a_run_past_its_timeout_gives_the_later_runs_of_its_batch_back_at_once(initech, queue, tmp_path):
    slow = celery_job(
        initech, queue, "reports.slow", target_ref=f"{HANDLERS}.hold", timeout_seconds=1,
        payload={"report": str(tmp_path), "seconds": 30},
    )  # fmt: skip
    quick = celery_job(initech, queue, "reports.quick", payload={"report": str(tmp_path)})
    now = timezone.now()
    overrun, _ = enqueue.enqueue(slow, run_at=now - dt.timedelta(seconds=2))  # due first: first in the message
    behind = [enqueue.enqueue(quick, run_at=now - dt.timedelta(seconds=1))[0] for _ in range(3)]
    try:
        with Fleet(queue, RABBITMQ, tmp_path) as fleet:
            worker = fleet.worker("cel-batch-timeout")
            fleet.dispatcher(**BATCHING)
            fleet.scheduler()
            wait_until(
                lambda: (
                    not Run.objects.filter(pk__in=[r.pk for r in [overrun, *behind]])
                    .exclude(state="succeeded")
                    .exists()
                ),
                timeout=60,
                message="every run to succeed",
            )
            assert "ran past its timeout_seconds" in worker.output()
    finally:
        delete_queue(RABBITMQ, queue)
    outcomes = list(Attempt.objects.filter(run=overrun).order_by("attempt").values_list("outcome", flat=True))
    assert outcomes == ["timed_out", "succeeded"]
    first_message = batch_of(Attempt.objects.filter(run=overrun).order_by("attempt").first())
    assert first_message and first_message.endswith("+3")  # the four did go in one message
    for run in behind:
        # Given back, not reaped: their first attempt was never counted, and another message ran them.
        [attempt] = Attempt.objects.filter(run=run)
        assert (attempt.attempt, attempt.outcome) == (1, "succeeded")
        assert celery_task.executor(attempt.worker_id)[1] != first_message
        assert len(executions(tmp_path, run)) == 1
    assert_every_run_ran_on_time_once_accepted(behind, tmp_path)


def test_a_batch_paused_past_its_leases_has_every_run_taken_by_another_child_and_runs_none_again(
    initech, queue, tmp_path
):
    job = celery_job(initech, queue, target_ref=f"{HANDLERS}.hold", payload={"report": str(tmp_path), "seconds": 3})
    runs = [enqueue.enqueue(job)[0] for _ in range(4)]  # one message of 4
    try:
        with Fleet(queue, RABBITMQ, tmp_path) as fleet:
            worker = fleet.worker("cel-batch-paused")
            fleet.dispatcher(**BATCHING)
            fleet.scheduler()
            first = wait_until(lambda: [e for r in runs for e in executions(tmp_path, r)], message="a run to start")[0]
            os.kill(first["pid"], signal.SIGSTOP)  # the whole child stops: no heartbeats, no keeper
            try:
                wait_until(
                    lambda: not Run.objects.filter(job=job).exclude(state="succeeded").exists(),
                    timeout=60,
                    message="the other child to run the whole batch again",
                )
            finally:
                os.kill(first["pid"], signal.SIGCONT)
            wait_until(lambda: "completion refused as stale" in worker.output(), message="the refusal to be logged")
    finally:
        delete_queue(RABBITMQ, queue)
    for run in runs:
        attempts = list(Attempt.objects.filter(run=run).order_by("attempt").values_list("outcome", flat=True))
        assert attempts == ["lease_expired", "succeeded"]
        if run.pk != first["run_id"]:  # the paused child skipped the ones that waited behind its first
            assert all(e["pid"] != first["pid"] for e in executions(tmp_path, run))
    assert_every_run_ran_on_time_once_accepted(runs, tmp_path)
