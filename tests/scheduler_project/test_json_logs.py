"""The JSON lines formatter of LOGGING and where DUETIME_MOVE_LOG sends the move log."""

import json
import logging
import logging.config
import os
import subprocess
import sys
from pathlib import Path

from scheduler_project import json_logs
from scheduler_project.json_logs import JsonLines

ROOT = Path(__file__).resolve().parents[2]


def record(msg="claimed %d", args=(3,), **extra):
    made = logging.LogRecord("duetime.moves", logging.INFO, __file__, 1, msg, args, None)
    made.created = 1780304400.123456  # 2026-06-01 09:00:00.123 UTC
    made.__dict__.update(extra)
    return made


def test_it_writes_each_line_of_a_record_on_its_own_time_first():
    lines = ['"event":"leased","run":1,"job":"billing.close"', '"event":"leased","run":2,"job":"\\u00e9\\n"']

    text = JsonLines().format(record(lines=lines))

    first, second = text.splitlines()
    assert first == '{"ts":"2026-06-01T09:00:00.123Z","event":"leased","run":1,"job":"billing.close"}'
    assert json.loads(second) == {"ts": "2026-06-01T09:00:00.123Z", "event": "leased", "run": 2, "job": "é\n"}


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
        logger.info("1 moves", extra={"lines": ['"event":"leased","run":7']})
    finally:
        for handler in logger.handlers:
            handler.close()
        logger.handlers.clear()
    old, new = path.read_text().splitlines()
    assert old == '{"old":1}' and json.loads(new)["run"] == 7


# Two processes append batches of long lines to one file through the move log's handler and formatter.
APPENDER = """
import logging.config, sys
from scheduler_project import json_logs
logging.config.dictConfig({
    "version": 1,
    "formatters": {"json_lines": {"()": json_logs.JsonLines}},
    "handlers": {"moves": json_logs.handler(sys.argv[1])},
    "loggers": {"moves": {"handlers": ["moves"], "level": "INFO"}},
})
for i in range(200):
    line = '"by":"%s","run":%d,"pad":"%s"' % (sys.argv[2], i, "x" * 1000)
    logging.getLogger("moves").info("", extra={"lines": [line] * 100})
"""

# A Django process that logs one move: its move log goes where DUETIME_MOVE_LOG says.
ONE_MOVE = """
import django, logging
django.setup()
logging.getLogger("duetime.moves").info("1 moves", extra={"lines": ['"event":"leased","run":7']})
"""


def test_processes_appending_to_one_file_never_interleave_their_lines(tmp_path):
    path = tmp_path / "moves.jsonl"
    writers = [
        subprocess.Popen([sys.executable, "-c", APPENDER, str(path), name], cwd=ROOT) for name in ("alice", "bob")
    ]
    assert [writer.wait(timeout=60) for writer in writers] == [0, 0]
    lines = [json.loads(line) for line in path.read_text().splitlines()]  # each whole: none cut by the other
    assert len(lines) == 2 * 200 * 100 and {line["by"] for line in lines} == {"alice", "bob"}


def test_a_process_writes_the_move_log_to_stderr_as_json_lines_unless_it_is_off():
    def run(destination):
        env = {**os.environ, "DJANGO_SETTINGS_MODULE": "scheduler_project.settings", "DUETIME_MOVE_LOG": destination}
        done = subprocess.run([sys.executable, "-c", ONE_MOVE], capture_output=True, text=True, timeout=60, env=env)
        assert done.returncode == 0, done.stderr
        return done.stdout, done.stderr

    out, err = run("stderr")
    assert out == "" and json.loads(err) == {"ts": json.loads(err)["ts"], "event": "leased", "run": 7}
    assert run("off") == ("", "")
