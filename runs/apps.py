from django.apps import AppConfig
from django.db.backends.signals import connection_created


class RunsConfig(AppConfig):
    name = "runs"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self):
        from runs import generations, sql

        connection_created.connect(sql.on_connect, dispatch_uid="duetime-session-settings")
        # After the session settings: every new connection checks its server before its first query.
        connection_created.connect(generations.follow_server, dispatch_uid="duetime-restore-generation")
