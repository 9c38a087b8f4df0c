"""The portal's pages for maintenance windows and business-day calendars (docs/windows.md)."""

from calendars.admin import calendars, windows  # noqa: F401  (they register themselves)
