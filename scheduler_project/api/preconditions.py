"""Conditional requests (RFC 9110): the `If-Match` header read once for every resource that has an ETag."""

import re

from scheduler_project.api.problems import invalid


def if_match_tags(request, tag_pattern, example):
    """The `If-Match` entity tags (`*` kept as is), or None without the header.

    Each tag must match `tag_pattern` (the shape this resource's ETag has); anything else is a 400
    problem naming `example`, so a garbled header never reads as "no precondition".
    """
    raw = request.headers.get("If-Match")
    if raw is None:
        return None
    tags = [tag.strip() for tag in raw.split(",") if tag.strip()]
    if not tags or any(tag != "*" and not re.fullmatch(tag_pattern, tag) for tag in tags):
        detail = f'must be "*" or a list of entity tags as the ETag gives them, e.g. {example}'
        raise invalid([{"field": "If-Match", "pointer": "#", "detail": detail}])
    return tags
