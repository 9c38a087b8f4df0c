"""create_tenant and create_token, as an operator types them."""

import io

import pytest
from django.core.management import CommandError, call_command

from jobs.models import ApiToken, Tenant


def run(*args):
    out = io.StringIO()
    call_command(*args, stdout=out)
    return out.getvalue()


def test_it_creates_a_tenant(db):
    assert "Created tenant billing" in run("create_tenant", "billing")
    assert Tenant.objects.filter(name="billing").exists()


def test_it_refuses_a_tenant_name_that_is_not_a_slug(db):
    with pytest.raises(CommandError, match="name"):
        run("create_tenant", "Billing Team")
    assert not Tenant.objects.exists()


def test_it_prints_a_worker_secret_once_as_the_last_line(acme):
    output = run("create_token", "--tenant", "acme", "--kind", "worker", "--queues", "default,billing")
    secret = output.strip().splitlines()[-1]
    token = ApiToken.objects.get()
    assert token.secret_hash == ApiToken.hash_secret(secret)
    assert token.queues == ["default", "billing"]
    assert secret not in str(list(ApiToken.objects.values()))


def test_it_refuses_a_worker_token_without_queues(acme):
    with pytest.raises(CommandError, match="--queues"):
        run("create_token", "--tenant", "acme", "--kind", "worker")


def test_it_refuses_an_unknown_tenant(db):
    with pytest.raises(CommandError, match="no tenant named 'nobody'"):
        run("create_token", "--tenant", "nobody", "--kind", "team")
