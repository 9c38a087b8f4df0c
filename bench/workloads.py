"""The workloads: drain, steady, spike, backlog (issue 3), tenants (claim cost with many idle tenants).

Each returns a dict of figures; the command prints it as the last line.
"""

import datetime as dt
import statistics
import time
import uuid

from django.db import transaction
from django.db.models import Count, Max, Min

from bench import explain, report
from bench.processes import Fleet
from bench.setup import bench_tenant, db_now, design_tenants, idle_tenants, insert_runs, settle
from jobs.models import Tenant
from runs import claims, transitions
from runs.models import Attempt, Run


def drain(options):
    """All runs due now, appearing at once (one transaction) for workers that are up. Throughput.

    The workers start first: their start-up (a second or two of imports) is
    not the engine's throughput, and counting it would favour one worker.
    """
    tenant, job = bench_tenant("drain")
    settle()
    fleet = Fleet(job.queue, options["workers"], options["concurrency"], options["batch"], options["pool"])
    try:
        fleet.wait_ready()
        insert_runs(job, db_now(), options["runs"])
        report.wait_until_done(tenant, options["timeout"], fleet)
    finally:
        fleet.stop()
    return {"workload": "drain", "tenant": tenant.name, **report.figures(tenant, options["runs"])}


def steady(options, during=None):
    """`rate` runs/s falling due evenly for `seconds`, workers already running. Lateness.

    `during(first_due, last_due)`, if given, is called once the runs are in, before waiting for them
    (bench history starts its partition drop from there).
    """
    tenant, job = bench_tenant("steady")
    settle()
    count = int(options["rate"] * options["seconds"])
    fleet = Fleet(job.queue, options["workers"], options["concurrency"], options["batch"], options["pool"])
    try:
        fleet.wait_ready()
        first = db_now() + dt.timedelta(seconds=2)
        insert_runs(job, first, count, spacing_seconds=1 / options["rate"])
        last_due = first + dt.timedelta(seconds=(count - 1) / options["rate"])
        if during:
            during(first, last_due)
        report.wait_until_done(tenant, options["timeout"] + options["seconds"], fleet, last_due=last_due)
    finally:
        fleet.stop()
    return {"workload": "steady", "tenant": tenant.name, "rate": options["rate"], **report.figures(tenant, count)}


def spike(options):
    """`runs` all due at one instant 10 s ahead: time from that instant to the last start, and the
    same number drained (bench drain) in the same run, alternately, `repeat` times each.

    The spike's rate is runs / (last start - instant); the ratio is its median over the drains' median
    rate (a spike must drain as fast as runs that appear due).
    """
    spikes, drains = [], []
    for _ in range(options["repeat"]):
        drains.append(drain(options))
        spikes.append(_spike_once(options))
    rates = [s["spike_runs_per_s"] for s in spikes]
    spike_rate, drain_rate = statistics.median(rates), statistics.median(d["runs_per_s"] for d in drains)
    return {
        **spikes[-1],
        "spike_runs_per_s": spike_rate,
        "all_started_after_s": [s["all_started_after_s"] for s in spikes],
        "spike_rates": rates,
        "drain_rates": [d["runs_per_s"] for d in drains],
        "drain_runs_per_s": drain_rate,
        "ratio_to_drain": round(spike_rate / drain_rate, 3) if spike_rate and drain_rate else None,
    }


def _spike_once(options):
    tenant, job = bench_tenant("spike")
    settle()
    fleet = Fleet(job.queue, options["workers"], options["concurrency"], options["batch"], options["pool"])
    try:
        instant = db_now() + dt.timedelta(seconds=10)
        insert_runs(job, instant, options["runs"])
        report.wait_until_done(tenant, options["timeout"] + 10, fleet, last_due=instant)
    finally:
        fleet.stop()
    figures = report.figures(tenant, options["runs"])
    last = figures["last_start"]
    after = round((last - instant).total_seconds(), 3) if last else None
    return {
        "workload": "spike",
        "tenant": tenant.name,
        **figures,
        "all_started_after_s": after,
        "spike_runs_per_s": round(options["runs"] / after, 1) if after else None,
    }


def backlog(options):
    """Drains without, then with `future` runs scheduled days ahead in the same tables: the ratio.

    Each side is drained `repeat` times (3) and compared by its median rate: a
    single 3-second drain on a 2-core machine varies by ±15 %, more than the
    effect measured.
    """
    tenant, job = bench_tenant("backlog")
    runs, repeat = options["runs"], options["repeat"]
    rates = {"without_backlog": [], "with_backlog": []}
    last = None
    for phase in ("without_backlog", "with_backlog"):
        if phase == "with_backlog":
            insert_runs(
                job, db_now() + dt.timedelta(days=3), options["future"], spacing_seconds=0.2, start_index=10_000_000
            )
        for _ in range(repeat):
            last = _drain_once(tenant, job, runs, options, start_index=sum(map(len, rates.values())) * runs)
            rates[phase].append(last["runs_per_s"])
    without, with_ = statistics.median(rates["without_backlog"]), statistics.median(rates["with_backlog"])
    return {
        **last,
        "workload": "backlog",
        "tenant": tenant.name,
        "future": options["future"],
        "runs_per_s": with_,
        "drain_runs_per_s": without,
        "rates": rates,
        "ratio_to_drain": round(with_ / without, 3) if without and with_ else None,
    }


