"""run_worker's options: a dedicated pool names tenants that exist."""

import pytest
from django.core.management import CommandError, call_command


@pytest.mark.parametrize(
    "args, message",
    [
        (["--tenants", "acme,initech"], "--tenants: no tenant named initech"),
        (["--exclude-tenants", "hooli"], "--exclude-tenants: no tenant named hooli"),
        (["--tenants", ","], "--tenants needs at least one tenant name"),
        (["--tenants", "acme", "--exclude-tenants", "globex"], "not both"),
    ],
)
def test_it_explains_a_bad_dedicated_pool(acme, globex, args, message):
    with pytest.raises(CommandError, match=message):
        call_command("run_worker", *args, "--once", "--skip-checks")
