"""The Prometheus alert rules (deploy/prometheus/): valid, unit-tested by promtool, on exported metrics, with runbooks.

promtool comes with Debian's `prometheus` package (.ci/run installs it); CI
fails without it, a developer's machine skips the two promtool tests.
"""

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from django.utils.text import slugify

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "deploy" / "prometheus" / "alerts.yml"
RULE_TESTS = ROOT / "deploy" / "prometheus" / "alerts.test.yml"
OPERATIONS = ROOT / "docs" / "operations.md"


def promtool():
    found = shutil.which("promtool")
    if found is None:
        if os.environ.get("CI"):
            pytest.fail("promtool is missing: apt-get install prometheus (.ci/run does)")
        pytest.skip("promtool is not installed (apt-get install prometheus)")
    return found


def test_the_rules_are_valid():
    done = subprocess.run([promtool(), "check", "rules", str(RULES)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr


def test_every_alert_fires_and_stays_quiet_as_its_unit_tests_say():
    done = subprocess.run([promtool(), "test", "rules", str(RULE_TESTS)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr


def alerts():
    return re.findall(r"^\s+- alert: (\w+)", RULES.read_text(), re.M)


def test_every_alert_is_unit_tested():
    tested = set(re.findall(r"alertname: (\w+)", RULE_TESTS.read_text()))
    assert set(alerts()) <= tested


def test_every_runbook_link_names_a_section_of_the_operations_guide():
    anchors = {slugify(h) for h in re.findall(r"^#+ (.+)$", OPERATIONS.read_text(), re.M)}
    runbooks = re.findall(r'runbook: "docs/operations.md#([\w-]+)"', RULES.read_text())
    assert len(runbooks) == len(alerts())
    assert set(runbooks) <= anchors, set(runbooks) - anchors


@pytest.mark.django_db
def test_every_metric_the_rules_read_is_exported():
    from prometheus_client import REGISTRY

    from runs import metrics

    exported = {f.name for f in REGISTRY.collect()} | {f.name for f in metrics.DatabaseCollector().collect()}
    read = set(re.findall(r"\b(duetime_\w+)", RULES.read_text()))
    for name in read:
        assert re.sub(r"_(total|bucket|count|sum)$", "", name) in exported, name
