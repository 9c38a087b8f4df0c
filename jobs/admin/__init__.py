"""Portal pages of jobs: importing the package registers them on the portal site."""

from jobs.admin import actions, definitions, schedule_views  # noqa: F401
