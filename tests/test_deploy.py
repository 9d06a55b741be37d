"""deploy/: the Helm chart, the plain manifests rendered from it and the compose file.

No container runtime or cluster here: the chart is rendered by Helm's own Go renderer
(``helm-python-sdk``), every object is validated against the Kubernetes API schemas
(``kubernetes-validate``, strict: an unknown or misspelt field fails), and the objects are
cross-checked for what a fleet needs (selectors that find the replicas and only them,
probes on the gateway's health routes, a grace period longer than the gateway's own, a
config the gateway accepts). The compose file is validated against the Compose
specification's schema (the one ``check-jsonschema`` ships) and checked the same way.
"""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import aiohttp
import kubernetes_validate
import pytest
import yaml

from gateway.config import parse_config
from gateway.server.app import create_app
from tests.conftest import serve_app

ROOT = Path(__file__).resolve().parents[1]
DEPLOY = ROOT / "deploy"
# The oldest Kubernetes release still widely run, and the newest the validator knows.
KUBERNETES = ("1.29.0", "1.37.0")
KEY = {"secrets": {"GATEWAY_KEY": "client-key-for-render-0001"}}


def _render_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("render_manifests",
                                                  DEPLOY / "render_manifests.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


RENDER = _render_module()


def render(values: dict[str, Any]) -> list[dict[str, Any]]:
    docs: list[dict[str, Any]] = RENDER.render(values)
    return docs


def by_kind(docs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] == kind]


