# The rollup cursor remembers the latest end it folded, so the fold reads only the day partitions
# that can hold a newer attempt (runs/rollups.py).

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("runs", "0007_history_without_foreign_keys"),
    ]

    operations = [
        migrations.AddField(
            model_name="rollupcursor",
            name="last_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
    ]
