"""Paging portal lists of millions of rows without COUNT(*)."""

from django.core.paginator import Paginator
from django.utils.functional import cached_property

from scheduler_project.admin.counts import capped_count


class CappedPaginator(Paginator):
    """Counts at most COUNT_CAP + 1 rows (scheduler_project.admin.counts): past that, the
    list offers COUNT_CAP + 1 rows' worth of pages and no more."""

    @cached_property
    def count(self):
        counted = capped_count(self.object_list)
        return counted.count + 1 if counted.capped else counted.count
