"""/v1/docs works without internet: Swagger UI comes from the installed package, pinned, never a CDN."""

import re

from django.contrib.staticfiles import finders


def test_it_serves_swagger_ui_from_the_package(client):
    page = client.get("/v1/docs").content.decode()

    sources = re.findall(r'(?:src|href)="([^"]+)"', page)
    assert any("swagger-ui-bundle.js" in src for src in sources)
    assert [src for src in sources if src.startswith(("http:", "https:", "//"))] == []


def test_it_finds_every_swagger_asset_among_the_static_files(client):
    page = client.get("/v1/docs").content.decode()

    assets = re.findall(r'(?:src|href)="/static/([^"]+)"', page)
    assert assets and all(finders.find(asset) for asset in assets)
