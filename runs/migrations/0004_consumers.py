# Attempt.return_value (what a task returned) and the Consumer presence rows (runs/consumers.py).

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('jobs', '0002_tenant_task_module_prefixes'),
        ('runs', '0003_lateness_rollups'),
    ]

    operations = [
        migrations.AddField(
            model_name='attempt',
            name='return_value',
            field=models.JSONField(blank=True, help_text='What the task returned (succeeded attempts of python tasks; else empty).', null=True),
        ),
        migrations.CreateModel(
            name='Consumer',
            fields=[
                ('name', models.CharField(max_length=200, primary_key=True, serialize=False)),
                ('kinds', models.JSONField(default=list, help_text='The target kinds it executes.')),
                ('queues', models.JSONField(blank=True, help_text='The queues it serves; empty: every queue.', null=True)),
                ('last_seen', models.DateTimeField()),
                ('expires_at', models.DateTimeField()),
                ('tenant', models.ForeignKey(blank=True, help_text="The one tenant whose runs it takes (an external worker's token); empty: every tenant.", null=True, on_delete=django.db.models.deletion.CASCADE, related_name='+', to='jobs.tenant')),
            ],
            options={
                'indexes': [models.Index(fields=['expires_at'], name='consumer_by_expiry')],
            },
        ),
    ]