def _drain_once(tenant, job, runs, options, start_index):
    settle()
    fleet = Fleet(job.queue, options["workers"], options["concurrency"], options["batch"], options["pool"])
    try:
        fleet.wait_ready()
        since = db_now()
        insert_runs(job, since, runs, start_index=start_index)
        report.wait_until_done(tenant, options["timeout"], fleet)
    finally:
        fleet.stop()
    return report.figures(tenant, runs, since=since)


def tenants(options):
    """Claim cost with `active` tenants holding work, first alone, then among `tenants` in all: the ratio.

    The second phase adds `tenants - active` other tenants; `--shape` says what they hold:
    `idle` (the default) no job and no run; `design` the design's shape, one cron job each with
    `future` runs materialised ahead in all, on the active tenants' queue (bench.setup.design_tenants).
    In each phase `runs` runs spread over the active tenants fall due at once and are claimed
    and completed until none is left: with `idle`, by this process (batches of `batch`, each
    claim timed); with `design`, by `workers` run_worker processes at `concurrency`, as in
    production. Either way the drain must go as fast whatever the other tenants hold.
    Each phase is drained `repeat` times, compared by median.
    """
    prefix, count, design = f"bench-tenants-{uuid.uuid4().hex[:8]}", options["active"], options["shape"] == "design"
    jobs = [bench_tenant(f"tenants-active-{i}", queue=prefix)[1] for i in range(count)]
    phases = {"few_tenants": [], "many_tenants": []}
    future, plans = 0, {}
    for phase, drains in phases.items():
        if phase == "many_tenants":
            if design:
                future = design_tenants(prefix, options["tenants"] - count, prefix, options["future"])
            else:
                idle_tenants(prefix, options["tenants"] - count)
        for _ in range(options["repeat"]):
            start_index = sum(map(len, phases.values())) * options["runs"]
            drains.append((_workers_drain if design else _claim_all)(jobs, options, start_index=start_index))
        if design:
            label = f"{phase}: {Tenant.objects.count()} tenants, {future} runs scheduled ahead"
            plans[phase] = explain.claim_plans(prefix, [job.tenant_id for job in jobs], options["batch"], label)
    few, many = (statistics.median(d["runs_per_s"] for d in phases[p]) for p in phases)
    return {
        "workload": "tenants",
        "shape": options["shape"],
        "tenant": f"{prefix}-{'cron' if design else 'idle'}-*, bench-tenants-active-*",
        "tenants_in_database": Tenant.objects.count(),
        "future_runs": future,
        "active": count,
        "batch": options["batch"],
        "runs_per_s": many,
        "few_tenants_runs_per_s": few,
        "phases": phases,
        "claim_plan_ms": plans,
        "ratio": round(many / few, 3) if few and many else None,
    }


def _workers_drain(jobs, options, start_index):
    """Runs due now over `jobs` (one transaction), drained by a fleet of workers (no scheduler: nothing
    expires, and the design shape's cron jobs have nothing to materialise yet). Throughput from the attempts."""
    settle()
    tenant_ids = [job.tenant_id for job in jobs]
    fleet = Fleet(
        jobs[0].queue, options["workers"], options["concurrency"], options["batch"], options["pool"], scheduler=False
    )
    try:
        fleet.wait_ready()
        since, each = db_now(), max(1, options["runs"] // len(jobs))
        with transaction.atomic():
            for i, job in enumerate(jobs):
                insert_runs(job, since, each, start_index=start_index + i * each)
        runs = Run.objects.filter(tenant_id__in=tenant_ids)
        deadline = time.monotonic() + options["timeout"]
        while runs.pending().exists() and time.monotonic() < deadline:
            if not fleet.alive():
                raise RuntimeError("a bench process died; see its output")
            time.sleep(0.2)
    finally:
        fleet.stop()
    first = Attempt.objects.filter(run__tenant_id__in=tenant_ids, run__created_at__gte=since, attempt=1)
    span = first.aggregate(start=Min("started_at"), end=Max("ended_at"), n=Count("id"))
    elapsed = (span["end"] - span["start"]).total_seconds() if span["start"] else None
    return {"claimed": span["n"], "runs_per_s": round(span["n"] / elapsed, 1) if elapsed else None}


def _claim_all(jobs, options, start_index):
    """Runs due now over `jobs` (one transaction), then claimed and completed here until none is left."""
    each = max(1, options["runs"] // len(jobs))
    with transaction.atomic():
        for i, job in enumerate(jobs):
            insert_runs(job, db_now(), each, start_index=start_index + i * each)
    settle()
    seconds, claimed = [], 0
    while True:
        started = time.perf_counter()
        leases = claims.claim([jobs[0].queue], options["batch"], "bench-tenants")
        seconds.append(time.perf_counter() - started)
        if not leases:
            break
        claimed += len(leases)
        transitions.complete_many([transitions.Completion(le.run_id, le.fencing_token, "succeeded") for le in leases])
    ms = sorted(1000 * s for s in seconds)
    return {
        "claimed": claimed,
        "runs_per_s": round(claimed / sum(seconds), 1),
        "claim_ms": {"p50": round(report.percentile(ms, 50), 2), "p99": round(report.percentile(ms, 99), 2)},
    }


WORKLOADS = {"drain": drain, "steady": steady, "spike": spike, "backlog": backlog, "tenants": tenants}
