from django.apps import AppConfig


class SchedulerProjectConfig(AppConfig):
    name = "scheduler_project"
    verbose_name = "Duetime"

    def ready(self):
        from scheduler_project import checks  # noqa: F401  (registers the system checks)
