"""Reporting repairs (SPEC §2.4): one log line per new combination, span attributes always."""

from __future__ import annotations

import logging
from collections import OrderedDict

from opentelemetry.trace import Span

from gateway.projection.anomalies import Projection

log = logging.getLogger("gateway.repair")

REPAIRED_EVENT = "context_projection_repaired"
REPAIRED_LOG = "repaired the request to keep it wire-valid"


def repairs_header(counts: dict[str, int]) -> str:
    """``kind=count,...`` for the ``x-gateway-repairs`` header."""
    return ",".join(f"{kind}={n}" for kind, n in counts.items())


class RepairReporter:
    """Logs repairs, once per run of identical repairs in a session (back to back)."""

    def __init__(self, max_sessions: int = 10_000) -> None:
        self._last: OrderedDict[str, tuple[tuple[str, int], ...]] = OrderedDict()
        self._max = max_sessions

    def report(
        self, projection: Projection, span: Span, *, session: str | None, request_id: str,
        model: str, strict: bool = False,
    ) -> None:
        """Record one request's repairs on its span and, unless repeated, in the log."""
        counts = projection.counts()
        if not counts:
            return
        signature = tuple(counts.items())
        attributes: dict[str, str | int | bool] = {f"gateway.repair.{k}": v for k, v in signature}
        attributes["gateway.repair.strict"] = strict
        span.set_attributes(attributes)
        trailing = sum(1 for a in projection.anomalies if a.trailing)
        span.add_event(REPAIRED_EVENT, {**attributes, "gateway.repair.trailing": trailing})
        key = session or ""
        if self._last.get(key) == signature:
            self._last.move_to_end(key)
            return
        self._last[key] = signature
        self._last.move_to_end(key)
        if len(self._last) > self._max:
            self._last.popitem(last=False)
        log.info(
            "%s: %s (model=%s strict=%s request_id=%s)",
            REPAIRED_LOG, repairs_header(counts), model, strict, request_id,
            extra={"repairs": counts, "request_id": request_id},
        )
