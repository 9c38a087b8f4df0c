"""The portal site: each app registers its own pages on it, under the site's login."""

import pytest
from django.urls import reverse

from scheduler_project.admin.site import DuetimeAdminSite


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
