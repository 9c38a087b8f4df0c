"""Portal pages of jobs: importing the package registers them on the portal site."""

from jobs.admin import actions, definitions, drift, members, schedule_views, tenant_pause, tokens  # noqa: F401
