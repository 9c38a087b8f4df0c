"""The restore generation (runs/generations.py): one row, the high bits of every fencing token.

Its row: generation 0 (the tokens issued so far) and, on PostgreSQL, the
server it is on, so that a first connection to another one (a restore, a
promotion) starts generation 1.
"""

from django.db import migrations, models

SERVER = """
    (SELECT system_identifier FROM pg_control_system())::text
    || '/' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8)
    || '/' || (SELECT oid FROM pg_database WHERE datname = current_database())::text
"""


def first_row(apps, schema_editor):
    server = SERVER if schema_editor.connection.vendor == "postgresql" else "''"
    schema_editor.execute(f"INSERT INTO runs_generation (id, number, server, reason) VALUES (1, 0, {server}, 'migrated')")


class Migration(migrations.Migration):
    dependencies = [("runs", "0008_consumer_pool")]

    operations = [
        migrations.CreateModel(
            name="Generation",
            fields=[
                ("id", models.SmallIntegerField(default=1, primary_key=True, serialize=False)),
                ("number", models.BigIntegerField(default=0)),
                ("server", models.CharField(blank=True, max_length=100)),
                ("changed_at", models.DateTimeField(null=True)),
                ("reason", models.TextField(blank=True)),
            ],
            options={
                "constraints": [models.CheckConstraint(condition=models.Q(id=1), name="generation_one_row")],
            },
        ),
        migrations.RunPython(first_row, migrations.RunPython.noop),
    ]
