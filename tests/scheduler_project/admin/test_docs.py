"""docs/*.md as portal pages: the heatmap's advice links to the section that explains the default jitter."""

from django.test import Client
from django.urls import reverse


def test_it_renders_a_docs_page_with_an_anchor_on_each_heading(as_alice):
    page = as_alice.get(reverse("admin:portal_doc", args=["schedules-as-code"])).content.decode()

    assert '<h2 id="jitter-by-default">Jitter by default</h2>' in page
    assert '<a href="api.md#the-job-body">' in page  # links between the docs resolve next to this page
    assert "<title>Schedules as code |" in page


def test_it_serves_only_pages_of_docs_and_only_behind_the_login(as_alice):
    assert as_alice.get("/admin/docs/nonexistent.md").status_code == 404
    assert as_alice.get("/admin/docs/..%2Fmanage.md").status_code == 404
    assert Client().get(reverse("admin:portal_doc", args=["dst"])).status_code == 302  # to the login page


def test_it_links_the_heatmaps_advice_to_the_default_jitter(as_alice, acme):
    page = as_alice.get(reverse("admin:portal_heatmap") + "?tenant=acme").content.decode()

    assert f'href="{reverse("admin:portal_doc", args=["schedules-as-code"])}#jitter-by-default"' in page
