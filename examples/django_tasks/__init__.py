"""A Django project whose `@task` functions run on Duetime (docs/django-tasks.md)."""
