"""An outsider's look at deploy/: what an operator relies on when the chart runs the fleet
(resource limits, probes on the gateway's health routes, keys only through Secrets, non-root
pods, a disruption budget that lets a node drain, an autoscaler the pods can feed), every
rendering validated offline against the Kubernetes schemas with the validator
tests/test_deploy.py uses, and the rendered config started as a real gateway."""

from __future__ import annotations

import re
from typing import Any

import aiohttp
import pytest
import yaml

from gateway.config import ConfigError, parse_config
from gateway.server.app import create_app
from tests.conftest import serve_app
from tests.test_deploy import DEPLOY, KEY, by_kind, one, render, validate

PROVIDER_KEY = "sk-live-provider-key-0123456789abcdef"
REDIS_PASSWORD = "redis-pass-0123456789"


def gateway_container(docs: list[dict[str, Any]]) -> dict[str, Any]:
    container: dict[str, Any] = one(docs, "Deployment")["spec"]["template"]["spec"][
        "containers"][0]
    return container


def plain_manifests() -> list[dict[str, Any]]:
    return [d for name in ("llm-repair-gateway.yaml", "servicemonitor.yaml")
            for d in yaml.safe_load_all((DEPLOY / "kubernetes" / name).read_text()) if d]


def rendered_config(docs: list[dict[str, Any]]) -> dict[str, Any]:
    raw: dict[str, Any] = yaml.safe_load(one(docs, "ConfigMap")["data"]["gateway.yaml"])
    return raw


def test_every_container_has_requests_and_a_memory_limit() -> None:
    for docs in (render(KEY), plain_manifests()):
        pods = [w["spec"]["template"]["spec"] for w in docs
                if w["kind"] in ("Deployment", "StatefulSet")]
        assert len(pods) == 2  # the gateway and its Redis
        for pod in pods:
            for container in pod["containers"]:
                resources = container["resources"]
                assert {"cpu", "memory"} <= set(resources["requests"]), container["name"]
                assert "memory" in resources["limits"], container["name"]


def test_every_pod_runs_as_non_root_without_privilege_escalation() -> None:
    for docs in (render(KEY), plain_manifests()):
        for workload in docs:
            if workload["kind"] not in ("Deployment", "StatefulSet"):
                continue
            pod = workload["spec"]["template"]["spec"]
            assert pod["securityContext"]["runAsNonRoot"] is True
            assert pod["securityContext"]["runAsUser"] > 0
            for container in pod["containers"]:
                context = container["securityContext"]
                assert context["allowPrivilegeEscalation"] is False
                assert context["capabilities"]["drop"] == ["ALL"]
                assert not context.get("privileged", False)


def test_the_image_user_is_the_one_the_pod_runs_as() -> None:
    """runAsNonRoot with the Dockerfile's own user: the uid the chart sets is the one the
    image made (its home and data directories belong to it)."""
    dockerfile = (DEPLOY.parent / "Dockerfile").read_text()
    uid = int(re.search(r"--uid (\d+)", dockerfile).group(1))  # type: ignore[union-attr]
    pod = one(render(KEY), "Deployment")["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsUser"] == uid
    assert pod["securityContext"]["fsGroup"] == uid


def test_probes_are_on_the_gateway_health_routes_and_bounded() -> None:
    container = gateway_container(render(KEY))
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        spec = container[probe]
        assert spec["httpGet"]["port"] == "http"
        assert spec["httpGet"]["path"] in ("/health/liveness", "/health/readiness")
        assert spec.get("timeoutSeconds", 1) >= 1
        assert spec["failureThreshold"] >= 1
    # The readiness probe waits for the session store's check (at most 2 seconds) and no
    # longer: its own timeout is longer than that check.
    assert container["readinessProbe"]["timeoutSeconds"] > 2
    # Startup gets far longer than a probe period before liveness may restart the pod.
    startup = container["startupProbe"]
    assert startup["periodSeconds"] * startup["failureThreshold"] >= 60


def test_provider_keys_reach_the_pods_only_through_the_secret() -> None:
    docs = render({"secrets": {"GATEWAY_KEY": "client-key-for-render-0001",
                               "OPENAI_API_KEY": PROVIDER_KEY}})
    validate(docs)
    holders = [d["kind"] for d in docs if PROVIDER_KEY in yaml.safe_dump(d)]
    assert holders == ["Secret"]
    container = gateway_container(docs)
    assert container["envFrom"] == [{"secretRef": {"name": one(docs, "Secret")["metadata"][
        "name"]}}]
    config = rendered_config(docs)
    assert config["model_list"][0]["litellm_params"]["api_key"] == \
        "os.environ/OPENAI_API_KEY"


def test_the_plain_manifests_hold_no_literal_key() -> None:
    text = "\n".join((DEPLOY / "kubernetes" / n).read_text()
                     for n in ("llm-repair-gateway.yaml", "servicemonitor.yaml"))
    assert not re.search(r"sk-[A-Za-z0-9]{8,}", text)
    for doc in plain_manifests():
        if doc["kind"] != "Deployment":
            continue
        for env in gateway_container([doc]).get("env", []):
            assert "KEY" not in env["name"] or "valueFrom" in env


