"""The JSON lines formatter of LOGGING and where DUETIME_MOVE_LOG sends the move log."""

import json
import logging
import logging.config
import os
import subprocess
import sys

from scheduler_project import json_logs
from scheduler_project.json_logs import JsonLines


def record(msg="claimed %d", args=(3,), **extra):
    made = logging.LogRecord("duetime.moves", logging.INFO, __file__, 1, msg, args, None)
    made.created = 1780304400.123456  # 2026-06-01 09:00:00.123 UTC
    made.__dict__.update(extra)
    return made


def test_it_writes_each_move_of_a_record_as_its_own_line_time_first():
    moves = [{"event": "leased", "run": 1, "job": "billing.close"}, {"event": "leased", "run": 2, "job": "é"}]

    text = JsonLines().format(record(moves=moves))

    first, second = text.splitlines()
    assert first == '{"ts":"2026-06-01T09:00:00.123Z","event":"leased","run":1,"job":"billing.close"}'
    assert json.loads(second) == {"ts": "2026-06-01T09:00:00.123Z", "event": "leased", "run": 2, "job": "é"}


def test_any_other_record_is_one_line_with_its_level_logger_and_message():
    line = json.loads(JsonLines().format(record(msg="a note\non two lines", args=())))
    assert line == {
        "ts": "2026-06-01T09:00:00.123Z",
        "level": "INFO",
        "logger": "duetime.moves",
        "message": "a note\non two lines",
    }


def test_off_writes_nothing_and_a_file_is_appended_to_from_the_first_line(tmp_path):
    assert json_logs.handler("off") == {"class": "logging.NullHandler"}
    path = tmp_path / "moves.jsonl"
    path.write_text('{"old":1}\n')
    config = {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"json_lines": {"()": "scheduler_project.json_logs.JsonLines"}},
        "handlers": {"moves": json_logs.handler(str(path))},
        "loggers": {"test.moves.file": {"handlers": ["moves"], "level": "INFO", "propagate": False}},
    }
    logging.config.dictConfig(config)
    logger = logging.getLogger("test.moves.file")
    try:
        logger.info("1 moves", extra={"moves": [{"event": "leased", "run": 7}]})
    finally:
        for handler in logger.handlers:
            handler.close()
        logger.handlers.clear()
    old, new = path.read_text().splitlines()
    assert old == '{"old":1}' and json.loads(new)["run"] == 7


def test_a_process_writes_the_move_log_to_stderr_as_json_lines_unless_it_is_off():
    code = (
        "import django, logging; django.setup(); "
        "logging.getLogger('duetime.moves').info('1 moves', extra={'moves': [{'event': 'leased', 'run': 7}]})"
    )

    def run(destination):
        env = {**os.environ, "DJANGO_SETTINGS_MODULE": "scheduler_project.settings", "DUETIME_MOVE_LOG": destination}
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=env)
        assert done.returncode == 0, done.stderr
        return done.stdout, done.stderr

    out, err = run("stderr")
    assert out == "" and json.loads(err) == {"ts": json.loads(err)["ts"], "event": "leased", "run": 7}
    assert run("off") == ("", "")
