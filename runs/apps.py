from django.apps import AppConfig
from django.db.backends.signals import connection_created


class RunsConfig(AppConfig):
    name = "runs"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self):
        from runs import sql

        connection_created.connect(sql.on_connect, dispatch_uid="duetime-session-settings")
