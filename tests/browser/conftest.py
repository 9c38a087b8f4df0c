"""A real portal in a real browser: daphne, run_scheduler and run_worker in
subprocesses on the test database, driven by Playwright through Debian's
Chromium (/usr/bin/chromium; Playwright's own browser download is not used).

Each page a test visits is saved as a screenshot under
test-artifacts/screenshots/ (git-ignored), so a person can see what it saw.
Every visitor's browser console is watched for Content-Security-Policy
violations (an inline script, style or handler the policy blocked, a
connection it refused): a test that met one fails.
"""

import os
import re
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from django.conf import settings
from django.db import DatabaseError, connection, transaction

from tests.conftest import engine_env
from tests.waiting import wait_until

CHROMIUM = os.environ.get("DUETIME_CHROMIUM", "/usr/bin/chromium")
CONTENT_TYPES = {}  # (app label, model): the id the portal's web process saw when it started
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"]
SHOTS = Path(settings.BASE_DIR) / "test-artifacts" / "screenshots"
# What scrolls sideways: the page itself, or any box inside #content whose content is wider than it
# (the admin's result tables scroll inside `.results`). Text cut short on purpose (ellipsis) and form
# controls and text for screen readers only (.visually-hidden) do not count.
OVERFLOW = """() => {
  const doc = document.documentElement, found = [];
  if (doc.scrollWidth > doc.clientWidth) found.push(`the page: ${doc.scrollWidth} > ${doc.clientWidth}`);
  for (const el of document.querySelectorAll('#content *')) {
    const style = getComputedStyle(el);
    if (['INPUT', 'SELECT', 'TEXTAREA', 'OPTION'].includes(el.tagName) || style.textOverflow === 'ellipsis'
        || el.classList.contains('visually-hidden')) continue;
    const box = el.getBoundingClientRect();
    if (el.clientWidth > 0 && el.scrollWidth > el.clientWidth + 1 && style.overflowX !== 'visible')
      found.push(`${el.tagName}.${el.className}: ${el.scrollWidth} > ${el.clientWidth}`);
    else if (box.width > 0 && box.right > doc.clientWidth + 1)
      found.push(`${el.tagName}.${el.className} ends at ${Math.round(box.right)} px`);
  }
  return found.slice(0, 10);
}"""
# A panel reads as one piece: in every `.module` of the content, its header, each table's caption and each
# table span the panel's inner width (a table sized to its cells leaves its caption narrower than the
# header above it). Returns what is narrower, with both widths.
NARROW_IN_PANEL = """() => {
  const found = [];
  for (const panel of document.querySelectorAll('#content .module')) {
    const style = getComputedStyle(panel);
    const inner = panel.clientWidth - parseFloat(style.paddingLeft) - parseFloat(style.paddingRight);
    if (inner <= 0) continue;
    const label = panel.querySelector('h2')?.textContent.trim() || panel.id || panel.className;
    for (const part of panel.querySelectorAll(':scope > h2, :scope > table, :scope > table > caption')) {
      const width = part.getBoundingClientRect().width;
      if (width + 1 < inner) found.push(`${label}: ${part.tagName.toLowerCase()} ${Math.round(width)} px of ${Math.round(inner)}`);
    }
  }
  return found.slice(0, 10);
}"""


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _up(url):
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return response.status == 200
    except OSError:
        return False


@pytest.fixture(scope="module")
def portal(django_db_setup, django_db_blocker, tmp_path_factory):
    """The three processes (web, scheduler, worker) on the test database; yields the base URL."""
    if not Path(CHROMIUM).exists():
        pytest.skip(f"no Chromium at {CHROMIUM} (apt-get install chromium chromium-driver)")
    port = free_port()
    logs = tmp_path_factory.mktemp("portal-logs")
    with django_db_blocker.unblock():
        from django.contrib.contenttypes.models import ContentType

        CONTENT_TYPES.clear()
        CONTENT_TYPES.update(((a, m), pk) for a, m, pk in ContentType.objects.values_list("app_label", "model", "pk"))
        env = engine_env(
            DEBUG="1",
            SESSION_COOKIE_SECURE="0",
            CSRF_COOKIE_SECURE="0",
            SECURE_SSL_REDIRECT="0",
            DUETIME_LIVE_POLL_SECONDS="0.5",
            DUETIME_HTTP_ALLOW_PRIVATE="0",
            CONN_MAX_AGE="0",
        )
    commands = {
        "web": [
            sys.executable,
            "-m",
            "daphne",
            "-b",
            "127.0.0.1",
            "-p",
            str(port),
            "scheduler_project.asgi:application",
        ],
        "scheduler": [sys.executable, "manage.py", "run_scheduler", "--interval", "0.3"],
        "worker": [
            sys.executable,
            "manage.py",
            "run_worker",
            "--queues",
            "default",
            "--concurrency",
            "2",
            "--poll",
            "0.2",
        ],
    }
    procs = {
        name: subprocess.Popen(
            cmd, cwd=settings.BASE_DIR, env=env, stdout=open(logs / f"{name}.log", "w"), stderr=subprocess.STDOUT
        )
        for name, cmd in commands.items()
    }
    base = f"http://127.0.0.1:{port}"
    flush = connection.ops.execute_sql_flush
    connection.ops.execute_sql_flush = _flush_while_running(flush)
    try:
        wait_until(lambda: _up(f"{base}/admin/login/"), interval=0.2, message="daphne to serve the login page")
        yield base
    finally:
        connection.ops.execute_sql_flush = flush
        for proc in procs.values():
            proc.terminate()
        for proc in procs.values():
            try:
                proc.wait(timeout=40)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        for name in procs:
            text = (logs / f"{name}.log").read_text(errors="replace")
            if "Traceback" in text:
                print(f"--- {name} log ---\n{text[-4000:]}")


