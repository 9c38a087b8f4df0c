"""A backend for Django's Tasks framework: `@task(...).enqueue()` creates a Duetime run (docs/django-tasks.md)."""
