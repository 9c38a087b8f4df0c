# Run.args: a Django task's positional arguments, kept apart from its keyword arguments (the payload); tasks_backend.

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('runs', '0010_ready_marks'),
    ]

    operations = [
        migrations.AddField(
            model_name='run',
            name='args',
            field=models.JSONField(blank=True, help_text="A Django task's positional arguments, passed before the payload's keyword arguments (tasks_backend); empty for every other run.", null=True),
        ),
    ]