def test_a_redis_url_secret_is_read_through_secret_key_ref() -> None:
    docs = render({**KEY, "redis": {"enabled": False, "externalUrlSecret": {
        "name": "redis-url", "key": "url"}}})
    validate(docs)
    env = {e["name"]: e for e in gateway_container(docs)["env"]}
    assert env["REDIS_URL"] == {"name": "REDIS_URL", "valueFrom": {"secretKeyRef": {
        "name": "redis-url", "key": "url"}}}
    assert by_kind(docs, "StatefulSet") == []


def test_a_redis_url_with_a_password_in_plain_values_does_not_render() -> None:
    """A password in ``redis.externalUrl`` would be written into the Deployment for anyone
    who can read it: the chart refuses, naming the value to use instead."""
    with pytest.raises(Exception, match=re.escape("redis.externalUrlSecret")):
        render({**KEY, "redis": {"enabled": False, "externalUrl":
                                 f"rediss://:{REDIS_PASSWORD}@redis.internal:6380/0"}})
    # Without a password the URL is fine where it is.
    docs = render({**KEY, "redis": {"enabled": False,
                                    "externalUrl": "rediss://redis.internal:6380/0"}})
    assert REDIS_PASSWORD not in yaml.safe_dump_all(docs)


def test_a_literal_provider_key_in_the_config_does_not_render() -> None:
    """The config goes into a ConfigMap (readable by far more than Secrets are): a key
    written there instead of ``os.environ/NAME`` is refused."""
    config = {"model_list": [{"model_name": "m", "litellm_params": {
        "model": "openai/m", "api_key": PROVIDER_KEY}}]}
    with pytest.raises(Exception, match=r"model_list\[0\]\.litellm_params\.api_key"):
        render({**KEY, "config": config})
    with pytest.raises(Exception, match="redis_password"):
        render({**KEY, "config": {"router_settings": {"redis_password": REDIS_PASSWORD}}})
    # References render, and so does a setting that only looks like one (max_tokens).
    fine = {"model_list": [{"model_name": "m", "litellm_params": {
        "model": "openai/m", "api_key": "os.environ/OPENAI_API_KEY", "max_tokens": 5}}],
        "router_settings": {"redis_password": "os.environ/REDIS_PASSWORD"}}
    validate(render({**KEY, "config": fine}))


def test_the_disruption_budget_lets_a_node_drain() -> None:
    """With autoscaling the budget keeps one replica up out of at least two; with one fixed
    replica a budget of minAvailable 1 would block every drain, so none is rendered."""
    docs = render(KEY)
    pdb = one(docs, "PodDisruptionBudget")
    hpa = one(docs, "HorizontalPodAutoscaler")
    assert pdb["spec"]["minAvailable"] < hpa["spec"]["minReplicas"]
    single = render({**KEY, "autoscaling": {"enabled": False}, "replicaCount": 1})
    validate(single)
    assert by_kind(single, "PodDisruptionBudget") == []
    assert one(single, "Deployment")["spec"]["replicas"] == 1
    three = render({**KEY, "autoscaling": {"enabled": False}, "replicaCount": 3})
    assert one(three, "PodDisruptionBudget")["spec"]["minAvailable"] < 3


def test_the_autoscaler_has_the_cpu_requests_it_scales_on() -> None:
    docs = render(KEY)
    hpa = one(docs, "HorizontalPodAutoscaler")
    assert hpa["apiVersion"] == "autoscaling/v2"
    metric = hpa["spec"]["metrics"][0]["resource"]
    assert metric["name"] == "cpu" and metric["target"]["type"] == "Utilization"
    assert "cpu" in gateway_container(docs)["resources"]["requests"]
    assert 2 <= hpa["spec"]["minReplicas"] <= hpa["spec"]["maxReplicas"]


def test_a_rolling_update_never_drops_a_serving_replica() -> None:
    for docs in (render(KEY), plain_manifests()):
        strategy = one(docs, "Deployment")["spec"]["strategy"]
        assert strategy["type"] == "RollingUpdate"
        assert strategy["rollingUpdate"]["maxUnavailable"] == 0
        assert strategy["rollingUpdate"]["maxSurge"] >= 1


def test_a_config_change_rolls_the_pods() -> None:
    def checksum(values: dict[str, Any]) -> str:
        pod = one(render(values), "Deployment")["spec"]["template"]
        value: str = pod["metadata"]["annotations"]["checksum/config"]
        return value

    base = checksum(KEY)
    assert base == checksum(KEY)
    changed = {**KEY, "config": {"model_list": [{"model_name": "other", "litellm_params": {
        "model": "openai/other", "api_key": "os.environ/OPENAI_API_KEY"}}]}}
    assert checksum(changed) != base


