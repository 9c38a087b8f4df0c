"""Loaded by pytest before Django (see pytest.ini): the test environment's defaults.

Tests run with DEBUG off, as production does, so they need a throwaway key.
"""

import os

# A local .env (bin/run writes DEBUG=1) must not switch the tests to development mode.
os.environ.setdefault("DEBUG", "0")
os.environ.setdefault("SECRET_KEY", "test-only-secret-key-not-for-production")
os.environ.setdefault("SECURE_SSL_REDIRECT", "0")
os.environ.setdefault("DUETIME_HTTP_ALLOW_PRIVATE", "0")
# The test handlers are registered Django tasks (jobs.registry), besides the demo and benchmark ones.
os.environ.setdefault("DUETIME_TASK_MODULES", "tests.handlers,examples.demo_handlers,bench.handlers")
