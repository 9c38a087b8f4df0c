"""save_definition, the one path that stores a job for the portal, the API and code: the definitions quota."""

import pytest

from jobs.definitions import save_definition
from jobs.models import JobDefinition, Tenant
from jobs.quotas import QuotaExceeded


def definition(tenant, name, **fields):
    return JobDefinition(
        tenant=tenant, name=name, schedule_kind="none", target_kind="python", target_ref="tests.handlers.noop", **fields
    )


def test_it_refuses_a_new_job_over_the_tenants_definitions_quota(acme):
    Tenant.objects.filter(pk=acme.pk).update(max_definitions=1)
    acme.refresh_from_db()
    save_definition(definition(acme, "billing.one"), "test")
    with pytest.raises(QuotaExceeded) as refused:
        save_definition(definition(acme, "billing.two"), "test")
    assert refused.value.quota == "max_definitions"
    assert not JobDefinition.objects.filter(name="billing.two").exists()


def test_it_counts_a_cancelled_job_made_live_again_but_not_an_edit(acme):
    Tenant.objects.filter(pk=acme.pk).update(max_definitions=1)
    acme.refresh_from_db()
    gone, _ = save_definition(definition(acme, "billing.gone", status="cancelled"), "test")
    live, _ = save_definition(definition(acme, "billing.live"), "test")
    live.timeout_seconds = 60
    save_definition(live, "test")  # an edit adds no definition
    gone.status = "active"
    with pytest.raises(QuotaExceeded):
        save_definition(gone, "test")
