# Rollups of finished attempts for the portal dashboards (runs/rollups.py).

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('jobs', '0001_initial'),
        ('runs', '0002_fencing_sequence'),
    ]

    operations = [
        migrations.CreateModel(
            name='RollupCursor',
            fields=[
                ('name', models.CharField(max_length=40, primary_key=True, serialize=False)),
                ('last_id', models.BigIntegerField(default=0)),
            ],
        ),
        migrations.CreateModel(
            name='JobHour',
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
                ('hour', models.DateTimeField()),
                ('job', models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name='+', to='jobs.jobdefinition')),
                ('tenant', models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name='+', to='jobs.tenant')),
            ],
            options={
                'indexes': [models.Index(fields=['hour'], name='jobhour_by_hour')],
                'constraints': [models.UniqueConstraint(fields=('job', 'hour'), name='jobhour_unique')],
            },
        ),
        migrations.CreateModel(
            name='TenantMinute',
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
                ('minute', models.DateTimeField()),
                ('tenant', models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name='+', to='jobs.tenant')),
            ],
            options={
                'indexes': [models.Index(fields=['minute'], name='tenantminute_by_minute')],
                'constraints': [models.UniqueConstraint(fields=('tenant', 'minute'), name='tenantminute_unique')],
            },
        ),
    ]
