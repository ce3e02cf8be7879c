"""The alert rules and the dashboard shipped under deploy/ name only metrics the service
defines, and Prometheus accepts the rules: `promtool check rules`, and their unit tests
(deploy/prometheus/alerts.test.yml: each alert fires on its series, for its own job)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import yaml

from app.telemetry import metrics
from tests.conftest import service_missing

ROOT = Path(__file__).resolve().parents[2]
ALERTS = ROOT / "deploy" / "prometheus" / "alerts.yml"
ALERT_TESTS = ROOT / "deploy" / "prometheus" / "alerts.test.yml"
DASHBOARD = ROOT / "deploy" / "grafana" / "chronoq.json"
NAME = re.compile(r"\bchronoq_[a-z0-9_]+")
# What a family's samples add to its name: counters, histograms, infos.
SUFFIXES = ("_total", "_bucket", "_count", "_sum", "_info")


def declared() -> set[str]:
    """Every metric name app/telemetry/ declares (instruments and scrape-time collectors),
    whichever of its modules does."""
    modules = Path(metrics.__file__).parent.glob("*.py")
    return {n for m in modules for n in re.findall(r'"(chronoq_[a-z0-9_]+)"', m.read_text())}


def defined(name: str) -> bool:
    names = declared()
    return name in names or any(
        name.endswith(suffix) and name.removesuffix(suffix) in names for suffix in SUFFIXES
    )


def alert_rules() -> list[dict[str, object]]:
    document = yaml.safe_load(ALERTS.read_text())
    return [rule for group in document["groups"] for rule in group["rules"]]


def promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        service_missing("promtool", "no promtool on PATH (Debian package prometheus)")
    assert found is not None
    return found


def test_every_metric_the_alerts_name_is_defined() -> None:
    named = {n for rule in alert_rules() for n in NAME.findall(str(rule["expr"]))}
    assert named, "the alerts read Chronoq metrics"
    assert {n for n in named if not defined(n)} == set()


def test_every_metric_the_dashboard_names_is_defined() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    named = {n for expr in exprs for n in NAME.findall(expr)}
    assert named
    assert {n for n in named if not defined(n)} == set()


def test_the_alerts_cover_backlog_dead_letters_claims_and_readiness() -> None:
    exprs = " ".join(str(rule["expr"]) for rule in alert_rules())
    for name in (
        "chronoq_backlog_oldest_age_seconds",
        "chronoq_occurrences_dead_lettered_total",
        "chronoq_loop_errors_total",
        "chronoq_ready",
    ):
        assert name in exprs
    for rule in alert_rules():
        # Installations sharing a Prometheus alert apart.
        assert "job" in str(rule["expr"]) or str(rule["expr"]).startswith("up "), rule["alert"]


def test_the_dashboard_selects_one_job_and_its_replicas() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    variables = {v["name"] for v in dashboard["templating"]["list"]}
    assert {"job", "instance"} <= variables
    for panel in dashboard["panels"]:
        for target in panel.get("targets", []):
            for selector in re.findall(r"\bchronoq_[a-z0-9_]+(\{[^}]*\})?", target["expr"]):
                assert 'job=~"$job"' in selector, (panel["title"], target["expr"])
                assert 'instance=~"$instance"' in selector, (panel["title"], target["expr"])


def test_promtool_accepts_the_alert_rules() -> None:
    checked = subprocess.run(
        [promtool(), "check", "rules", str(ALERTS)], capture_output=True, text=True, timeout=60
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_each_alert_fires_on_its_series_for_its_job() -> None:
    tested = subprocess.run(
        [promtool(), "test", "rules", ALERT_TESTS.name],
        cwd=ALERT_TESTS.parent,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert tested.returncode == 0, tested.stdout + tested.stderr
    fired = {
        rule["alertname"]
        for t in yaml.safe_load(ALERT_TESTS.read_text())["tests"]
        for rule in t["alert_rule_test"]
    }
    assert fired == {rule["alert"] for rule in alert_rules()}, "every alert has a test"
