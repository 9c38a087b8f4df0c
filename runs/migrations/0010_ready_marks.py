# The ready set as marks (runs.models.ReadyMark): claims read the marks due now instead of walking every
# tenant with claimable runs. One mark per (tenant, queue) of the claimable runs already there, at their
# earliest available_at, so the invariant (every claimable run has a mark at or before it) holds from the start.

import django.db.models.deletion
from django.db import migrations, models
from django.db.models import Min


def mark_claimable_runs(apps, schema_editor):
    Run, ReadyMark = apps.get_model("runs", "Run"), apps.get_model("runs", "ReadyMark")
    claimable = Run.objects.filter(state__in=("scheduled", "retry_wait"))
    earliest = claimable.values("tenant_id", "queue").annotate(due_at=Min("available_at")).order_by()
    ReadyMark.objects.bulk_create((ReadyMark(**row) for row in earliest.iterator()), batch_size=5000)


class Migration(migrations.Migration):

    dependencies = [
        ('jobs', '0008_membership_roles_and_token_roles'),
        ('runs', '0009_restore_generation'),
    ]

    operations = [
        migrations.CreateModel(
            name='ReadyMark',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('queue', models.CharField(max_length=64)),
                ('due_at', models.DateTimeField()),
                ('tenant', models.ForeignKey(db_constraint=False, db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name='+', to='jobs.tenant')),
            ],
            options={
                'indexes': [models.Index(fields=['queue', 'due_at', 'tenant'], name='readymark_due')],
            },
        ),
        migrations.RunPython(mark_claimable_runs, migrations.RunPython.noop, elidable=True),
    ]
