"""Portal pages of jobs: importing the package registers them on the portal site."""

from jobs.admin import (  # noqa: F401
    actions,
    definitions,
    drift,
    members,
    queue_limits,
    schedule_views,
    signing_secret,
    tenant_pause,
    tokens,
)
