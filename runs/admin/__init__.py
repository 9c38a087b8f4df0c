"""Portal pages of runs: importing the package registers them on the portal site."""

from runs.admin import dashboards, ledger, runs  # noqa: F401