def test_the_chart_overrides_what_would_break_the_fleet() -> None:
    """A config asking to listen on loopback, with no client keys and SQLite sessions is
    rendered with what the fleet needs instead."""
    config = {"gateway": {"host": "127.0.0.1", "port": 8080, "api_keys": []},
              "sessions": {"data_dir": "/tmp/x"},
              "model_list": [{"model_name": "m", "litellm_params": {
                  "model": "openai/m", "api_key": "os.environ/OPENAI_API_KEY"}}]}
    docs = render({**KEY, "config": config})
    validate(docs)
    raw = rendered_config(docs)
    assert raw["gateway"]["host"] == "0.0.0.0" and raw["gateway"]["port"] == 4000
    assert raw["gateway"]["api_keys"] == ["os.environ/GATEWAY_KEY"]
    assert raw["sessions"]["redis_url"] == "os.environ/REDIS_URL"
    assert gateway_container(docs)["ports"][0]["containerPort"] == 4000


def test_the_rendered_config_never_starts_without_its_client_key(
        monkeypatch: pytest.MonkeyPatch) -> None:
    raw = rendered_config(render(KEY))
    monkeypatch.setenv("OPENAI_API_KEY", "sk-x")
    monkeypatch.setenv("REDIS_URL", "redis://127.0.0.1:9/0")
    monkeypatch.delenv("GATEWAY_KEY", raising=False)
    with pytest.raises(ConfigError, match="GATEWAY_KEY"):
        parse_config(raw)
    monkeypatch.setenv("GATEWAY_KEY", "")
    with pytest.raises(ConfigError, match="api_keys"):
        parse_config(raw)


async def test_the_rendered_config_serves_with_keys_and_probes(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    """The chart's own config, started as a real gateway: the probes answer without a key,
    a request without the client key is refused, Redis down only degrades readiness."""
    raw = rendered_config(render(KEY))
    raw["sessions"]["data_dir"] = str(tmp_path)
    monkeypatch.setenv("GATEWAY_KEY", "client-key-0123456789abcdef")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-x")
    monkeypatch.setenv("REDIS_URL", "redis://127.0.0.1:9/0")  # nothing listens there
    config = parse_config(raw)
    runner, root = await serve_app(create_app(config))
    try:
        async with aiohttp.ClientSession() as session:
            async with session.get(root + "/health/readiness") as response:
                assert response.status == 200
                body = await response.json()
            # Redis down never takes a replica out of rotation (it answers without it).
            assert body["status"] in ("healthy", "degraded")
            async with session.get(root + "/health/liveness") as response:
                assert response.status == 200
            async with session.post(root + "/v1/chat/completions", json={
                    "model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}]},
                    ) as response:
                assert response.status == 401
                assert "client-key-0123456789abcdef" not in await response.text()
    finally:
        await runner.cleanup()


def test_the_services_and_monitor_name_real_ports() -> None:
    docs = render({**KEY, "serviceMonitor": {"enabled": True}})
    validate(docs)
    container_ports = {p["name"] for p in gateway_container(docs)["ports"]}
    gateway_service = [s for s in by_kind(docs, "Service")
                       if s["spec"]["selector"].get("app.kubernetes.io/component") == "gateway"]
    assert len(gateway_service) == 1
    for port in gateway_service[0]["spec"]["ports"]:
        assert port["targetPort"] in container_ports
    monitor = one(docs, "ServiceMonitor")
    assert {e["port"] for e in monitor["spec"]["endpoints"]} <= {
        p["name"] for p in gateway_service[0]["spec"]["ports"]}


def test_redis_is_internal_and_persistent() -> None:
    docs = render(KEY)
    redis_service = [s for s in by_kind(docs, "Service")
                     if s["spec"]["selector"].get("app.kubernetes.io/component") == "redis"]
    assert len(redis_service) == 1
    assert redis_service[0]["spec"].get("type", "ClusterIP") == "ClusterIP"
    statefulset = one(docs, "StatefulSet")
    assert statefulset["spec"]["replicas"] == 1
    container = statefulset["spec"]["template"]["spec"]["containers"][0]
    assert {"readinessProbe", "livenessProbe"} <= set(container)
    assert container["volumeMounts"][0]["mountPath"] == "/data"


def test_the_image_is_pinned_never_latest() -> None:
    for docs in (render(KEY), plain_manifests()):
        for workload in docs:
            if workload["kind"] not in ("Deployment", "StatefulSet"):
                continue
            for container in workload["spec"]["template"]["spec"]["containers"]:
                image = container["image"]
                assert ":" in image and not image.endswith(":latest"), image


@pytest.mark.parametrize("values", [
    {**KEY, "autoscaling": {"enabled": False}, "replicaCount": 1},
    {**KEY, "redis": {"enabled": False, "externalUrlSecret": {"name": "r", "key": "url"}},
     "ingress": {"enabled": True, "affinity": {"mode": "none"}}},
    {"existingSecret": "mine", "podDisruptionBudget": {"enabled": False},
     "serviceMonitor": {"enabled": True}, "env": {"OPENAI_API_BASE": "http://x/v1"}},
], ids=["one-replica", "secret-redis-no-affinity", "existing-secret"])
def test_more_value_sets_render_valid_objects(values: dict[str, Any]) -> None:
    validate(render(values))
