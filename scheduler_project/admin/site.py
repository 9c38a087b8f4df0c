"""The portal's AdminSite: "Duetime" branding, tenant-based access, and the apps' own pages.

Access: an active staff user who is a superuser or belongs to a tenant (see
scheduler_project.admin.scoping); what each one sees is narrowed there too.

The site imports no app. Each app's admin package registers its ModelAdmins
(`@admin.register(Model, site=site)`) and its custom pages (dashboards, job
page, schedule preview, heatmap) with `@site.register_view(route, name=...)`
when Django's admin autodiscovery imports it; the pages then hang off the
site's URLs (`admin:<name>`), behind its login, CSRF and look.
"""

import functools

from django.contrib import admin
from django.urls import path

from jobs import roles
from scheduler_project.admin import docs, login, permissions, scoping


class DuetimeAdminSite(admin.AdminSite):
    login_form = login.ThrottledLoginForm  # failed logins counted per user name and address (login.py)
    site_header = "Duetime"
    site_title = "Duetime"
    enable_nav_sidebar = False  # the header's portal nav links every page; the sidebar cost 280 px of list width
    index_title = "Operations"
    index_template = "portal/index.html"

    def __init__(self, name="admin"):
        super().__init__(name)
        self._views = {}  # URL name -> (route, view), in registration order

    def register_view(self, route, *, name):
        """Decorator: serve `view(request, ...)` at `route` under the site as `admin:<name>`, for portal users only.

        Raises ValueError if `name` is taken, so two apps never shadow each other's page.
        """

        def register(view):
            if name in self._views:
                raise ValueError(f"A portal page named {name!r} is already registered.")
            self._views[name] = (route, view)
            return view

        return register

    def has_permission(self, request):
        return scoping.is_operator(request.user)

    def get_urls(self):
        pages = [path(route, self.admin_view(view), name=name) for name, (route, view) in self._views.items()]
        # The project's docs/*.md, so a page can link to what explains it (scheduler_project/admin/docs.py).
        reading = path(
            "docs/<str:name>.md", self.admin_view(functools.partial(docs.doc_page, site=self)), name="portal_doc"
        )
        return [*pages, reading, *super().get_urls()]

    def each_context(self, request):
        context = super().each_context(request)
        mine = list(scoping.tenants(request.user).values_list("pk", "name")[:50])
        context["portal_tenants"] = [name for _, name in mine]
        # "acme (owner)": what the user may do where (a superuser's tenants carry no role: they may do everything).
        held = permissions.roles_of(request) if self.has_permission(request) else {}
        context["portal_tenant_roles"] = [f"{name} ({held[pk]})" if held else name for pk, name in mine]
        # Every page says which of the user's tenants (or of their queues) are paused (templates/portal/paused_banner.html),
        # with a Resume button where the user's role may resume.
        paused = scoping.paused_tenants(request.user) if self.has_permission(request) else []
        for entry in paused:
            entry["can_resume"] = permissions.allows(request, entry["tenant"].pk, roles.OPERATE)
        context["portal_paused"] = paused
        return context


site = DuetimeAdminSite(name="admin")
