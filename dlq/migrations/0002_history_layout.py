# Where each dead letter lives (runs/partitions.py): history_day, 9999-12-31 while open, the day it
# was resolved after. A dead run stays open while a letter of it is; the others go into history now.
# The foreign key to runs goes (see runs/0005); SQLite gets the index its batched retention deletes by.

import datetime

import django.db.models.deletion
from django.db import migrations, models
from django.db.models import OuterRef, Q, Subquery
from django.db.models.functions import Coalesce, TruncDate

from runs.migrations._sqlite_only import OnSQLite

OPEN = Q(replayed_at__isnull=True, discarded_at__isnull=True)


def history_days(apps, schema_editor):
    DeadLetter = apps.get_model("dlq", "DeadLetter")
    Run, Attempt = apps.get_model("runs", "Run"), apps.get_model("runs", "Attempt")
    resolved = Coalesce("replayed_at", "discarded_at")
    DeadLetter.objects.exclude(OPEN).update(history_day=TruncDate(resolved, tzinfo=datetime.UTC))
    closed = Run.objects.filter(state="dead").exclude(pk__in=DeadLetter.objects.filter(OPEN).values("run_id"))
    closed.update(history_day=TruncDate("finished_at", tzinfo=datetime.UTC))
    runs = Run.objects.filter(pk=OuterRef("run_id")).values("history_day")[:1]
    Attempt.objects.filter(run__state="dead").update(history_day=Subquery(runs))


class Migration(migrations.Migration):

    dependencies = [
        ('dlq', '0001_initial'),
        ('jobs', '0004_schedules_as_code_tenant_pause_jitter'),
        ('runs', '0005_history_layout'),
    ]

    operations = [
        migrations.AddField(
            model_name='deadletter',
            name='history_day',
            field=models.DateField(default=datetime.date(9999, 12, 31), help_text='9999-12-31 while open; then the day it was resolved, which decides when retention drops it.'),
        ),
        migrations.RunPython(history_days, migrations.RunPython.noop),
        migrations.AlterField(
            model_name='deadletter',
            name='run',
            field=models.ForeignKey(db_constraint=False, on_delete=django.db.models.deletion.CASCADE, related_name='dead_letters', to='runs.run'),
        ),
        OnSQLite(migrations.AddIndex(
            model_name='deadletter',
            index=models.Index(fields=['history_day'], name='deadletter_by_history_day'),
        )),
        migrations.AddConstraint(
            model_name='deadletter',
            constraint=models.CheckConstraint(condition=models.Q(('replayed_at__isnull', False), ('discarded_at__isnull', False), ('history_day', datetime.date(9999, 12, 31)), _connector='OR'), name='deadletter_open_until_resolved'),
        ),
    ]
