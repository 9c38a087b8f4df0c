"""The portal site: each app registers its own pages on it, under the site's login, behind a
Content-Security-Policy that no page needs to loosen."""

import re
from pathlib import Path

import pytest
from django.conf import settings
from django.urls import reverse

from scheduler_project.admin.site import DuetimeAdminSite
from tests.fixtures.portal import portal_pages


def test_it_serves_the_pages_each_app_registered_at_their_usual_paths():
    assert reverse("admin:portal_overview") == "/admin/dashboard/"
    assert reverse("admin:portal_lateness") == "/admin/dashboard/lateness/"
    assert reverse("admin:portal_heatmap") == "/admin/dashboard/heatmap/"
    assert reverse("admin:portal_job", args=[7]) == "/admin/dashboard/jobs/7/"
    assert reverse("admin:portal_schedule_preview") == "/admin/schedule-preview/"


def test_it_sends_a_visitor_without_a_portal_login_to_the_login_page(client, db):
    response = client.get(reverse("admin:portal_overview"))
    assert response.status_code == 302
    assert response["Location"].startswith("/admin/login/")


def test_it_refuses_a_second_page_of_the_same_name():
    spare = DuetimeAdminSite(name="spare")

    @spare.register_view("first/", name="portal_page")
    def first(request):
        raise AssertionError("never called")

    with pytest.raises(ValueError, match="portal_page"):
        spare.register_view("second/", name="portal_page")(first)
    assert [pattern.name for pattern in spare.get_urls()][:1] == ["portal_page"]


# --- Content-Security-Policy: no inline script, event handler or style anywhere ---------------------------

INLINE = {
    "inline script": re.compile(r"<script(?![^>]*\bsrc=)[^>]*>", re.I),
    "event handler": re.compile(r"<[a-z][^>]*\son[a-z]+\s*=", re.I),
    "style attribute": re.compile(r"<[a-z][^>]*\sstyle\s*=", re.I),
    "style element": re.compile(r"<style[\s>]", re.I),
    "javascript: URL": re.compile(r"""(href|src|action)\s*=\s*["']?\s*javascript:""", re.I),
}


def inline_code(html):
    return {what: pattern.findall(html)[:3] for what, pattern in INLINE.items() if pattern.search(html)}


def test_the_policy_allows_scripts_and_styles_only_from_the_portals_own_files(client, db):
    policy = client.get(reverse("admin:login"))["Content-Security-Policy"]
    directives = dict(part.strip().split(" ", 1) for part in policy.split(";"))

    assert directives["script-src"] == "'self'" and directives["style-src"] == "'self'"
    assert directives["default-src"] == "'self'" and directives["object-src"] == "'none'"
    assert directives["frame-ancestors"] == "'none'" and directives["base-uri"] == "'none'"
    assert "unsafe" not in policy


def every_page(client, story):
    """Each page an owner reaches, with every button it shows: lists, forms, confirmations, the 403 page."""
    jobs = reverse("admin:jobs_jobdefinition_changelist")
    yield from (client.get(url) for url in portal_pages(story))
    for add in ("jobs_jobdefinition", "jobs_apitoken", "jobs_membership", "calendars_window", "calendars_calendar"):
        yield client.get(reverse(f"admin:{add}_add"))
    for name in ("pause_jobs", "backfill_jobs", "adopt_into_code"):
        ids = [story["export"].pk]
        yield client.post(jobs, {"action": name, "_selected_action": ids, "index": "0"})
    yield client.post(
        reverse("admin:jobs_tenant_changelist"),
        {"action": "resume_tenants", "_selected_action": [story["run"].tenant_id], "index": "0"},
    )
    yield client.get(reverse("admin:portal_doc", args=["security"]))


def test_no_portal_page_carries_inline_script_handlers_or_styles(client, alice, story):
    client.force_login(alice)
    type(story["run"].tenant).objects.filter(pk=story["run"].tenant_id).update(paused_at=story["run"].due_at)

    for response in every_page(client, story):
        html = response.content.decode()
        where = response.wsgi_request.get_full_path()
        assert response.status_code == 200, where
        assert "Content-Security-Policy" in response, where
        assert not inline_code(html), f"{where}: {inline_code(html)}"


def test_no_template_carries_inline_script_handlers_or_styles():
    templates = Path(settings.BASE_DIR) / "templates"
    found = {
        str(path.relative_to(templates)): inline_code(path.read_text())
        for path in templates.rglob("*.html")
        if inline_code(path.read_text())
    }
    assert not found


def test_the_api_docs_page_keeps_scripts_to_files_and_relaxes_only_styles(client, db):
    response = client.get("/v1/docs")
    script = client.get("/v1/docs?script=")

    assert response.status_code == 200 and not INLINE["inline script"].search(response.content.decode())
    policy = response["Content-Security-Policy"]
    assert "script-src 'self';" in policy and "style-src 'self' 'unsafe-inline'" in policy
    assert script.status_code == 200 and script["Content-Type"].startswith("application/javascript")
