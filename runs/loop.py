"""Graceful stop for the loop commands: SIGTERM/SIGINT finish the current step, then exit 0."""

import signal
import threading


class GracefulStop:
    def __init__(self):
        self.event = threading.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self._handle)

    def _handle(self, signum, frame):
        self.event.set()

    @property
    def requested(self):
        return self.event.is_set()

    def sleep(self, seconds):
        """Sleep, waking at once when a stop is requested."""
        self.event.wait(seconds)
