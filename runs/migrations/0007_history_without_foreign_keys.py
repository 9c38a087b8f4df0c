# Runs and dead letters keep their job and tenant without a database constraint (see Run.job): dropping a
# day's partition (runs.retention) would otherwise take ACCESS EXCLUSIVE on jobs_tenant and jobs_jobdefinition,
# stalling every claim behind it. PostgreSQL drops each constraint on the parent and all its partitions.

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('jobs', '0006_paused_tenants_index'),
        ('runs', '0006_history_partitions'),
    ]

    operations = [
        migrations.AlterField(
            model_name='run',
            name='job',
            field=models.ForeignKey(db_constraint=False, db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name='runs', to='jobs.jobdefinition'),
        ),
        migrations.AlterField(
            model_name='run',
            name='tenant',
            field=models.ForeignKey(db_constraint=False, db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name='runs', to='jobs.tenant'),
        ),
    ]
