"""JSON lines for settings.LOGGING: the formatter of the `duetime.moves` log, and where DUETIME_MOVE_LOG sends it.

`JsonLines` renders a record that carries `lines` (the fields of each line as
JSON text, `"event":"leased","run":4812,...`, attached by runs.move_log as
`extra`) as one JSON object per line, the record's time first; any other
record as one line with its level, logger and message. One record per batch of
moves: the logging machinery (record, handler lock, write, flush) is paid once
per claim or completion batch.

This module imports no app: LOGGING is configured before the apps are loaded.
"""

import datetime as dt
import json
import logging

_encode = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, default=str).encode

# DUETIME_MOVE_LOG's words; anything else is a file path (checked by scheduler_project.checks).
DESTINATIONS = ("stderr", "stdout", "off")


def timestamp(created):
    """A record's time as ISO 8601 UTC with milliseconds: 2026-06-01T09:00:00.123Z."""
    return dt.datetime.fromtimestamp(created, dt.UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class JsonLines(logging.Formatter):
    """One JSON object per line: each of the record's `lines`, or the record itself."""

    def format(self, record):
        ts = timestamp(record.created)
        lines = getattr(record, "lines", None)
        if lines is not None:
            return "\n".join(f'{{"ts":"{ts}",{line}}}' for line in lines)
        line = {"ts": ts, "level": record.levelname, "logger": record.name, "message": record.getMessage()}
        if record.exc_info:
            line["exc"] = self.formatException(record.exc_info)
        return _encode(line)


def handler(destination):
    """The LOGGING handler for DUETIME_MOVE_LOG: stderr, stdout, off (nothing), or a file appended to.

    A file is a WatchedFileHandler (reopened when logrotate moves it) that opens
    on the first line, so a bad path is reported by the system check
    (duetime.E030) rather than by Django's start-up. Several processes may
    append to one file (run_all's children): each record, all its lines, is
    written at once to a file opened for appending, so their lines never interleave.
    """
    if destination == "off":
        return {"class": "logging.NullHandler"}
    if destination in ("stderr", "stdout"):
        return {"class": "logging.StreamHandler", "stream": f"ext://sys.{destination}", "formatter": "json_lines"}
    return {
        "class": "logging.handlers.WatchedFileHandler",
        "filename": destination,
        "delay": True,
        "encoding": "utf-8",
        "formatter": "json_lines",
    }
