"""Render the Helm chart into the plain Kubernetes manifests of deploy/kubernetes/.

    make manifests        (or: .venv/bin/python deploy/render_manifests.py)

Helm's own renderer (the ``helm-python-sdk`` test dependency: Helm's Go SDK, no ``helm``
binary needed). The manifests expect a Secret named ``llm-repair-gateway-keys`` holding
GATEWAY_KEY and the provider keys (never rendered into a file); tests/test_deploy.py checks
that the committed files are what the chart renders.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import yaml

DEPLOY = Path(__file__).resolve().parent
CHART = DEPLOY / "helm" / "llm-repair-gateway"
OUT = DEPLOY / "kubernetes"
RELEASE = "llm-repair-gateway"
NAMESPACE = "llm-gateway"
# What the plain manifests are rendered with: keys in a Secret made by hand, an ingress
# with session affinity, the ServiceMonitor in a file of its own (it needs the Prometheus
# Operator's CRD).
VALUES: dict[str, Any] = {"existingSecret": "llm-repair-gateway-keys",
                          "ingress": {"enabled": True}, "serviceMonitor": {"enabled": True}}
HEADER = ("# Rendered from deploy/helm/llm-repair-gateway by `make manifests`: edit the chart,"
          " not this file.\n")


class _Dumper(yaml.SafeDumper):
    """Multi-line strings (the config file in the ConfigMap) as literal blocks."""


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str)


def render(values: dict[str, Any] | None = None, *, name: str = RELEASE,
           namespace: str = NAMESPACE) -> list[dict[str, Any]]:
    """The chart's objects for ``values`` (merged over values.yaml), in template order."""
    import helm_python as helm

    with helm.Chart.load(str(CHART)) as chart:
        rendered = chart.render(values or {}, name=name, namespace=namespace)
    docs: list[dict[str, Any]] = []
    for path in sorted(rendered):
        if path.endswith(".yaml"):
            docs += [d for d in yaml.safe_load_all(rendered[path]) if d]
    return docs


def manifests() -> dict[str, str]:
    """File name -> text of deploy/kubernetes/."""
    docs = render(VALUES)
    core = [d for d in docs if d["kind"] != "ServiceMonitor"]
    monitor = [d for d in docs if d["kind"] == "ServiceMonitor"]

    def dump(objects: list[dict[str, Any]]) -> str:
        return HEADER + yaml.dump_all(objects, Dumper=_Dumper, sort_keys=False)

    return {"llm-repair-gateway.yaml": dump(core), "servicemonitor.yaml": dump(monitor)}


def main() -> int:
    """Write deploy/kubernetes/."""
    OUT.mkdir(exist_ok=True)
    for name, text in manifests().items():
        (OUT / name).write_text(text)
        print(f"wrote {OUT / name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
