"""What a tenant is allowed, checked when it is used and not only when it was granted.

A superuser grants a tenant module prefixes (its `python` and `celery` jobs'
tasks) and private networks (its `http` targets). A job is validated against
them when it is saved; taking one away must stop the job too, so each door
that makes a job run asks again:

- the worker, before every call (runs.targets: a revoked prefix fails the
  attempt for good, naming the module; a network is checked as the call
  connects, jobs.addresses);
- trigger, enqueue, resume and replay (runs.enqueue, runs.controls): refused,
  `Revoked`, before anything is written (the API's 403 `permission-revoked`,
  the portal's message);
- materialisation (runs.materialize): the job's occurrences are recorded
  `skipped` with the reason, which the ledger shows, and its schedule moves on.

An `http` target is judged here only when its host is an IP address: a name
is resolved on the worker, at the call, where the answer counts.
"""

import ipaddress

from jobs import addresses, registry

TASK_KINDS = ("python", "celery")


class Revoked(Exception):
    """A door refused to make a job run: its tenant no longer allows its target. str() says what was revoked."""


def revoked(job):
    """Why `job` (its tenant loaded) may no longer run, or None. No database query beyond the tenant."""
    tenant = job.tenant
    if job.target_kind in TASK_KINDS:
        return registry.revoked(tenant.task_prefixes, job.target_ref, tenant.name)
    if job.target_kind == "http":
        return _network_revoked(job.target_ref, tenant)
    return None


def _network_revoked(url, tenant):
    try:
        host = addresses.Destination.of(url).host
        ip = ipaddress.ip_address(host)
    except (addresses.BadURL, ValueError):
        return None  # a name: checked at the call, on the worker
    try:
        allowance = tenant.allowance
    except ValueError:
        allowance = addresses.PUBLIC_ONLY  # a stored allowance that no longer parses allows nothing
    if addresses.classify(ip, allowance) is None:
        return None
    return f"permission revoked: {url} is {allowance.refusal()}"


def refuse_revoked(jobs):
    """Raise Revoked if any of `jobs` (their tenants loaded) may no longer run, naming each (the first five)."""
    found = [(job, why) for job in jobs if (why := revoked(job))]
    if not found:
        return
    shown = "; ".join(f"{job.name}: {why}" for job, why in found[:5])
    if len(found) == 1:
        raise Revoked(shown)
    more = f" (and {len(found) - 5} more)" if len(found) > 5 else ""
    raise Revoked(f"{len(found)} jobs may no longer run, so nothing was done. {shown}{more}")
