"""Materialisation at scale (issue 11): `--jobs` cron definitions in the design's mix, measured over a top of the hour.

The mix is the design's load: about 100,000 tenants x 100 jobs = 10 million
definitions, about 580 runs/s on average and about 10,000/s at the top of the
hour, most jobs hourly or daily, many at :00, some every minute. Per 1,000
definitions (MIX):

    1    every minute                                          * * * * *
    49   hourly at :00                                         0 * * * *
    63   hourly at another minute, :01 to :59 evenly           17 * * * *
    240  daily at the top of an hour, the 24 hours evenly      0 9 * * *
    647  daily at another time, hours and minutes evenly      42 13 * * *

in eight time zones with whole-hour offsets (UTC, London, Berlin, New York,
Chicago, Los Angeles, Tokyo, Sydney), so a top of the hour is the same instant
in all of them; a daily job's hour is chosen in UTC and written in its zone.
At 10,000,000 definitions that is (`rates`) 166.7 + 311.1 + 102.7 = 580.4
runs/s on average, and 10,000 + 490,000 + 100,000 = 600,000 runs due at each
top of the hour, which the schedulers must insert within the look-ahead (60 s)
before it: 10,000 runs/s. Smaller `--jobs` scale all of it down in
proportion (1,000,000: 58 runs/s, 60,000 at :00). Every job gets the
default jitter (jobs/jitter.py: 6 s every minute, 300 s hourly and daily), as
a new job whose owner states none does. Tenants have 100 jobs each and the
jobs fall on the 64 shards by their hash.

The bench cannot wait for a real :00, so its hour starts at the minute M at
which the burst falls due, a little more than the look-ahead after the
definitions are in: "hourly at :00" is `M * * * *` (as if every zone were M
minutes off). The definitions go in by COPY on PostgreSQL (executemany on
SQLite), not the ORM, then `--schedulers` real run_scheduler processes run
from before the look-ahead of the burst opens until two minutes after it.

Measured from the database, over every occurrence due from the burst to two
minutes after it: how far ahead of its due time each was inserted (lead =
due_at - created_at; p50, p99 -- the lead 99 % of occurrences had at least,
the 1st percentile -- and the worst; a negative lead is a late occurrence),
per due minute too, and how many were never inserted as runs (`missing`:
not materialised by the end, or recorded skipped as missed). created_at is
taken just before the insert statement, so a lead is a few milliseconds
generous (the commit follows the insert in the same shard's transaction).
From the operating system: the schedulers' CPU time over that window (from
/proc, user + system), per 1,000 definitions materialised, in all and above
what they spend idle (their other periodic steps, measured in the seconds
just before the window); on PostgreSQL on the same machine, the CPU of the
schedulers' database sessions likewise. The rows stay for inspection.
"""

import datetime as dt
import functools
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from bench.processes import MANAGE, engine_env
from bench.report import percentile
from jobs import cron, jitter
from jobs.models import JobDefinition, Tenant, shard_for
from runs import shards
from runs.models import Run

JOBS_PER_TENANT = 100
EVERY_MINUTE, HOURLY_TOP, HOURLY_OTHER, DAILY_TOP, DAILY_OTHER = (
    "every minute",
    "hourly :00",
    "hourly",
    "daily :00",
    "daily",
)
MIX = ((1, EVERY_MINUTE), (49, HOURLY_TOP), (63, HOURLY_OTHER), (240, DAILY_TOP), (647, DAILY_OTHER))  # per 1,000
ZONES = (
    "UTC",
    "Europe/London",
    "Europe/Berlin",
    "America/New_York",
    "America/Chicago",
    "America/Los_Angeles",
    "Asia/Tokyo",
    "Australia/Sydney",
)
FILL_RATE = 20_000  # definitions a second the fill is planned for (PostgreSQL here, busy: 26,000)
BURST_MARGIN = 30  # seconds between the planned end of the fill and the look-ahead of the burst opening
WARM_UP = 5  # seconds before the look-ahead opens when the measured window starts
IDLE_SAMPLE = 20  # seconds of idle schedulers measured before the window
WINDOW_MINUTES = 2  # the occurrences due from the burst to this many minutes after it are measured
CHUNK = 100_000


