# Interval schedules and bounds (jobs/occurrences.py): schedule kind `every` with its period, start_at and
# end_at for every kind, and remaining_runs; existing jobs get none of them (no bound, no count).

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("jobs", "0008_membership_roles_and_token_roles"),
    ]

    operations = [
        migrations.RemoveConstraint(
            model_name="jobdefinition",
            name="job_schedule_kind_valid",
        ),
        migrations.AddField(
            model_name="jobdefinition",
            name="end_at",
            field=models.DateTimeField(blank=True, help_text="No occurrence at or after this instant.", null=True),
        ),
        migrations.AddField(
            model_name="jobdefinition",
            name="every_seconds",
            field=models.PositiveIntegerField(
                blank=True,
                help_text="For schedule kind 'every': the period in seconds (at least 1), counted from start_at (or from 1970-01-01 00:00 UTC without one), so lateness never shifts later runs.",
                null=True,
            ),
        ),
        migrations.AddField(
            model_name="jobdefinition",
            name="remaining_runs",
            field=models.PositiveIntegerField(
                blank=True,
                help_text="Run this many more times, then stop (skipped occurrences do not count); empty: no limit.",
                null=True,
            ),
        ),
        migrations.AddField(
            model_name="jobdefinition",
            name="start_at",
            field=models.DateTimeField(
                blank=True,
                help_text="No occurrence before this instant; an 'every' schedule counts from it.",
                null=True,
            ),
        ),
        migrations.AlterField(
            model_name="jobdefinition",
            name="schedule_kind",
            field=models.CharField(
                choices=[("cron", "Cron"), ("at", "At"), ("every", "Every"), ("none", "None")],
                default="cron",
                max_length=10,
            ),
        ),
        migrations.AddConstraint(
            model_name="jobdefinition",
            constraint=models.CheckConstraint(
                condition=models.Q(("schedule_kind__in", ["cron", "at", "every", "none"])),
                name="job_schedule_kind_valid",
            ),
        ),
        migrations.AddConstraint(
            model_name="jobdefinition",
            constraint=models.CheckConstraint(
                condition=models.Q(
                    models.Q(("schedule_kind", "every"), _negated=True),
                    models.Q(("every_seconds__gte", 1), ("every_seconds__isnull", False)),
                    _connector="OR",
                ),
                name="job_every_has_period",
            ),
        ),
        migrations.AddConstraint(
            model_name="jobdefinition",
            constraint=models.CheckConstraint(
                condition=models.Q(
                    ("start_at__isnull", True),
                    ("end_at__isnull", True),
                    ("end_at__gt", models.F("start_at")),
                    _connector="OR",
                ),
                name="job_end_after_start",
            ),
        ),
    ]
