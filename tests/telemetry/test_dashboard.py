"""The Grafana dashboard is a valid dashboard model and every query resolves against a
live ``/metrics`` after a mixed load (so the dashboard cannot rot)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import yaml

from gateway.referee import Referee
from tests.conftest import GatewayFactory
from tests.telemetry.load import SMALL_WINDOW, load_config, mixed_load
from tests.telemetry.promtext import Scrape, scrape

DASHBOARDS = Path(__file__).resolve().parents[2] / "dashboards"
DASHBOARD = DASHBOARDS / "gateway.json"
SELECTOR = re.compile(r"\b(gateway_[a-z_]+)\b(\{[^}]*\})?")
MATCHER = re.compile(r'(\w+)\s*(=~|!~|!=|=)\s*"([^"]*)"')
PANEL_TYPES = {"row", "timeseries", "stat", "gauge", "table", "barchart", "bargauge"}


def dashboard() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return data


def queries(dash: dict[str, Any]) -> list[str]:
    exprs = [t["expr"] for p in dash["panels"] for t in p.get("targets", [])]
    exprs += [v["query"]["query"] for v in dash["templating"]["list"] if v["type"] == "query"]
    return exprs


def selectors(expr: str) -> list[tuple[str, list[tuple[str, str, str]]]]:
    """(metric, matchers) for each gateway metric an expression names."""
    out = []
    for m in SELECTOR.finditer(expr):
        matchers = MATCHER.findall(m.group(2) or "")
        out.append((m.group(1), [(k, op, v.replace("$model", ".*")) for k, op, v in matchers]))
    return out


def resolves(scraped: Scrape, metric: str, matchers: list[tuple[str, str, str]]) -> bool:
    """True when some exported series of ``metric`` satisfies every matcher."""
    for name, labels, _ in scraped.samples:
        if name != metric:
            continue
        ok = True
        for key, op, want in matchers:
            got = labels.get(key, "")
            hit = re.fullmatch(want, got) is not None if op in ("=~", "!~") else got == want
            ok &= hit if op in ("=", "=~") else not hit
        if ok:
            return True
    return False


def test_dashboard_is_a_valid_grafana_model() -> None:
    dash = dashboard()
    assert dash["title"] and dash["uid"] and isinstance(dash["schemaVersion"], int)
    assert dash["schemaVersion"] >= 36
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids)) and all(isinstance(i, int) for i in ids)
    provisioned = yaml.safe_load(
        (DASHBOARDS / "provisioning/datasources/prometheus.yaml").read_text())
    uids = {d["uid"] for d in provisioned["datasources"] if d["type"] == "prometheus"}
    occupied: set[tuple[int, int]] = set()
    for p in dash["panels"]:
        assert p["type"] in PANEL_TYPES, p["type"]
        g = p["gridPos"]
        assert all(isinstance(g[k], int) for k in ("x", "y", "w", "h"))
        assert g["x"] >= 0 and g["x"] + g["w"] <= 24 and g["h"] > 0
        cells = {(g["y"] + dy, g["x"] + dx) for dy in range(g["h"]) for dx in range(g["w"])}
        assert not cells & occupied, f"panel {p['title']!r} overlaps another"
        occupied |= cells
        if p["type"] == "row":
            continue
        assert p["datasource"]["type"] == "prometheus" and p["datasource"]["uid"] in uids
        refs = [t["refId"] for t in p["targets"]]
        assert p["targets"] and len(refs) == len(set(refs))
        for t in p["targets"]:
            assert t["expr"].strip() and t["datasource"] == p["datasource"]
            assert t["expr"].count("(") == t["expr"].count(")")
    (var,) = dash["templating"]["list"]
    assert var["name"] == "model" and var["datasource"]["uid"] in uids
    scrape_cfg = yaml.safe_load((DASHBOARDS / "prometheus.yml").read_text())
    assert scrape_cfg["scrape_configs"][0]["metrics_path"] == "/metrics"
    provider = yaml.safe_load(
        (DASHBOARDS / "provisioning/dashboards/gateway.yaml").read_text())
    assert provider["providers"][0]["type"] == "file"


def test_the_dashboard_covers_the_overview() -> None:
    names = {name for e in queries(dashboard()) for name, _ in selectors(e)}
    for wanted in ("gateway_requests_total", "gateway_request_duration_seconds_bucket",
                   "gateway_added_latency_seconds_bucket", "gateway_repairs_total",
                   "gateway_upstream_attempts_total", "gateway_compactions_total",
                   "gateway_tokens_total", "gateway_deployment_circuit_state",
                   "gateway_context_level_total", "gateway_context_tokens_sum",
                   "gateway_context_used_ratio_bucket", "gateway_prompt_cache_tokens_total",
                   "gateway_prefix_turns_total"):
        assert wanted in names


async def test_every_dashboard_query_resolves_against_live_metrics(
    gateway_factory: GatewayFactory,
) -> None:
    async with Referee(rules="openai") as ref, \
            Referee(rules="openai", context_window=SMALL_WINDOW) as small:
        gw = await gateway_factory(load_config(ref, small))
        statuses = await mixed_load(gw.base_url, ref)
        scraped = await scrape(gw.root)
    assert statuses["5xx"] == 1 and statuses["4xx"] == 1 and statuses["2xx"] >= 6
    missing = [f"{metric}{matchers}" for e in queries(dashboard())
               for metric, matchers in selectors(e) if not resolves(scraped, metric, matchers)]
    assert not missing, f"dashboard queries with no series: {missing}"