def one(docs: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    (found,) = by_kind(docs, kind)
    return found


def validate(docs: list[dict[str, Any]]) -> None:
    """Every object against the Kubernetes schemas; the ServiceMonitor (a CRD the validator
    has no schema for) by the fields the Prometheus Operator reads."""
    for doc in docs:
        if doc["kind"] == "ServiceMonitor":
            assert doc["apiVersion"] == "monitoring.coreos.com/v1"
            assert set(doc["spec"]) == {"selector", "endpoints"}
            continue
        for version in KUBERNETES:
            kubernetes_validate.validate(doc, version, strict=True)


VALUE_SETS = {
    "defaults": KEY,
    "everything": {**KEY, "ingress": {"enabled": True, "tls": [
        {"secretName": "gw-tls", "hosts": ["gateway.example.com"]}]},
        "serviceMonitor": {"enabled": True, "labels": {"release": "prometheus"}},
        "env": {"OPENAI_API_BASE": "https://api.openai.com/v1"}},
    "cookie-affinity": {**KEY, "ingress": {"enabled": True, "affinity": {"mode": "cookie"}}},
    "external-redis": {**KEY, "redis": {"enabled": False,
                                        "externalUrl": "rediss://redis.internal:6380/0"}},
    "redis-url-secret": {"existingSecret": "my-keys", "redis": {
        "enabled": False, "externalUrlSecret": {"name": "redis-url", "key": "url"}}},
    "fixed-replicas": {**KEY, "autoscaling": {"enabled": False}, "replicaCount": 3,
                       "podDisruptionBudget": {"enabled": False}},
}


@pytest.mark.parametrize("name", sorted(VALUE_SETS))
def test_the_chart_renders_valid_kubernetes_objects(name: str) -> None:
    docs = render(VALUE_SETS[name])
    validate(docs)
    deployment = one(docs, "Deployment")
    pod = deployment["spec"]["template"]
    # The Service, the disruption budget and the ServiceMonitor find the replicas, and only
    # them (the chart's Redis pod carries the same release labels).
    pod_labels = pod["metadata"]["labels"]
    redis_pods = [s["spec"]["template"]["metadata"]["labels"]
                  for s in by_kind(docs, "StatefulSet")]
    services = {s["metadata"]["name"]: s for s in by_kind(docs, "Service")}
    gateway_service = services[deployment["metadata"]["name"]]
    selectors = [gateway_service["spec"]["selector"],
                 deployment["spec"]["selector"]["matchLabels"],
                 *(p["spec"]["selector"]["matchLabels"]
                   for p in by_kind(docs, "PodDisruptionBudget"))]
    for selector in selectors:
        assert selector.items() <= pod_labels.items()
        assert all(not selector.items() <= labels.items() for labels in redis_pods)
    for monitor in by_kind(docs, "ServiceMonitor"):
        assert monitor["spec"]["selector"]["matchLabels"].items() \
            <= gateway_service["metadata"]["labels"].items()
        assert monitor["spec"]["endpoints"][0] == {"port": "http", "path": "/metrics",
                                                   "interval": "15s"}
    for hpa in by_kind(docs, "HorizontalPodAutoscaler"):
        assert hpa["spec"]["scaleTargetRef"]["name"] == deployment["metadata"]["name"]
        assert "replicas" not in deployment["spec"]  # the autoscaler owns the count
    for ingress in by_kind(docs, "Ingress"):
        backend = ingress["spec"]["rules"][0]["http"]["paths"][0]["backend"]["service"]
        assert backend == {"name": gateway_service["metadata"]["name"],
                           "port": {"name": "http"}}
    # The pod reads the config the ConfigMap holds, and keys from the Secret.
    container = pod["spec"]["containers"][0]
    config_map = one(docs, "ConfigMap")
    mounted = {v["name"]: v for v in pod["spec"]["volumes"]}["config"]
    assert mounted["configMap"]["name"] == config_map["metadata"]["name"]
    assert container["args"] == ["gateway", "serve", "--config", "/etc/gateway/gateway.yaml"]
    secret_name = container["envFrom"][0]["secretRef"]["name"]
    secrets = by_kind(docs, "Secret")
    if VALUE_SETS[name].get("existingSecret"):
        assert secrets == [] and secret_name == VALUE_SETS[name]["existingSecret"]
    else:
        assert [s["metadata"]["name"] for s in secrets] == [secret_name]
        assert secrets[0]["stringData"]["GATEWAY_KEY"] == "client-key-for-render-0001"
        assert "client-key-for-render-0001" not in yaml.safe_dump(config_map)


def test_probes_grace_and_config_match_the_gateway() -> None:
    docs = render({**KEY, "shutdownGrace": 30, "preStopSeconds": 7})
    pod = one(docs, "Deployment")["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert container["livenessProbe"]["httpGet"]["path"] == "/health/liveness"
    assert container["readinessProbe"]["httpGet"]["path"] == "/health/readiness"
    assert container["startupProbe"]["httpGet"]["path"] == "/health/liveness"
    assert container["lifecycle"]["preStop"]["exec"]["command"] == ["sleep", "7"]
    # Kubernetes kills the pod only after the preStop sleep and the gateway's own grace.
    assert pod["terminationGracePeriodSeconds"] > 30 + 7
    raw = yaml.safe_load(one(docs, "ConfigMap")["data"]["gateway.yaml"])
    env = {"GATEWAY_KEY": "k" * 24, "OPENAI_API_KEY": "sk-x",
           "REDIS_URL": container["env"][0]["value"]}
    with pytest.MonkeyPatch.context() as patch:
        for name, value in env.items():
            patch.setenv(name, value)
        config = parse_config(raw)
    assert config.gateway.shutdown_grace == 30
    assert config.gateway.host == "0.0.0.0" and config.gateway.port == 4000
    assert config.sessions.redis_url == "redis://llm-repair-gateway-redis:6379/0"
    statefulset = one(docs, "StatefulSet")
    args = statefulset["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[args.index("--appendonly") + 1] == "yes"  # Redis persists to its volume
    assert statefulset["spec"]["volumeClaimTemplates"][0]["metadata"]["name"] == "data"


async def test_the_probed_routes_answer_without_a_client_key() -> None:
    """The kubelet sends no key: the probe paths of the chart answer 200 on a gateway
    that requires one."""
    docs = render(KEY)
    container = one(docs, "Deployment")["spec"]["template"]["spec"]["containers"][0]
    paths = {container[p]["httpGet"]["path"]
             for p in ("startupProbe", "livenessProbe", "readinessProbe")}
    config = parse_config({"gateway": {"api_keys": ["client-key-0001"]},
                           "model_list": [{"model_name": "m", "litellm_params": {
                               "model": "openai/m", "api_base": "http://127.0.0.1:9/v1"}}]})
    runner, root = await serve_app(create_app(config))
    try:
        async with aiohttp.ClientSession() as session:
            for path in sorted(paths):
                async with session.get(root + path) as response:
                    assert response.status == 200, path
    finally:
        await runner.cleanup()


@pytest.mark.parametrize(("values", "named"), [
    ({}, "secrets.GATEWAY_KEY"),
    ({**KEY, "redis": {"enabled": False}}, "redis.externalUrl"),
])
def test_a_chart_missing_what_the_fleet_needs_does_not_render(
        values: dict[str, Any], named: str) -> None:
    with pytest.raises(Exception, match=re.escape(named)):
        render(values)


def test_the_ingress_keeps_a_session_on_one_replica() -> None:
    header = one(render({**KEY, "ingress": {"enabled": True}}), "Ingress")
    annotations = header["metadata"]["annotations"]
    assert "$http_x_session_id" in annotations["nginx.ingress.kubernetes.io/upstream-hash-by"]
    assert annotations["nginx.ingress.kubernetes.io/proxy-buffering"] == "off"  # streams
    cookie = one(render({**KEY, "ingress": {"enabled": True, "affinity": {"mode": "cookie"}}}),
                 "Ingress")["metadata"]["annotations"]
    assert cookie["nginx.ingress.kubernetes.io/affinity"] == "cookie"
    assert "nginx.ingress.kubernetes.io/upstream-hash-by" not in cookie


def test_the_plain_manifests_are_the_rendered_chart() -> None:
    """deploy/kubernetes/ is what `make manifests` renders now (edit the chart, re-render)."""
    for name, text in RENDER.manifests().items():
        assert (DEPLOY / "kubernetes" / name).read_text() == text, name
    docs = [d for name in ("llm-repair-gateway.yaml", "servicemonitor.yaml")
            for d in yaml.safe_load_all((DEPLOY / "kubernetes" / name).read_text()) if d]
    validate(docs)
    assert by_kind(docs, "Secret") == []  # keys are never written into a file


# --- compose ----------------------------------------------------------------------------

def test_the_compose_file_is_valid_and_runs_a_fleet() -> None:
    path = DEPLOY / "compose.yaml"
    checker = Path(sys.executable).parent / "check-jsonschema"
    done = subprocess.run([str(checker), "--builtin-schema", "vendor.compose-spec", str(path)],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    compose = yaml.safe_load(path.read_text())
    services = compose["services"]
    replicas = sorted(n for n in services if n.startswith("gateway-"))
    assert len(replicas) == 2
    for name in replicas:
        service = services[name]
        assert service["environment"]["REDIS_URL"] == "redis://redis:6379/0"
        assert service["depends_on"]["redis"]["condition"] == "service_healthy"
        assert "/health/readiness" in " ".join(service["healthcheck"]["test"])
    # Every file the services mount is in the repository.
    for service in services.values():
        for volume in service.get("volumes", []):
            source = volume.split(":", 1)[0]
            if source.startswith("."):
                assert (DEPLOY / source).resolve().exists(), source
    # The replicas' config is one the gateway accepts, sharing sessions through Redis, and
    # compose waits longer than the gateway's own grace before killing a replica.
    raw = yaml.safe_load((DEPLOY / "compose" / "gateway.yaml").read_text())
    env = {"GATEWAY_KEY": "k" * 24, "OPENAI_API_KEY": "sk-x",
           "UPSTREAM_API_BASE": "http://referee:4001/v1", "REDIS_URL": "redis://redis:6379/0"}
    with pytest.MonkeyPatch.context() as patch:
        for name, value in env.items():
            patch.setenv(name, value)
        config = parse_config(raw)
    assert config.sessions.redis_url == "redis://redis:6379/0"
    grace = int(services[replicas[0]]["stop_grace_period"].rstrip("s"))
    assert grace > config.gateway.shutdown_grace
    assert config.gateway.telemetry.endpoint.startswith("http://otel-collector:4318/")
    # Redis persists; the balancer hashes on the session header over both replicas;
    # Prometheus scrapes both; Grafana's datasource is the one the dashboard names.
    assert "--appendonly" in services["redis"]["command"]
    assert any(v.endswith(":/data") for v in services["redis"]["volumes"])
    nginx = (DEPLOY / "compose" / "nginx.conf").read_text()
    assert "hash $affinity_key consistent" in nginx and "$http_x_session_id" in nginx
    assert sorted(re.findall(r"server (gateway-\d):4000", nginx)) == replicas
    scrape = yaml.safe_load((DEPLOY / "compose" / "prometheus.yml").read_text())
    assert sorted(t.split(":")[0] for t in scrape["scrape_configs"][0]["static_configs"][0]
                  ["targets"]) == replicas
    datasource = yaml.safe_load((DEPLOY / "compose" / "grafana-datasource.yaml").read_text())
    assert datasource["datasources"][0]["uid"] in (ROOT / "dashboards" / "gateway.json"
                                                   ).read_text()
    collector = yaml.safe_load((DEPLOY / "compose" / "otel-collector.yaml").read_text())
    assert collector["receivers"]["otlp"]["protocols"]["http"]["endpoint"].endswith(":4318")
