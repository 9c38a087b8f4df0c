"""Loaded by pytest before Django (see pytest.ini): the test environment's defaults.

Tests run with DEBUG off, as production does, so they need a throwaway key.
"""

import os

# A local .env (bin/run writes DEBUG=1) must not switch the tests to development mode.
os.environ.setdefault("DEBUG", "0")
os.environ.setdefault("SECRET_KEY", "test-only-secret-key-not-for-production")
os.environ.setdefault("SECURE_SSL_REDIRECT", "0")
os.environ.setdefault("DUETIME_HTTP_ALLOW_PRIVATE", "0")
# One database: a replica from the shell or a local .env would send the live server's reads to an alias
# no test set up. tests/acceptance/test_replica.py starts a primary and a replica of its own.
os.environ["DATABASE_REPLICA_URL"] = ""
# The test handlers are registered Django tasks (jobs.registry), besides the demo and benchmark ones.
os.environ.setdefault(
    "DUETIME_TASK_MODULES", "tests.handlers,examples.demo_handlers,bench.handlers,tests.tasks_backend.tasks"
)
# Django's Tasks framework: tasks declared @task(backend="duetime") become runs of tenant initech's jobs.
os.environ.setdefault("DUETIME_TASKS_TENANT", "initech")
# No canary jobs unless a test asks (tests/runs/test_canary.py): they would add runs to every real scheduler.
os.environ.setdefault("DUETIME_CANARY", "0")
# No move log (runs/move_log.py) unless a test asks: tests/runs/test_move_log.py captures it, and a test
# process or a real worker that moves thousands of runs would print a line for each.
os.environ.setdefault("DUETIME_MOVE_LOG", "off")
