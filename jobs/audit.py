"""The audit record of privileged changes: who did what, to which object, and why."""

from jobs.models import AuditEntry


def actor_for_user(user):
    return f"user:{user.get_username()}"


def actor_for_token(token):
    return f"token:{token.prefix}"


def entry(actor, action, obj, *, tenant=None, detail=None, note=""):
    """An unsaved audit entry for `action` on `obj` (a model instance)."""
    return AuditEntry(
        tenant=tenant if tenant is not None else getattr(obj, "tenant", None),
        actor=actor,
        action=action,
        object_type=obj._meta.label_lower,
        object_id=str(obj.pk),
        object_repr=str(obj)[:200],
        detail=detail or {},
        note=note,
    )


def record(actor, action, obj, *, tenant=None, detail=None, note=""):
    """Write one audit entry for `action` on `obj`."""
    audit_entry = entry(actor, action, obj, tenant=tenant, detail=detail, note=note)
    audit_entry.save()
    return audit_entry


def record_many(actor, action, objs, *, detail=None, note=""):
    """One entry per object, in one INSERT (bulk portal actions)."""
    return AuditEntry.objects.bulk_create(
        [entry(actor, action, obj, detail=detail, note=note) for obj in objs], batch_size=1000
    )


def changes(before, after):
    """{field: {"before": old, "after": new}} for each field of `after` whose value differs from `before`.

    For lists (a tenant's members, its task prefixes) it adds what was
    `added` and `removed`, so a long list's entry says what moved.
    """
    diff = {}
    for field, new in after.items():
        old = before.get(field)
        if old == new:
            continue
        diff[field] = {"before": old, "after": new}
        if isinstance(new, list) and isinstance(old, list | None):
            diff[field]["added"] = [v for v in new if v not in (old or [])]
            diff[field]["removed"] = [v for v in (old or []) if v not in new]
    return diff
