"""The web's /metrics: Prometheus text with the database's gauges and the HTTP counters, only for its token's bearer
(with DEBUG off and no token, for nobody)."""

import pytest
from prometheus_client import REGISTRY
from prometheus_client.parser import text_string_to_metric_families

from runs import shards

pytestmark = pytest.mark.django_db


SCRAPER = {"Authorization": "Bearer scrape-secret"}


@pytest.fixture
def token(settings):
    settings.DUETIME_METRICS_TOKEN = "scrape-secret"


def families(response):
    return {f.name: f for f in text_string_to_metric_families(response.content.decode())}


def test_it_serves_the_database_gauges_and_the_engine_counters(client, token, acme, make_job, make_run):
    make_run(make_job(acme, "billing.close"))
    shards.ensure_rows()

    response = client.get("/metrics", headers=SCRAPER)

    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/plain")
    found = families(response)
    ready = {tuple(sorted(s.labels.items())): s.value for s in found["duetime_ready_runs"].samples}
    assert ready[(("priority", "default"), ("queue", "default"))] == 1
    for name in ("duetime_runs_claimed", "duetime_run_lateness_seconds", "duetime_scheduler_last_pass_age_seconds"):
        assert name in found


def test_it_counts_requests_by_route_pattern_and_status(client, token, acme):
    def served(route, status):
        labels = {"route": route, "method": "GET", "status": status}
        return REGISTRY.get_sample_value("duetime_http_requests_total", labels) or 0

    before_ok, before_missing = served("metrics", "200"), served("unmatched", "404")
    client.get("/metrics", headers=SCRAPER)
    client.get("/no/such/page/12345")
    assert served("metrics", "200") == before_ok + 1
    assert served("unmatched", "404") == before_missing + 1  # the raw path never becomes a label


def test_with_a_token_it_answers_only_its_bearer(client, settings):
    settings.DUETIME_METRICS_TOKEN = "scrape-secret"
    assert client.get("/metrics").status_code == 404
    assert client.get("/metrics", headers={"Authorization": "Bearer wrong"}).status_code == 404
    assert client.get("/metrics", headers={"Authorization": "Bearer scrape-secret"}).status_code == 200


def test_with_debug_off_and_no_token_it_answers_nobody_and_names_no_tenant(client, settings, acme, make_job):
    settings.DEBUG, settings.DUETIME_METRICS_TOKEN = False, ""
    make_job(acme, "billing.close")

    response = client.get("/metrics")

    assert response.status_code == 404
    assert b"acme" not in response.content and b"duetime_" not in response.content


def test_with_debug_on_and_no_token_it_is_open_for_a_development_install(client, settings):
    settings.DEBUG, settings.DUETIME_METRICS_TOKEN = True, ""
    assert client.get("/metrics").status_code == 200


def test_it_answers_only_get(client):
    assert client.post("/metrics").status_code == 405
