"""Counters of what the gateway did, served as Prometheus text on ``GET /metrics``.

Plain in-process counters (one dict increment each): cheap enough for the hot path, and no
client library needed. With ``--workers N`` each worker counts its own requests.
"""

from __future__ import annotations

from collections import defaultdict

_HELP = {
    "gateway_requests_total": "Chat requests answered, by model and HTTP status.",
    "gateway_repairs_total": "Repairs made by projection, by kind.",
    "gateway_upstream_attempts_total": "Upstream attempts, by model and outcome verdict.",
    "gateway_recovery_steps_total": "Recovery ladder steps taken, by step.",
    "gateway_compactions_total": "Compactions applied, by how (summarized, reused, ...).",
    "gateway_auth_failures_total": "Refused client authentications, by reason.",
    "gateway_deployment_answers_total": "Answers by model group and deployment.",
    "gateway_deployment_cooldowns_total": "Deployments cooled down, by model group and id.",
    "gateway_fallbacks_total": "Fallbacks to another model group, by the group tried.",
}

Labels = tuple[tuple[str, str], ...]


class Metrics:
    """Named counters with labels."""

    def __init__(self) -> None:
        self._counters: dict[str, defaultdict[Labels, int]] = {
            name: defaultdict(int) for name in _HELP
        }

    def inc(self, name: str, amount: int = 1, **labels: str) -> None:
        """Add ``amount`` to the counter ``name`` with these labels."""
        self._counters[name][tuple(sorted(labels.items()))] += amount

    def value(self, name: str, **labels: str) -> int:
        """The current value (for tests and health output)."""
        return self._counters[name].get(tuple(sorted(labels.items())), 0)

    def render(self) -> str:
        """The Prometheus text exposition format."""
        lines: list[str] = []
        for name, series in self._counters.items():
            lines.append(f"# HELP {name} {_HELP[name]}")
            lines.append(f"# TYPE {name} counter")
            for labels, value in sorted(series.items()):
                rendered = ",".join(f'{k}="{_escape(v)}"' for k, v in labels)
                lines.append(f"{name}{{{rendered}}} {value}" if rendered else f"{name} {value}")
        return "\n".join(lines) + "\n"


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