def _flush_while_running(flush, attempts=5):
    """The flush after each test, tried again if it fails: the scheduler and the worker keep running through it,
    and on PostgreSQL its TRUNCATE of every table can deadlock with one of their transactions (PostgreSQL then
    cancels one side, sometimes the TRUNCATE), which would fail this test and leave its rows to the next."""

    def flush_again_if_refused(sql_list):
        for attempt in range(1, attempts + 1):
            try:
                return flush(sql_list)
            except DatabaseError:
                if attempt == attempts:
                    raise
                time.sleep(0.2 * attempt)

    return flush_again_if_refused


@pytest.fixture(scope="module")
def browser(portal):
    from playwright.sync_api import sync_playwright

    # Playwright's sync API keeps an event loop on this thread; the test's ORM
    # calls are ordinary synchronous code all the same.
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    try:
        with sync_playwright() as p:
            chromium = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
            yield chromium
            chromium.close()
    finally:
        os.environ.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)


@pytest.fixture
def live_db(transactional_db, portal):
    """Committed data the portal's processes can see; SQLite's fencing counter restored after a flush,
    and the content types back at the ids the web process has cached (the flush after the previous
    test made them again under new ids, and the admin's change log would name one that is gone)."""
    _restore_content_type_ids()
    if connection.vendor == "sqlite":
        from runs.models import Counter

        Counter.objects.get_or_create(name="fencing_token", defaults={"value": 1_000_000})


def _restore_content_type_ids():
    from django.contrib.auth.models import Permission
    from django.contrib.contenttypes.models import ContentType

    with transaction.atomic():  # the foreign keys to the content types are checked at commit
        for app_label, model, pk in ContentType.objects.values_list("app_label", "model", "pk"):
            cached = CONTENT_TYPES.get((app_label, model))
            if cached is not None and cached != pk:
                ContentType.objects.filter(pk=pk).update(id=cached)
                Permission.objects.filter(content_type_id=pk).update(content_type_id=cached)
    ContentType.objects.clear_cache()


def watch_csp(page, found):
    """Append to `found` every Content-Security-Policy violation the browser reports on `page`."""
    page.on("console", lambda message: "Content Security Policy" in message.text and found.append(message.text))


class Visitor:
    """One browser session of one person; `shot()` saves what they see; `csp` the policy violations it met."""

    def __init__(self, page, base, test_name):
        self.page, self.base, self.test_name, self.shots = page, base, test_name, 0
        self.csp = []
        watch_csp(page, self.csp)

    def go(self, path):
        self.page.goto(self.base + path)
        self.shot(path)
        return self.page

    def shot(self, label):
        self.shots += 1
        name = re.sub(r"[^a-z0-9]+", "-", f"{self.test_name}-{self.shots:02d}-{label}".lower()).strip("-")
        SHOTS.mkdir(parents=True, exist_ok=True)
        self.page.screenshot(path=str(SHOTS / f"{name[:120]}.png"), full_page=True)

    def log_in(self, username, password):
        self.go("/admin/login/?next=/admin/")
        self.page.get_by_label("Username").fill(username)
        self.page.get_by_label("Password").fill(password)
        self.page.get_by_role("button", name="Log in").click()
        self.page.wait_for_url(self.base + "/admin/")
        self.shot("logged-in")


@pytest.fixture
def visit(browser, portal, request):
    contexts, visitors = [], []

    def open_as(username, password):
        context = browser.new_context(viewport={"width": 1280, "height": 900})
        contexts.append(context)
        visitor = Visitor(context.new_page(), portal, f"{request.node.name}-{username}")
        visitors.append(visitor)
        visitor.page.set_default_timeout(15_000)
        visitor.log_in(username, password)
        return visitor

    yield open_as
    for context in contexts:
        context.close()
    violations = [text for visitor in visitors for text in visitor.csp]
    assert not violations, "Content-Security-Policy violations:\n" + "\n".join(violations)
