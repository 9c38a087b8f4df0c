"""ASGI entry point: HTTP (API, admin, dashboards) and, later, WebSocket live updates."""

import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "scheduler_project.settings")

from django.core.asgi import get_asgi_application  # noqa: E402

application = get_asgi_application()
