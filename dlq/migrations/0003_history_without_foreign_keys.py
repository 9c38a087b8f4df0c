# Runs and dead letters keep their job and tenant without a database constraint (see Run.job): dropping a
# day's partition (runs.retention) would otherwise take ACCESS EXCLUSIVE on jobs_tenant and jobs_jobdefinition,
# stalling every claim behind it. PostgreSQL drops each constraint on the parent and all its partitions.

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('dlq', '0002_history_layout'),
        ('jobs', '0006_paused_tenants_index'),
    ]

    operations = [
        migrations.AlterField(
            model_name='deadletter',
            name='job',
            field=models.ForeignKey(db_constraint=False, on_delete=django.db.models.deletion.CASCADE, related_name='dead_letters', to='jobs.jobdefinition'),
        ),
        migrations.AlterField(
            model_name='deadletter',
            name='tenant',
            field=models.ForeignKey(db_constraint=False, on_delete=django.db.models.deletion.CASCADE, related_name='dead_letters', to='jobs.tenant'),
        ),
    ]
