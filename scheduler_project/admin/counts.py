"""The portal's one capped count: how many rows, up to COUNT_CAP, so no page scans millions.

Lists, dashboards and action previews all count through `capped_count`; past
the cap they say "100,000+". Counting cap + 1 rows is what tells "exactly
100,000" from "more".
"""

from typing import NamedTuple

COUNT_CAP = 100_000


class CappedCount(NamedTuple):
    count: int  # at most COUNT_CAP
    capped: bool  # True when there are more than COUNT_CAP rows

    def __str__(self):
        return f"{self.count:,}{'+' if self.capped else ''}"


def capped_count(queryset):
    """The rows of `queryset`, counted up to COUNT_CAP: CappedCount(count, capped); prints as "1,234" or "100,000+"."""
    n = queryset.order_by()[: COUNT_CAP + 1].count()
    return CappedCount(min(n, COUNT_CAP), n > COUNT_CAP)