def rates(count):
    """The run rates `count` definitions of MIX imply: on average, and at a top of the hour."""
    share = {kind: part / 1000 for part, kind in MIX}
    average = count * (share[EVERY_MINUTE] / 60 + (share[HOURLY_TOP] + share[HOURLY_OTHER]) / 3600)
    average += count * (share[DAILY_TOP] + share[DAILY_OTHER]) / 86400
    top = count * (share[EVERY_MINUTE] + share[HOURLY_TOP] + share[DAILY_TOP] / 24)
    return {
        "average_runs_per_s": round(average, 1),
        "top_of_hour_runs": round(top),
        "top_of_hour_runs_per_s": round(top / 60, 1),
    }


_KINDS = [kind for part, kind in MIX for _ in range(part)]


def kind_of(i):
    """The MIX kind of definition `i`: a permutation of each block of 1,000, so any size keeps the shares."""
    return _KINDS[(i * 389) % 1000]


def run(options):
    """`manage.py bench materialize --jobs N [--schedulers 3]`."""
    count, lookahead = options["jobs"], settings.DUETIME_LOOKAHEAD_SECONDS
    prefix = f"bench-materialize-{uuid.uuid4().hex[:8]}"
    planned = count / FILL_RATE + BURST_MARGIN + lookahead
    burst = (shards.database_now() + dt.timedelta(seconds=planned + 60)).replace(second=0, microsecond=0)
    started = time.monotonic()
    definitions = create_definitions(prefix, count, burst)
    filled = time.monotonic() - started
    window = burst - dt.timedelta(seconds=lookahead + WARM_UP)
    if shards.database_now() > window - dt.timedelta(seconds=1):
        raise RuntimeError(f"filling took {filled:.0f} s, longer than planned: the burst is too close; lower FILL_RATE")
    last_due = burst + dt.timedelta(minutes=WINDOW_MINUTES)
    drill = run_schedulers(options["schedulers"], window, until=last_due + dt.timedelta(seconds=30))
    return {
        "workload": "materialize",
        "tenant": f"{prefix}-*",
        "jobs": count,
        "tenants": -(-count // JOBS_PER_TENANT),
        "schedulers": options["schedulers"],
        "lookahead_seconds": lookahead,
        "mix_per_1000": {kind: part for part, kind in MIX},
        "rates": rates(count),
        "fill_seconds": round(filled, 1),
        "definitions_per_s": round(count / filled),
        "burst_at": burst.isoformat(),
        **figures(prefix, definitions, burst, last_due, drill),
    }


def create_definitions(prefix, count, burst):
    """`count` cron definitions of MIX in tenants `<prefix>-<i>` of JOBS_PER_TENANT, the burst at `burst`.

    Returns {(expression, zone): definitions}. None is due before the burst
    minute, so nothing is late before the schedulers start.
    """
    tenants = -(-count // JOBS_PER_TENANT)
    now = timezone.now()
    with transaction.atomic():
        _copy(Tenant, _tenant_template(now), ({"name": f"{prefix}-{t}"} for t in range(tenants)))
    ids = dict(Tenant.objects.filter(name__startswith=f"{prefix}-").values_list("name", "pk"))
    schedule = functools.cache(lambda kind, zone, k, h: _schedule(kind, zone, k, h, burst))
    spread = {EVERY_MINUTE: (0, 0), HOURLY_TOP: (0, 0), HOURLY_OTHER: (1, 0), DAILY_TOP: (0, 1), DAILY_OTHER: (1, 1)}
    made = Counter()

    def rows(start, stop):
        for i in range(start, stop):
            tenant, name, zone = (
                f"{prefix}-{i // JOBS_PER_TENANT}",
                f"job-{i % JOBS_PER_TENANT:03d}",
                ZONES[(i // 7) % 8],
            )
            kind = kind_of(i)
            by_minute, by_hour = spread[kind]  # what the kind's schedule depends on: the cache's key
            expression, first, jitter_seconds = schedule(
                kind, zone, by_minute * (1 + (i // 11) % 59), by_hour * ((i // 13) % 24)
            )
            made[expression, zone] += 1
            yield {
                "tenant_id": ids[tenant],
                "name": name,
                "cron_expr": expression,
                "time_zone": zone,
                "jitter_seconds": jitter_seconds,
                "next_due_at": first,
                "shard": shard_for(tenant, name),
            }

    template = _job_template(now)
    for start in range(0, count, CHUNK):
        with transaction.atomic():
            _copy(JobDefinition, template, rows(start, min(count, start + CHUNK)))
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:  # what autovacuum would do minutes later: plans see the new rows
            cursor.execute("ANALYZE jobs_tenant, jobs_jobdefinition, runs_run")
    return dict(made)


def _schedule(kind, zone, k, h, burst):
    """(expression, first occurrence after the minute before the burst, default jitter) of one kind.

    `k` (1-59) is the minute of the hour for the kinds not at :00, `h` (0-23) the hour of a daily job,
    both counted from the burst; a daily job's wall time is written in its zone.
    """
    if kind == EVERY_MINUTE:
        expression = "* * * * *"
    elif kind in (HOURLY_TOP, HOURLY_OTHER):
        expression = f"{(burst + dt.timedelta(minutes=0 if kind == HOURLY_TOP else k)).minute} * * * *"
    else:
        local = (burst + dt.timedelta(hours=h, minutes=0 if kind == DAILY_TOP else k)).astimezone(cron.get_zone(zone))
        expression = f"{local.minute} {local.hour} * * *"
    first = cron.occurrences(expression, zone, burst - dt.timedelta(minutes=1), 1)[0]
    return expression, first, _default_jitter(kind, zone, burst)


@functools.cache
def _default_jitter(kind, zone, burst):
    """jobs.jitter's default for a job of `kind` in `zone`: the same for every expression of the kind (every
    minute 6 s; hourly and daily ones reach the 300 s cap), so it is computed once for each (kind, zone)."""
    expression = {EVERY_MINUTE: "* * * * *", HOURLY_TOP: "0 * * * *", HOURLY_OTHER: "1 * * * *"}.get(kind, "0 0 * * *")
    return jitter.default_for(JobDefinition(schedule_kind="cron", cron_expr=expression, time_zone=zone), burst)


def _tenant_template(now):
    return Tenant(
        max_pending_runs=1_000_000,
        max_definitions=JOBS_PER_TENANT,
        task_module_prefixes="bench.handlers",
        created_at=now,
    )


def _job_template(now):
    return JobDefinition(
        schedule_kind="cron",
        target_kind="python",
        target_ref="bench.handlers.noop",
        overlap_policy="allow",
        jitter_is_default=True,
        created_at=now,
        updated_at=now,
    )


def _copy(model, template, rows):
    """Insert `rows` (dicts of column values over `template`'s) into `model`'s table: COPY on
    PostgreSQL, executemany on SQLite, never the ORM row by row."""
    fields = [f for f in model._meta.concrete_fields if not f.primary_key]
    base = [f.get_db_prep_save(getattr(template, f.attname), connection) for f in fields]
    position = {f.attname: n for n, f in enumerate(fields)}
    position.update({f.name: n for n, f in enumerate(fields)})
    table = connection.ops.quote_name(model._meta.db_table)
    names = ", ".join(connection.ops.quote_name(f.column) for f in fields)
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            # COPY's text format, written a megabyte at a time: the template's columns are
            # rendered once, and psycopg's write_row (20 us a row here) would take minutes.
            text = [_copy_text(value) for value in base]
            with cursor.cursor.copy(f"COPY {table} ({names}) FROM STDIN") as copy:
                lines = []
                for row in rows:
                    out = list(text)
                    for name, value in row.items():
                        out[position[name]] = _copy_text(value)
                    lines.append("\t".join(out))
                    if len(lines) >= 5000:
                        copy.write("\n".join(lines) + "\n")
                        lines = []
                if lines:
                    copy.write("\n".join(lines) + "\n")
        else:
            values = []
            for row in rows:
                out = list(base)
                for name, value in row.items():
                    out[position[name]] = value
                values.append([_sqlite_value(v) for v in out])  # datetimes as the backend stores them
            cursor.executemany(f"INSERT INTO {table} ({names}) VALUES ({', '.join(['%s'] * len(fields))})", values)


_COPY_ESCAPES = str.maketrans({"\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r"})


def _copy_text(value):
    """One value in COPY's text format."""
    if value is None:
        return "\\N"
    if isinstance(value, bool):
        return "t" if value else "f"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, dt.datetime):
        return value.isoformat()
    if not isinstance(value, str):  # a JSON field's value (psycopg's Jsonb wrapper, or the object)
        value = json.dumps(getattr(value, "obj", value))
    return value.translate(_COPY_ESCAPES)


def _sqlite_value(value):
    return connection.ops.adapt_datetimefield_value(value) if isinstance(value, dt.datetime) else value


def run_schedulers(count, window, until):
    """Run `count` schedulers until `until` (database clock), measuring their CPU from `window` on.

    Returns {"cpu": seconds over the window, "database_cpu": the seconds their PostgreSQL
    sessions used meanwhile (None elsewhere), "idle_cpu_per_s": per scheduler-second in the
    IDLE_SAMPLE seconds before it (None if they were not up that early), "load": [1-minute
    load average at the window's start, at its end]}.
    """
    env = engine_env()
    procs = [
        subprocess.Popen(
            [sys.executable, MANAGE, "run_scheduler", "--node", f"bench-m{i}"],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for i in range(count)
    ]
    drill = {"idle_cpu_per_s": None, "idle_database_cpu_per_s": None, "schedulers": count}
    try:
        idle_from = window - dt.timedelta(seconds=IDLE_SAMPLE)
        if shards.database_now() < idle_from - dt.timedelta(seconds=2):
            _wait_until(idle_from, procs)
            idle, idle_sessions = _cpu(procs), _sessions_cpu()
            _wait_until(window, procs)
            drill["idle_cpu_per_s"] = (_cpu(procs) - idle) / IDLE_SAMPLE / count
            if idle_sessions is not None:
                drill["idle_database_cpu_per_s"] = _since(idle_sessions) / IDLE_SAMPLE / count
        _wait_until(window, procs)
        start, load, sessions, began = _cpu(procs), [os.getloadavg()[0]], _sessions_cpu(), time.monotonic()
        _wait_until(until, procs)
        drill["cpu"], drill["load"] = _cpu(procs) - start, [*load, os.getloadavg()[0]]
        drill["database_cpu"] = None if sessions is None else _since(sessions)
        drill["seconds"] = time.monotonic() - began
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in procs:
            proc.wait()
    return drill


def _since(sessions):
    """CPU seconds the sessions used since `sessions` (from _sessions_cpu) was read, new sessions included."""
    now = _sessions_cpu()
    return sum(cpu - sessions.get(pid, 0) for pid, cpu in now.items())


def _wait_until(instant, procs):
    while shards.database_now() < instant:
        if any(proc.poll() is not None for proc in procs):
            raise RuntimeError("a scheduler exited during the bench")
        time.sleep(0.2)


def _cpu(procs):
    """User + system CPU seconds the processes used so far."""
    return sum(_process_cpu(proc.pid) for proc in procs)


def _process_cpu(pid):
    """User + system CPU seconds of process `pid` so far (/proc/<pid>/stat, Linux); 0 once it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
    except FileNotFoundError:
        return 0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime: fields 14, 15 of proc(5)


def _sessions_cpu():
    """{backend pid: CPU seconds} of the other sessions on this database (the schedulers'), when PostgreSQL
    runs on this machine; None otherwise."""
    if connection.vendor != "postgresql":
        return None
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
            " AND backend_type = 'client backend'"
        )
        pids = [pid for (pid,) in cursor.fetchall()]
    if not all(os.path.exists(f"/proc/{pid}") for pid in pids):
        return None  # a server on another host
    return {pid: _process_cpu(pid) for pid in pids}


def figures(prefix, definitions, burst, last_due, drill):
    """The leads of every occurrence due from `burst` to `last_due`, and the CPU they cost."""
    expected = Counter()
    for (expression, zone), n in definitions.items():
        for due in cron.occurrences(expression, zone, burst - dt.timedelta(minutes=1), WINDOW_MINUTES + 2):
            if due <= last_due:
                expected[round((due - burst).total_seconds() / 60)] += n
    rows = Run.objects.filter(
        tenant__name__startswith=f"{prefix}-", origin=Run.Origin.SCHEDULE, due_at__gte=burst, due_at__lte=last_due
    ).exclude(state=Run.State.SKIPPED)
    leads, by_minute = [], {}
    for due, created in rows.values_list("due_at", "created_at").iterator(chunk_size=20_000):
        lead = (due - created).total_seconds()
        leads.append(lead)
        by_minute.setdefault(round((due - burst).total_seconds() / 60), []).append(lead)
    found = len(leads)
    return {
        "due_in_window": sum(expected.values()),
        "runs_materialised": found,
        "missing": sum(expected.values()) - found,
        "late": sum(1 for lead in leads if lead < 0),
        "lead_s": _leads(leads),
        "by_minute": {
            f"+{minute}": {"due": expected[minute], **_leads(by_minute.get(minute, []))} for minute in sorted(expected)
        },
        "window_s": round(drill["seconds"], 1),
        "scheduler_cpu_s": round(drill["cpu"], 2),
        "cpu_s_per_1000_definitions": _per_thousand(drill["cpu"], found),
        "cpu_s_per_1000_definitions_above_idle": _per_thousand(_above_idle(drill, "cpu", "idle_cpu_per_s"), found),
        "database_cpu_s": None if drill["database_cpu"] is None else round(drill["database_cpu"], 2),
        "database_cpu_s_per_1000_definitions": _per_thousand(drill["database_cpu"], found),
        "database_cpu_s_per_1000_definitions_above_idle": _per_thousand(
            _above_idle(drill, "database_cpu", "idle_database_cpu_per_s"), found
        ),
        "idle_cpu_s_per_scheduler_second": _rounded(drill["idle_cpu_per_s"]),
        "idle_database_cpu_s_per_scheduler_second": _rounded(drill["idle_database_cpu_per_s"]),
        "load_average": [round(load, 2) for load in drill["load"]],
    }


def _above_idle(drill, total, idle):
    """What the window's `total` CPU was beyond the schedulers' idle rate over as long (None when unknown)."""
    if drill[total] is None or drill[idle] is None:
        return None
    return drill[total] - drill[idle] * drill["schedulers"] * drill["seconds"]


def _per_thousand(cpu, found):
    return round(1000 * cpu / found, 3) if found and cpu is not None else None


def _rounded(value):
    return None if value is None else round(value, 4)


def _leads(leads):
    leads = sorted(leads)
    if not leads:
        return {"materialised": 0, "p50": None, "p99": None, "worst": None}
    return {
        "materialised": len(leads),
        "p50": round(percentile(leads, 50), 2),
        "p99": round(percentile(leads, 1), 2),  # the lead 99 % of occurrences had at least
        "worst": round(leads[0], 2),
    }
