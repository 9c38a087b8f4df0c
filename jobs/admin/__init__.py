"""Portal pages of jobs: importing the package registers them on the portal site."""

from jobs.admin import actions, definitions, drift, schedule_views, tenant_pause  # noqa: F401
