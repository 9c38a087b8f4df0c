# The dead-letter cursor remembers when its last letter died, so the notifier reads only the day
# partitions that can hold a newer one (notify/events.py).

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("notify", "0001_initial"),
    ]

    operations = [
        migrations.AddField(
            model_name="cursor",
            name="last_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
    ]
