# Least privilege (docs/security.md, Roles): a tenant's members get a role through a Membership row, and team
# tokens carry a role. Existing members become owners and existing team tokens operators, as documented;
# worker tokens have no role.

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


def members_become_owners(apps, schema_editor):
    """Every (tenant, user) of the plain many-to-many table becomes an owner's membership."""
    Tenant = apps.get_model("jobs", "Tenant")
    Membership = apps.get_model("jobs", "Membership")
    Plain = Tenant.members.through
    rows = Plain.objects.values_list("tenant_id", "user_id").order_by("id")
    Membership.objects.bulk_create(
        [Membership(tenant_id=t, user_id=u, role="owner") for t, u in rows.iterator()], batch_size=1000
    )


def memberships_become_plain(apps, schema_editor):
    """Back to the plain many-to-many table (the role is dropped)."""
    Tenant = apps.get_model("jobs", "Tenant")
    Membership = apps.get_model("jobs", "Membership")
    Plain = Tenant.members.through
    rows = Membership.objects.values_list("tenant_id", "user_id").order_by("id")
    Plain.objects.bulk_create([Plain(tenant_id=t, user_id=u) for t, u in rows.iterator()], batch_size=1000)


def worker_tokens_have_no_role(apps, schema_editor):
    apps.get_model("jobs", "ApiToken").objects.filter(kind="worker").update(role="")


class Migration(migrations.Migration):
    dependencies = [
        ("jobs", "0007_tenant_private_networks"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.CreateModel(
            name="Membership",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                (
                    "role",
                    models.CharField(
                        choices=[("viewer", "Viewer"), ("operator", "Operator"), ("owner", "Owner")],
                        default="viewer",
                        max_length=10,
                    ),
                ),
                ("created_at", models.DateTimeField(auto_now_add=True)),
                (
                    "tenant",
                    models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="memberships",
                        to="jobs.tenant",
                    ),
                ),
                (
                    "user",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="memberships",
                        to=settings.AUTH_USER_MODEL,
                    ),
                ),
            ],
            options={
                "ordering": ["tenant__name", "user__username"],
                "constraints": [
                    models.UniqueConstraint(fields=("tenant", "user"), name="membership_unique_per_tenant"),
                    models.CheckConstraint(
                        condition=models.Q(("role__in", ["viewer", "operator", "owner"])),
                        name="membership_role_valid",
                    ),
                ],
            },
        ),
        migrations.RunPython(members_become_owners, memberships_become_plain),
        migrations.RemoveField(model_name="tenant", name="members"),
        migrations.AddField(
            model_name="tenant",
            name="members",
            field=models.ManyToManyField(
                blank=True, related_name="tenants", through="jobs.Membership", to=settings.AUTH_USER_MODEL
            ),
        ),
        migrations.AddField(
            model_name="apitoken",
            name="role",
            field=models.CharField(
                blank=True,
                choices=[("viewer", "Viewer"), ("operator", "Operator"), ("owner", "Owner")],
                default="operator",
                help_text="Team tokens: viewer (reads), operator (pause, resume, trigger, cancel, replay, discard, "
                "backfill) or owner (also definitions and schedules as code).",
                max_length=10,
            ),
        ),
        migrations.RunPython(worker_tokens_have_no_role, migrations.RunPython.noop),
        migrations.AddConstraint(
            model_name="apitoken",
            constraint=models.CheckConstraint(
                condition=models.Q(("kind", "team"), ("role__in", ["viewer", "operator", "owner"]))
                | models.Q(("kind", "worker"), ("role", "")),
                name="apitoken_role_fits_kind",
            ),
        ),
    ]
