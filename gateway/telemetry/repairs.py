"""Reporting repairs (SPEC §2.4): honest, and once per repeated combination.

* A synthesized result for a call at the very tail of the history (``trailing``: the
  client is usually still running the tool) is applied and listed in the dry run and in
  ``x-gateway-repairs`` (the request did change), but it is not an alert: no log line, no
  ``context_projection_repaired`` event, and its metric label is its own
  (``TRAILING_METRIC_KIND``).
* The other repairs of a request are set as span attributes on every request. The log line
  and the span event are emitted once per run of the same combination (same kinds, same
  counts) back to back in a session, not on every request.
"""

from __future__ import annotations

import logging
from collections import Counter, OrderedDict
from collections.abc import Sequence

from opentelemetry.trace import Span

from gateway.projection.anomalies import Anomaly, Projection

log = logging.getLogger("gateway.repair")

REPAIRED_EVENT = "context_projection_repaired"
REPAIRED_LOG = "repaired the request to keep it wire-valid"
# The metric label of trailing syntheses: counted, but apart from the repairs.
TRAILING_METRIC_KIND = "tool_result_synthesized_trailing"


def repairs_header(counts: dict[str, int]) -> str:
    """``kind=count,...`` for the ``x-gateway-repairs`` header."""
    return ",".join(f"{kind}={n}" for kind, n in counts.items())


def anomaly_counts(anomalies: Sequence[Anomaly]) -> dict[str, int]:
    """Kind -> count, in first-seen order (``x-gateway-would-repair``)."""
    return dict(Counter(a.kind for a in anomalies))


def alert_counts(projection: Projection) -> dict[str, int]:
    """Kind -> count of the repairs that are alerts (everything but trailing syntheses)."""
    return dict(Counter(a.kind for a in projection.anomalies if not a.trailing))


def metric_counts(projection: Projection) -> dict[str, int]:
    """Kind label -> count for ``gateway_repairs_total``; trailing syntheses under their own
    label."""
    counts = alert_counts(projection)
    trailing = sum(1 for a in projection.anomalies if a.trailing)
    if trailing:
        counts[TRAILING_METRIC_KIND] = trailing
    return counts


class RepairReporter:
    """Logs and events repairs, once per run of identical combinations in a session."""

    def __init__(self, max_sessions: int = 10_000) -> None:
        self._last: OrderedDict[str, tuple[tuple[str, int], ...]] = OrderedDict()
        self._max = max_sessions

    def report(
        self, projection: Projection, span: Span, *, session: str | None, request_id: str,
        model: str, strict: bool = False,
    ) -> None:
        """Record one request's repairs: span attributes on every repaired request (when the
        span records), the log line and the span event only when the combination differs
        from the session's previous one."""
        if not projection.anomalies:
            return
        counts = alert_counts(projection)
        recording = span.is_recording()
        attributes: dict[str, str | int | bool] = {}
        if recording:
            attributes = {f"gateway.repair.{k}": v for k, v in counts.items()}
            trailing = sum(1 for a in projection.anomalies if a.trailing)
            if trailing:
                attributes["gateway.repair.trailing"] = trailing
            if counts:
                attributes["gateway.repair.strict"] = strict
            span.set_attributes(attributes)
        if not counts or not self._is_new(session or "", tuple(counts.items())):
            return
        if recording:
            span.add_event(REPAIRED_EVENT, attributes)
        log.info(
            "%s: %s (model=%s strict=%s request_id=%s)",
            REPAIRED_LOG, repairs_header(counts), model, strict, request_id,
            extra={"repairs": counts, "request_id": request_id},
        )

    def _is_new(self, key: str, signature: tuple[tuple[str, int], ...]) -> bool:
        """True (and remembered) when ``signature`` differs from the session's last one."""
        new = self._last.get(key) != signature
        self._last[key] = signature
        self._last.move_to_end(key)
        if len(self._last) > self._max:
            self._last.popitem(last=False)
        return new
