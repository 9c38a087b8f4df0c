"""The lease long-poll must not hold the ASGI server's one thread for synchronous views."""

import asyncio
import threading

from asgiref.sync import iscoroutinefunction, sync_to_async
from django.urls import resolve

from scheduler_project.api.endpoints import offload


def test_it_serves_the_lease_as_an_async_view():
    assert iscoroutinefunction(resolve("/v1/lease").func)
    assert resolve("/v1/lease").func.cls.__name__ == "LeaseView"  # the schema still sees the DRF view


def test_it_lets_other_views_run_while_an_offloaded_view_waits():
    finished = []
    quick_ran = threading.Event()

    def long_poll(request):
        # Waits for the quick view: had the long poll held the shared thread, the quick one could never run.
        assert quick_ran.wait(timeout=30), "the quick view did not run while the long poll waited"
        finished.append("long poll")
        return "waited"

    def quick(request):
        finished.append("quick")
        quick_ran.set()
        return "quick"

    async def serve():
        # What Django's ASGI handler does: async views are awaited, sync ones go to the shared thread.
        return await asyncio.gather(offload(long_poll)(None), sync_to_async(quick, thread_sensitive=True)(None))

    assert asyncio.run(serve()) == ["waited", "quick"]
    assert finished == ["quick", "long poll"]
