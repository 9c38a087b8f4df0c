"""The Grafana dashboard (deploy/grafana/duetime.json): every query names metrics the code exports, and parses.

The exported names are collected from the code itself (prometheus_client's
registry, which holds every metric runs.metrics defines, and the database
gauges of runs.metrics.DatabaseCollector), never from a list kept by hand.
"""

import json
import re
import subprocess
from pathlib import Path

import pytest

from tests.deploy.test_alerts import promtool

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "deploy" / "grafana" / "duetime.json"
# What an exposition calls the samples of each type of family (prometheus_client's naming).
SUFFIXES = {
    "counter": ("_total", "_created"),
    "histogram": ("_bucket", "_count", "_sum", "_created"),
    "summary": ("_count", "_sum", "_created"),
    "info": ("_info",),
    "gaugehistogram": ("_bucket", "_gcount", "_gsum"),
}
NOT_METRICS = {"by", "without", "on", "ignoring", "group_left", "group_right", "and", "or", "unless", "offset", "bool"}
# Grafana's variables, as Grafana substitutes them before Prometheus sees a query.
VARIABLES = {"$__rate_interval": "1m", "$tenant": ".*", "$queue": ".*"}


def dashboard():
    return json.loads(DASHBOARD.read_text())


def panels(board):
    for panel in board["panels"]:
        yield panel
        yield from panel.get("panels", [])  # a collapsed row keeps its panels inside


def queries(board):
    """(where, PromQL) for every panel target and every query variable."""
    for panel in panels(board):
        for target in panel.get("targets", []):
            yield f"panel {panel['title']!r} {target['refId']}", target["expr"]
    for variable in board["templating"]["list"]:
        if variable["type"] == "query":
            # label_values(metric, label): Grafana asks Prometheus for the label's values on that metric.
            metric, _label = re.fullmatch(r"label_values\((\w+),\s*(\w+)\)", variable["query"]["query"]).groups()
            yield f"variable {variable['name']}", metric


def metric_names(expr):
    """The metric names a PromQL expression reads: identifiers that are not functions, keywords or labels."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)  # string literals (label values)
    text = re.sub(r"\{[^}]*\}", "", text)  # label matchers
    text = re.sub(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", text)  # label lists
    text = re.sub(r"\[[^\]]*\]", "", text)  # range selectors
    text = re.sub(r"\$\w+", "", text)  # Grafana variables left outside them
    names = set()
    for match in re.finditer(r"(?<![\w.:])[A-Za-z_:][\w:]*", text):
        if text[match.end() :].lstrip().startswith("(") or match.group() in NOT_METRICS:
            continue  # a function or an aggregation, or a keyword
        names.add(match.group())
    return names


def exported():
    """Every sample name this code can expose: the registry's families and the database gauges."""
    from prometheus_client import REGISTRY

    from runs import metrics
    from scheduler_project import metrics as web_metrics  # noqa: F401 - the web's metrics are runs.metrics'

    families = list(REGISTRY.collect()) + list(metrics.DatabaseCollector().collect())
    names = set()
    for family in families:
        names.add(family.name)
        names.update(family.name + suffix for suffix in SUFFIXES.get(family.type, ()))
    return names


def test_the_dashboard_is_a_grafana_dashboard_with_a_prometheus_data_source_chosen_on_import():
    board = dashboard()
    assert board["uid"] == "duetime-overview" and board["schemaVersion"] >= 36
    (source,) = [v for v in board["templating"]["list"] if v["type"] == "datasource"]
    assert source["query"] == "prometheus"
    for panel in panels(board):
        if panel["type"] != "row":
            assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, panel["title"]
    ids = [panel["id"] for panel in panels(board)]
    assert len(ids) == len(set(ids))


@pytest.mark.django_db
def test_every_query_names_only_metrics_the_code_exports():
    names = exported()
    assert "duetime_runs_claimed_total" in names and "duetime_canary_missed_in_a_row" in names
    for where, expr in queries(dashboard()):
        read = metric_names(expr)
        assert read, f"{where}: no metric in {expr!r}"
        assert read <= names, f"{where}: {sorted(read - names)} not exported"


@pytest.mark.django_db
def test_every_duetime_metric_is_on_the_dashboard():
    from prometheus_client import REGISTRY

    from runs import metrics

    families = list(REGISTRY.collect()) + list(metrics.DatabaseCollector().collect())
    ours = {family.name for family in families if family.name.startswith("duetime_")}
    read = set().union(*(metric_names(expr) for _where, expr in queries(dashboard())))
    shown = {re.sub(r"_(total|bucket|count|sum)$", "", name) for name in read}
    assert ours <= shown, sorted(ours - shown)


def test_the_metric_name_reader_tells_metrics_from_functions_labels_and_variables():
    expr = (
        'histogram_quantile(0.99, sum by (tenant, le) (rate(duetime_run_lateness_seconds_bucket{tenant=~"$tenant",'
        ' priority="critical"}[$__rate_interval]))) / on (tenant) group_left sum(up offset 10m) or vector(0)'
    )
    assert metric_names(expr) == {"duetime_run_lateness_seconds_bucket", "up"}


def test_every_query_parses(tmp_path):
    """promtool checks each query as a recording rule, with Grafana's variables substituted."""
    rules = []
    for i, (_where, expr) in enumerate(queries(dashboard())):
        for variable, value in VARIABLES.items():
            expr = expr.replace(variable, value)
        rules.append({"record": f"dashboard:query_{i}", "expr": expr})
    path = tmp_path / "dashboard-rules.yml"
    path.write_text(json.dumps({"groups": [{"name": "dashboard", "rules": rules}]}))  # JSON is YAML
    done = subprocess.run([promtool(), "check", "rules", str(path)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
