"""A new user's first hour, as the README tells it, in a real browser.

From a fresh copy of this repository in a temporary folder: `bin/run` exactly as
written (PORT set to a free port), the printed URL and login, every portal page
at 1,280 px wide without sideways scrolling and with every panel's header, caption and table as wide as the panel, each management command the README
names, the API docs with the network blocked, and Ctrl-C (SIGINT) to stop.

The copy is the repository's tracked files plus its untracked, not ignored ones
(what `git clone` would give once committed), so it also works on a work tree.
Its `.venv` is a symlink to the venv running this test: `bin/setup` then finds
the interpreter and the installed-requirements stamps and installs nothing (a
fresh install works the same way but takes ~30 s more). Screenshots of every
page go to test-artifacts/screenshots/ (git-ignored).
"""

import datetime as dt
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from django.conf import settings

from tests.browser.conftest import ARGS, CHROMIUM, NARROW_IN_PANEL, OVERFLOW, SHOTS, free_port, watch_csp
from tests.waiting import wait_until

pytestmark = pytest.mark.browser

RUNNING = re.compile(r"Duetime is running at (http://\S+/admin/)")
LOGIN = re.compile(r"login: (\S+) / (\S+)")
# The pages a user reaches from the portal's header and index; the job page is added once a job id is known.
PAGES = {
    "overview": "/admin/dashboard/",
    "all-tenants": "/admin/dashboard/tenants/",
    "lateness": "/admin/dashboard/lateness/",
    "heatmap": "/admin/dashboard/heatmap/",
    "jobs": "/admin/jobs/jobdefinition/",
    "runs": "/admin/runs/run/",
    "dead-letters": "/admin/dlq/deadletter/",
    "tokens": "/admin/jobs/apitoken/",
    "audit": "/admin/jobs/auditentry/",
    "tenants": "/admin/jobs/tenant/",
}


def fresh_copy(into):
    """The repository's tracked and untracked-but-not-ignored files, copied to `into`."""
    root = Path(settings.BASE_DIR)
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=root,
        check=True,
        capture_output=True,
    ).stdout.decode()
    for name in filter(None, listed.split("\0")):
        source = root / name
        if source.is_file():  # a tracked file deleted in the work tree is not there
            (into / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, into / name)
    (into / ".venv").symlink_to(Path(sys.prefix), target_is_directory=True)
    return into


def user_env(**extra):
    """A shell's environment: none of the test run's database or Django settings."""
    keep = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG", "LC_ALL", "TZ", "TMPDIR")}
    return {**keep, **extra}


class Output:
    """The lines a command prints, collected on a thread so the test can wait for one."""

    def __init__(self, stream):
        self.text = ""
        self._thread = threading.Thread(target=self._read, args=(stream,), daemon=True)
        self._thread.start()

    def _read(self, stream):
        for line in iter(stream.readline, ""):
            self.text += line

    def search(self, pattern):
        return pattern.search(self.text)


@pytest.fixture(scope="module")
def first_run(tmp_path_factory):
    """`bin/run` in a fresh copy; yields (clone, output, process). Stopped with SIGINT by the last test."""
    if not Path(CHROMIUM).exists():
        pytest.skip(f"no Chromium at {CHROMIUM} (apt-get install chromium chromium-driver)")
    clone = fresh_copy(tmp_path_factory.mktemp("first-hour") / "duetime")
    port = free_port()
    process = subprocess.Popen(
        ["bin/run"],
        cwd=clone,
        env=user_env(PORT=str(port)),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # its own process group, as a terminal's foreground job
    )
    output = Output(process.stdout)
    try:
        yield clone, output, process
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


@pytest.fixture(scope="module")
def portal_url(first_run):
    clone, output, process = first_run
    found = wait_until(
        lambda: output.search(RUNNING) or process.poll() is not None,
        timeout=90,
        interval=0.2,
        message="bin/run to print the URL",
    )
    assert found is not True and process.poll() is None, f"bin/run stopped:\n{output.text[-4000:]}"
    login = output.search(LOGIN)
    assert login, f"bin/run printed no login:\n{output.text}"
    return found.group(1), login.group(1), login.group(2)


@pytest.fixture(scope="module")
def offline_page(portal_url):
    """A 1,280 px wide browser page, logged in with the printed login, that can reach only this machine."""
    from playwright.sync_api import sync_playwright

    url, username, password = portal_url
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"  # Playwright's loop on this thread; no ORM used here
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
            context = browser.new_context(viewport={"width": 1280, "height": 900})
            blocked = []

            def local_only(route):
                if urlsplit(route.request.url).hostname in ("127.0.0.1", "localhost"):
                    route.continue_()
                else:
                    blocked.append(route.request.url)
                    route.abort()

            context.route("**/*", local_only)
            page = context.new_page()
            page.csp = []
            watch_csp(page, page.csp)  # Content-Security-Policy violations the browser reports
            page.set_default_timeout(15_000)
            page.goto(url)
            page.get_by_label("Username").fill(username)
            page.get_by_label("Password").fill(password)
            page.get_by_role("button", name="Log in").click()
            page.wait_for_url(url)
            page.blocked = blocked
            yield page
            browser.close()
    finally:
        os.environ.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)


