"""deploy/'s monitoring: the Prometheus alert rules pass `promtool check rules` and their unit tests
(`promtool test rules`: each alert fires on the series that should raise it), and every metric the rules
and the Grafana dashboard name — with the labels they group and select by — is one a real worker exports."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import time
from pathlib import Path

import httpx
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from tests.helpers import WorkerProcess

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "deploy" / "prometheus" / "alerts.yml"
RULES_TESTS = ROOT / "deploy" / "prometheus" / "alerts.test.yml"
DASHBOARD = ROOT / "deploy" / "grafana" / "scheduler-dashboard.json"
#: labels Prometheus adds (the scrape's) or that a query makes
NOT_EXPORTED = {"job", "instance", "le"}
METRIC = re.compile(r"\b((?:scheduler|process|python)_[a-z_]+)\b")


def promtool() -> str:
    found = shutil.which("promtool")
    assert found, "promtool not found: install Debian's `prometheus` package (apt-get install prometheus)"
    return found


def expressions() -> list[str]:
    rules = yaml.safe_load(RULES.read_text())
    exprs = [rule["expr"] for group in rules["groups"] for rule in group["rules"]]
    dashboard = json.loads(DASHBOARD.read_text())
    exprs += [t["expr"] for panel in dashboard["panels"] for t in panel["targets"]]
    return exprs


def test_the_alert_rules_pass_promtool_and_their_unit_tests() -> None:
    check = subprocess.run(
        [promtool(), "check", "rules", str(RULES)], capture_output=True, text=True, timeout=60
    )
    assert check.returncode == 0, check.stdout + check.stderr
    tested = subprocess.run(
        [promtool(), "test", "rules", RULES_TESTS.name], cwd=RULES_TESTS.parent, capture_output=True, text=True,
        timeout=60,
    )  # fmt: skip
    assert tested.returncode == 0, tested.stdout + tested.stderr
    alerts = {
        rule["alert"] for group in yaml.safe_load(RULES.read_text())["groups"] for rule in group["rules"]
    }
    tests = yaml.safe_load(RULES_TESTS.read_text())["tests"]
    covered = {case["alertname"] for t in tests for case in t["alert_rule_test"] if case.get("exp_alerts")}
    assert alerts <= covered, f"alerts no test sees firing: {sorted(alerts - covered)}"


def exported(text: str) -> dict[str, set[str]]:
    """Metric (and sample) names a /metrics text exports -> the label names its samples carry."""
    names: dict[str, set[str]] = {}
    for family in text_string_to_metric_families(text):
        labels = {label for sample in family.samples for label in sample.labels}
        for name in {family.name, *(s.name for s in family.samples)}:
            names.setdefault(name, set()).update(labels)
        if family.type == "counter":
            names.setdefault(f"{family.name}_total", set()).update(labels)
    return names


def used_labels(expr: str, metric: str) -> set[str]:
    """Labels an expression selects `metric` by ({label=...})."""
    found: set[str] = set()
    for selector in re.findall(rf"\b{metric}\{{([^}}]*)\}}", expr):
        found |= set(re.findall(r"([a-zA-Z_]+)\s*(?:=~|!~|!=|=)", selector))
    return found


def test_the_rules_and_the_dashboard_name_only_metrics_a_worker_exports(worker: WorkerProcess) -> None:
    r = httpx.post(
        f"{worker.url}/schedules",
        json={"tenant": "acme", "name": "m", "topic": "acme-m", "enabled": True,
              "trigger": {"type": "frequency", "timeUnit": "SECONDS", "time": 1}},
        timeout=10,
    )  # fmt: skip
    assert r.status_code == 202, r.text
    names: dict[str, set[str]] = {}
    for _ in range(100):  # until the schedule has fired: the fire families carry their labels
        names = exported(httpx.get(f"{worker.url}/metrics", timeout=10).text)
        if names.get("scheduler_fires_total"):
            break
        time.sleep(0.2)
    exprs = expressions()
    assert len(exprs) >= 20, exprs
    unknown, bad_labels = set(), set()
    for expr in exprs:
        for metric in METRIC.findall(expr):
            if metric not in names:
                unknown.add(metric)
            elif names[metric]:  # what it exports with samples: the labels it selects by must be among them
                bad_labels |= {
                    (metric, label) for label in used_labels(expr, metric) - names[metric] - NOT_EXPORTED
                }
    assert not unknown, f"named by deploy/ but not exported by a worker: {sorted(unknown)}"
    assert not bad_labels, f"labels a worker does not export: {sorted(bad_labels)}"
