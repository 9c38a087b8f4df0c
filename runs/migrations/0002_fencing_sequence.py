"""The one global, strictly increasing source of fencing tokens and epochs.

PostgreSQL: a sequence (nextval never repeats, even across rolled-back
transactions). SQLite: a row in runs_counter, bumped inside the claim's
IMMEDIATE transaction, which already holds the only write lock.
"""

from django.db import migrations


def create_source(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute("CREATE SEQUENCE IF NOT EXISTS runs_fencing_token_seq AS bigint CACHE 1")
    else:
        apps.get_model("runs", "Counter").objects.get_or_create(name="fencing_token", defaults={"value": 0})


def drop_source(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute("DROP SEQUENCE IF EXISTS runs_fencing_token_seq")
    else:
        apps.get_model("runs", "Counter").objects.filter(name="fencing_token").delete()


class Migration(migrations.Migration):
    dependencies = [("runs", "0001_initial")]

    operations = [migrations.RunPython(create_source, drop_source)]
