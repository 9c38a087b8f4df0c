"""The one way a test waits for something: poll a condition until it holds or a deadline passes.

A fixed `time.sleep()` is either too short on a busy machine (the test flakes) or
too long on a quiet one (the suite crawls). A poll returns as soon as the
condition holds, so its deadline can be generous at no cost to a passing test.
"""

import asyncio
import time


def wait_until(predicate, *, timeout=60, interval=0.05, message="the condition"):
    """Call `predicate` until it returns something truthy, and return that value.

    Raises AssertionError naming `message` when `timeout` seconds pass first.
    The predicate is always called at least once, and once more at the deadline.
    """
    deadline = time.monotonic() + timeout
    while True:
        last_chance = time.monotonic() >= deadline
        value = predicate()
        if value:
            return value
        if last_chance:
            raise AssertionError(f"timed out after {timeout} s waiting for {message}")
        time.sleep(min(interval, max(0.0, deadline - time.monotonic())))


async def wait_until_async(predicate, *, timeout=60, interval=0.05, message="the condition"):
    """`wait_until` inside a coroutine: the event loop runs other tasks between the checks."""
    deadline = time.monotonic() + timeout
    while True:
        last_chance = time.monotonic() >= deadline
        value = predicate()
        if value:
            return value
        if last_chance:
            raise AssertionError(f"timed out after {timeout} s waiting for {message}")
        await asyncio.sleep(min(interval, max(0.0, deadline - time.monotonic())))
