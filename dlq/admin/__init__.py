"""Portal pages of the dead-letter queue: importing the package registers them."""

from dlq.admin import dead_letters  # noqa: F401
