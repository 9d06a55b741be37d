"""Everything a client, a trace or a dashboard sees of a request, rendered from its Flow.

One function per output, each in one place: response headers, the error body of a give-up
or refusal, span attributes, metrics and the log line.
"""

from __future__ import annotations

from typing import Any

import orjson

from gateway.errors import error_body
from gateway.flow.flow import Flow
from gateway.providers.errors import openai_error_envelope
from gateway.providers.failure import UpstreamFailure
from gateway.providers.openai_compat import relayed_failure_headers
from gateway.providers.prompt_cache import prefix_fingerprints
from gateway.telemetry.metrics import Metrics
from gateway.telemetry.repairs import repairs_header

__all__ = ["count", "error", "headers", "log_fields", "span_end", "span_start"]


def headers(flow: Flow) -> dict[str, str]:
    """The ``x-gateway-*`` response headers (and ``Retry-After`` of a give-up)."""
    out: dict[str, str] = {}
    if flow.context_level is not None:
        out["x-gateway-context"] = flow.context_level
    applied = flow.compaction
    if applied is not None:
        out["x-gateway-compaction"] = (f"{applied.how}; tokens_before={applied.tokens_before}; "
                                       f"tokens_after={applied.tokens_after}")
    failed = flow.compaction_failed
    if failed is not None:
        out["x-gateway-compaction-failed"] = failed
    if flow.response is not None and flow.projection is not None and flow.projection.repaired:
        out["x-gateway-repairs"] = repairs_header(flow.projection.counts())
    if flow.response is not None or flow.give_up is not None:
        out["x-gateway-attempts"] = str(len(flow.chat_attempts))
        if flow.steps:
            out["x-gateway-recovery"] = ",".join(flow.steps)
    if flow.served_by is not None:
        out["x-gateway-model-used"] = flow.served_by.name
        if flow.served_by.deployment_id:
            out["x-gateway-deployment"] = flow.served_by.deployment_id
    if flow.give_up is not None:
        # The upstream's rate-limit state and request id, on a refusal too.
        out.update(relayed_failure_headers(flow.give_up.failure.headers))
    if flow.give_up is not None and flow.give_up.failure.retry_after is not None:
        out["Retry-After"] = str(max(1, round(flow.give_up.failure.retry_after)))
    return out


def error(flow: Flow) -> dict[str, Any]:
    """The error body of a request that got no answer: the provider's own error when the
    ladder gave up (with a ``gateway`` object listing what was tried), else the gateway's."""
    req = flow.request
    tried = [a.report() for a in flow.chat_attempts]
    if flow.give_up is None:
        refusal = flow.refusal
        assert refusal is not None, "error() needs a flow that gave up or was refused"
        extra = None
        if refusal.reason is not None:
            extra = {"gateway": {"attempts": tried, "gave_up": refusal.reason,
                                 "request_id": req.request_id}}
        return error_body(refusal.message, status=refusal.status, param=refusal.param,
                          code=refusal.code, extra=extra)
    body = _client_error_object(flow.give_up.failure)
    body["gateway"] = {"attempts": tried, "gave_up": flow.give_up.reason,
                       "request_id": req.request_id}
    routes = [req.route] + ([flow.served_by] if flow.served_by is not None else [])
    for route in routes:
        secret = route.entry.litellm_params.api_key
        if secret and len(secret) >= 8:
            # A provider may echo the key it was given; it must never reach the client.
            raw = orjson.dumps(body)
            if secret.encode() in raw:
                body = orjson.loads(raw.replace(secret.encode(), b"***"))
    return body


def _client_error_object(failure: UpstreamFailure) -> dict[str, Any]:
    """The provider's own OpenAI-style error object when it sent one, else one built from it."""
    try:
        parsed = orjson.loads(failure.body) if failure.body else None
    except orjson.JSONDecodeError:
        parsed = None
    if isinstance(parsed, dict) and isinstance(parsed.get("error"), dict):
        err = parsed["error"]
        if isinstance(err.get("message"), str) and "type" in err:
            return {"error": {"param": None, "code": None, **err}}
    return openai_error_envelope(failure)


def span_start(flow: Flow) -> dict[str, Any]:
    """Attributes of the ``gateway.chat`` span known when the request starts."""
    req = flow.request
    route = req.route
    system_hash, tools_hash = prefix_fingerprints(req.body)
    return {
        "gateway.request_id": req.request_id,
        "gateway.model": route.name,
        "gateway.upstream_model": route.upstream_model,
        "gateway.provider": route.provider_name,
        "gateway.stream": req.stream,
        "gateway.messages": len(req.messages),
        "gateway.prompt.system_hash": system_hash,
        "gateway.prompt.tools_hash": tools_hash,
    }


def span_end(flow: Flow) -> dict[str, Any]:
    """Attributes of the ``gateway.chat`` span known when the request is answered."""
    out: dict[str, Any] = {"gateway.attempts": len(flow.chat_attempts),
                           "gateway.status": flow.status}
    reason = flow.give_up.reason if flow.give_up else flow.refusal.reason if flow.refusal \
        else None
    if reason:
        out["gateway.gave_up"] = reason
    if flow.compaction_failed:
        out["gateway.compaction.failed"] = flow.compaction_failed
    return out


def count(flow: Flow, metrics: Metrics) -> None:
    """Add the request to the counters (upstream attempts are counted as they happen)."""
    metrics.inc("gateway_requests_total", model=flow.route.name, status=str(flow.status))
    if flow.response is not None and flow.projection is not None:
        for kind, n in flow.projection.counts().items():
            metrics.inc("gateway_repairs_total", n, kind=kind)
    for step in flow.steps:
        metrics.inc("gateway_recovery_steps_total", step=step)
    applied = flow.compaction
    if applied is not None and applied.how is not None:
        metrics.inc("gateway_compactions_total", how=applied.how)


def log_fields(flow: Flow) -> dict[str, Any]:
    """The fields of the request's log line."""
    return {
        "request_id": flow.request.request_id,
        "model": flow.route.name,
        "status": flow.status,
        "attempts": len(flow.chat_attempts),
        "summary_calls": len(flow.attempts) - len(flow.chat_attempts),
        "recovery": ",".join(flow.steps),
        "elapsed_ms": round(flow.elapsed() * 1000, 1),
    }
