# Consumer.pool: a run_worker announces its pool, so the job page can warn about soft timeouts (runs/consumers.py).

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('runs', '0007_history_without_foreign_keys'),
    ]

    operations = [
        migrations.AddField(
            model_name='consumer',
            name='pool',
            field=models.CharField(blank=True, default='', help_text="A run_worker's pool (threads: soft timeouts; processes: a handler is killed at its timeout); empty for other consumers.", max_length=16),
        ),
    ]
