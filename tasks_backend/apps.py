from django.apps import AppConfig


class TasksBackendConfig(AppConfig):
    name = "tasks_backend"
    verbose_name = "Django tasks backend"

    def ready(self):
        from django.db.models.signals import post_delete, post_save

        from jobs.models import JobDefinition, Tenant
        from tasks_backend import task_jobs

        # An edit made in this process reaches the next enqueue at once; other processes' edits within
        # task_jobs.CACHE_SECONDS.
        for model in (JobDefinition, Tenant):
            post_save.connect(task_jobs.forget_changed, sender=model, dispatch_uid=f"tasks_backend.{model.__name__}")
            post_delete.connect(
                task_jobs.forget_changed, sender=model, dispatch_uid=f"tasks_backend.{model.__name__}.delete"
            )