def shot(page, name):
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / f"first-hour-{name}.png"), full_page=True)


def origin(url):
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


def test_every_portal_page_answers_fits_at_1280_px_and_its_panels_read_as_one_piece(offline_page, portal_url):
    page, base = offline_page, origin(portal_url[0])
    page.goto(base + PAGES["jobs"])
    page.locator("#result_list tbody th a").first.click()  # a job's change page links to its page
    job_link = page.locator("a[href*='/admin/dashboard/jobs/']").first.get_attribute("href")
    pages = {**PAGES, "job": job_link}
    problems = {}
    for name, path in pages.items():
        response = page.goto(base + path)
        page.wait_for_load_state("networkidle")
        shot(page, name)
        if response.status != 200:
            problems[name] = f"HTTP {response.status}"
        elif overflow := page.evaluate(OVERFLOW):
            problems[name] = overflow
        elif narrow := page.evaluate(NARROW_IN_PANEL):
            problems[f"{name} (a panel's header, caption or table narrower than the panel)"] = narrow
        if page.csp:
            problems[f"{name} (Content-Security-Policy)"], page.csp[:] = list(page.csp), []
    assert not problems, "\n".join(f"{name}: {found}" for name, found in problems.items())


def test_a_backfill_from_the_portal_says_done_once_done(offline_page, portal_url):
    page = offline_page
    page.goto(origin(portal_url[0]) + PAGES["jobs"])
    page.get_by_role("row").filter(has_text="demo.flaky-export").locator("input.action-select").check()
    page.locator("select[name=action]").select_option("backfill_jobs")
    page.get_by_role("button", name="Run").click()
    start = (dt.datetime.now(dt.UTC) - dt.timedelta(minutes=30)).replace(second=0, microsecond=0)
    page.get_by_label("Window start (UTC)").fill(f"{start:%Y-%m-%d %H:%M}")
    page.get_by_label("Window end (UTC)").fill(f"{start + dt.timedelta(minutes=10):%Y-%m-%d %H:%M}")
    page.get_by_role("button", name="Preview").first.click()
    page.get_by_role("button", name="Start backfill").click()
    page.locator("body[data-backfill=done]").wait_for()
    shot(page, "backfill-done")
    assert page.locator("#content h1").inner_text() == "Backfill done"
    assert "in progress" not in page.title()


def test_the_api_docs_render_without_the_internet(offline_page, portal_url):
    page = offline_page
    page.goto(origin(portal_url[0]) + "/v1/docs")
    page.locator(".swagger-ui .info .title").wait_for()
    shot(page, "api-docs")
    assert page.locator(".swagger-ui .opblock").count() > 0
    assert not [url for url in page.blocked if "/v1/" in url or "swagger" in url], page.blocked
    assert not page.csp, page.csp


def test_each_management_command_the_readme_names_works_after_bin_run(first_run, portal_url):
    clone = first_run[0]
    start = (dt.datetime.now(dt.UTC) - dt.timedelta(minutes=10)).replace(second=0, microsecond=0)
    commands = [
        ["create_tenant", "acme"],
        ["create_token", "--tenant", "acme", "--kind", "team"],
        ["create_token", "--tenant", "acme", "--kind", "worker", "--queues", "default"],
        ["setup_demo"],
        ["backfill", "demo.flaky-export", "--tenant", "demo", "--start", start.isoformat()]
        + ["--end", (start + dt.timedelta(minutes=6)).isoformat(), "--max-runs", "10"],
        ["bench", "--help"],
    ]
    for command in commands:
        done = subprocess.run(
            [".venv/bin/python", "manage.py", *command], cwd=clone, env=user_env(), capture_output=True, text=True
        )
        assert done.returncode == 0, f"{' '.join(command)}:\n{done.stdout}\n{done.stderr}"


def test_ctrl_c_stops_everything(first_run, portal_url):
    process, output = first_run[2], first_run[1]
    os.killpg(process.pid, signal.SIGINT)
    try:
        process.wait(timeout=45)  # the worker's grace to finish a running handler is 30 s
    except subprocess.TimeoutExpired:
        pytest.fail(f"bin/run still running 45 s after SIGINT:\n{output.text[-3000:]}")
    assert "Traceback" not in output.text, output.text[-4000:]
