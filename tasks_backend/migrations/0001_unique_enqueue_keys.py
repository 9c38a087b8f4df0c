# UniqueEnqueue: the holders of unique enqueue keys (tasks_backend/holds.py).

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    initial = True

    dependencies = [
        ('jobs', '0010_http_target_method_headers_signing'),
    ]

    operations = [
        migrations.CreateModel(
            name='UniqueEnqueue',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('key', models.CharField(help_text="The task's module path, then the caller's key or an arguments hash.", max_length=500)),
                ('run_id', models.BigIntegerField(help_text='The run the first enqueue under the key made.')),
                ('expires_at', models.DateTimeField(help_text='Until then an enqueue under the key answers with this run.')),
                ('tenant', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='+', to='jobs.tenant')),
            ],
            options={
                'indexes': [models.Index(fields=['expires_at'], name='unique_enqueue_by_expiry')],
                'constraints': [models.UniqueConstraint(fields=('tenant', 'key'), name='unique_enqueue_key')],
            },
        ),
    ]
