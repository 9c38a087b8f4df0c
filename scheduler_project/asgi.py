"""ASGI entry point: HTTP (API, admin, dashboards) and WebSocket live updates.

Run it with daphne (`daphne scheduler_project.asgi:application`, or
`manage.py run_all`). WebSockets go through the session login (the portal's
cookie) and an Origin check against ALLOWED_HOSTS; the one route, /ws/live/,
is runs.admin.live.LiveConsumer.
"""

import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "scheduler_project.settings")

from django.core.asgi import get_asgi_application  # noqa: E402

http_application = get_asgi_application()  # sets Django up before the imports below

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from channels.security.websocket import AllowedHostsOriginValidator  # noqa: E402

from runs.admin.live import websocket_urlpatterns  # noqa: E402

application = ProtocolTypeRouter(
    {
        "http": http_application,
        "websocket": AllowedHostsOriginValidator(AuthMiddlewareStack(URLRouter(websocket_urlpatterns))),
    }
)
