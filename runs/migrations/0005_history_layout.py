# Where each run, attempt and dead letter lives (runs/partitions.py): history_day, 9999-12-31 while
# open, the day it went into history once finished. The foreign key from attempts to runs goes (on
# PostgreSQL a runs key is (id, history_day) from runs/0006 on); SQLite gets the indexes its batched
# retention deletes by. Also the 400-day per-job rollup (JobDay) and the partition list (HistoryDay).

import datetime

import django.db.models.deletion
from django.db import migrations, models
from django.db.models import OuterRef, Subquery
from django.db.models.functions import TruncDate

from runs.migrations._sqlite_only import OnSQLite

OPEN_DAY = datetime.date(9999, 12, 31)
HISTORY_STATES = ("succeeded", "cancelled", "skipped")


def history_days(apps, schema_editor):
    """Finished runs (dead ones stay open until dlq/0002 looks at their letters) and their attempts."""
    Run, Attempt = apps.get_model("runs", "Run"), apps.get_model("runs", "Attempt")
    Run.objects.filter(state__in=HISTORY_STATES).update(history_day=TruncDate("finished_at", tzinfo=datetime.UTC))
    runs = Run.objects.filter(pk=OuterRef("run_id")).values("history_day")[:1]
    Attempt.objects.filter(run__state__in=HISTORY_STATES).update(history_day=Subquery(runs))


class Migration(migrations.Migration):

    dependencies = [
        ('jobs', '0004_schedules_as_code_tenant_pause_jitter'),
        ('runs', '0004_consumers'),
    ]

    operations = [
        migrations.CreateModel(
            name='HistoryDay',
            fields=[
                ('day', models.DateField(primary_key=True, serialize=False)),
            ],
            options={
                'db_table': 'runs_history_day',
                'managed': False,
            },
        ),
        migrations.CreateModel(
            name='JobDay',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('first_attempts', models.PositiveIntegerField(default=0)),
                ('lateness_ms_sum', models.BigIntegerField(default=0)),
                ('lateness_ms_max', models.BigIntegerField(default=0)),
                ('histogram', models.JSONField(default=dict, help_text='{bin: count} of first-attempt lateness (see runs.rollups).')),
                ('succeeded', models.PositiveIntegerField(default=0)),
                ('failed', models.PositiveIntegerField(default=0)),
                ('timed_out', models.PositiveIntegerField(default=0)),
                ('lease_expired', models.PositiveIntegerField(default=0)),
                ('stale', models.PositiveIntegerField(default=0)),
                ('day', models.DateTimeField(help_text='Midnight UTC.')),
            ],
        ),
        migrations.AddField(
            model_name='attempt',
            name='history_day',
            field=models.DateField(default=datetime.date(9999, 12, 31), help_text="Its run's history_day: it lives in its run's partition."),
        ),
        migrations.AddField(
            model_name='run',
            name='history_day',
            field=models.DateField(default=datetime.date(9999, 12, 31), help_text='9999-12-31 while open (pending, or dead with an open dead letter); then the day it went into history, which decides when retention drops it (runs/partitions.py).'),
        ),
        migrations.RunPython(history_days, migrations.RunPython.noop),
        migrations.AlterField(
            model_name='attempt',
            name='run',
            field=models.ForeignKey(db_constraint=False, db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name='attempts', to='runs.run'),
        ),
        OnSQLite(migrations.AddIndex(
            model_name='attempt',
            index=models.Index(fields=['history_day'], name='attempt_by_history_day'),
        )),
        OnSQLite(migrations.AddIndex(
            model_name='run',
            index=models.Index(fields=['history_day'], name='run_by_history_day'),
        )),
        migrations.AddConstraint(
            model_name='run',
            constraint=models.CheckConstraint(condition=models.Q(models.Q(('state__in', ('scheduled', 'retry_wait', 'leased')), _negated=True), ('history_day', datetime.date(9999, 12, 31)), _connector='OR'), name='run_pending_is_open'),
        ),
        migrations.AddConstraint(
            model_name='run',
            constraint=models.CheckConstraint(condition=models.Q(models.Q(('state__in', ('succeeded', 'cancelled', 'skipped')), _negated=True), models.Q(('history_day', datetime.date(9999, 12, 31)), _negated=True), _connector='OR'), name='run_finished_is_history'),
        ),
        migrations.AddField(
            model_name='jobday',
            name='job',
            field=models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name='+', to='jobs.jobdefinition'),
        ),
        migrations.AddField(
            model_name='jobday',
            name='tenant',
            field=models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name='+', to='jobs.tenant'),
        ),
        migrations.AddIndex(
            model_name='jobday',
            index=models.Index(fields=['day'], name='jobday_by_day'),
        ),
        migrations.AddConstraint(
            model_name='jobday',
            constraint=models.UniqueConstraint(fields=('job', 'day'), name='jobday_unique'),
        ),
    ]
