"""manage.py rotate_webhook_secret: the new secret printed once, the old one gone."""

import io

import pytest
from django.core.management import CommandError, call_command

from jobs.models import AuditEntry
from notify.models import SigningSecret


def test_it_prints_the_new_secret_once_as_the_last_line(acme, clock):
    old = SigningSecret.rotate(acme, clock.now)
    out = io.StringIO()
    call_command("rotate_webhook_secret", "--tenant", "acme", stdout=out)

    secret = out.getvalue().strip().splitlines()[-1]
    assert secret.startswith("whsec_") and secret != old
    assert SigningSecret.objects.get(tenant=acme).secret == secret
    assert AuditEntry.objects.filter(action="rotate_signing_secret", tenant=acme).exists()


def test_it_names_a_tenant_it_does_not_know(db):
    with pytest.raises(CommandError, match="no tenant named 'initech'"):
        call_command("rotate_webhook_secret", "--tenant", "initech")
