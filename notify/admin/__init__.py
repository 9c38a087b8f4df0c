"""Portal pages of owner notifications: importing the package registers them."""

from notify.admin import notifications  # noqa: F401
