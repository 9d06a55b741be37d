"""Prometheus metrics (``prometheus_client``), served on ``GET /metrics``.

One :class:`Metrics` per gateway process owns its collectors in its own registry. With
``--workers N`` the gateway points ``PROMETHEUS_MULTIPROC_DIR`` at a directory it cleans at
start (see :mod:`gateway.telemetry.multiproc`): every worker writes its values there and any
worker's ``/metrics`` aggregates all of them, so a scrape sees one consistent set.

Label values are bounded: configured model names, deployments, HTTP status codes, wire
names, ladder steps, verdicts and repair kinds; never request or session ids.
"""

from __future__ import annotations

import os
from bisect import bisect_left
from collections.abc import Iterable
from typing import Any

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
    generate_latest,
)
from prometheus_client.multiprocess import MultiProcessCollector

from gateway.telemetry.context import ContextBreakdown
from gateway.telemetry.record import SUMMARY_STEP, RequestRecord

# No *_created series: they double the series count for no dashboard use.
disable_created_metrics()  # type: ignore[no-untyped-call]

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0,
                   60.0, 120.0, 300.0)
ADDED_BUCKETS = (0.0002, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
                 2.5)
COMPACTION_BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0)

# Input tokens by source (issue 26): a tool-schema block of 30k tokens must stand out.
CONTEXT_TOKEN_BUCKETS = (0.0, 100.0, 500.0, 1_000.0, 2_500.0, 5_000.0, 10_000.0, 20_000.0,
                         40_000.0, 80_000.0, 160_000.0, 320_000.0, 1_000_000.0)
MAIN_SOURCES = frozenset({"system", "tools", "history", "turn"})
CONTEXT_USED_BUCKETS = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.75, 0.8, 0.85, 0.9, 0.95, 1.0)

CIRCUIT_STATES = {"closed": 0, "half_open": 1, "open": 2}

# name -> (type, labels, help): the documented set (README "Metrics" mirrors this table).
SPEC: dict[str, tuple[str, tuple[str, ...], str]] = {
    "gateway_requests_total": (
        "counter", ("model", "deployment", "status", "wire"),
        "Model requests answered, by model, deployment that answered, HTTP status and wire."),
    "gateway_request_duration_seconds": (
        "histogram", ("model", "deployment", "status", "wire"),
        "Whole request time, first byte read to last byte written."),
    "gateway_added_latency_seconds": (
        "histogram", ("model", "wire"),
        "Time the gateway added: the request's time minus upstream waits and backoff."),
    "gateway_upstream_latency_seconds": (
        "histogram", ("model", "deployment"),
        "Upstream time per answered request: attempts plus relaying the answer."),
    "gateway_upstream_ttfb_seconds": (
        "histogram", ("model", "deployment"),
        "Time until the relayed answer started (first SSE event, or the whole JSON body)."),
    "gateway_upstream_attempts_total": (
        "counter", ("model", "deployment", "step", "outcome"),
        "Upstream calls by ladder step (initial, strict, media, retry, compact; summary for "
        "a compaction's summary calls) and outcome (ok or the classifier's verdict)."),
    "gateway_recovery_steps_total": (
        "counter", ("model", "step"), "Recovery ladder steps taken, by step."),
    "gateway_repairs_total": (
        "counter", ("model", "kind"),
        "Repairs made by projection, by kind (a result synthesized for a trailing call is "
        "tool_result_synthesized_trailing)."),
    "gateway_compactions_total": (
        "counter", ("model", "how"),
        "Requests whose history was compacted, by how: summarized, reused, "
        "background-applied, failed."),
    "gateway_compaction_duration_seconds": (
        "histogram", ("model", "outcome"),
        "Time to produce a compaction (summary calls and shaping), by outcome ok or failed."),
    "gateway_summary_calls_total": (
        "counter", ("model", "status"), "Summary calls made for compactions, by HTTP status."),
    "gateway_tokens_total": (
        "counter", ("model", "deployment", "direction"),
        "Tokens reported by the upstream's usage (direction input or output), streams "
        "included."),
    "gateway_in_flight_requests": (
        "gauge", (), "Requests being handled now (all workers)."),
    "gateway_open_streams": (
        "gauge", ("model",), "Streamed answers being relayed now (all workers)."),
    "gateway_deployment_cooldown": (
        "gauge", ("model", "deployment"), "1 while a deployment is cooling down, else 0."),
    "gateway_deployment_circuit_state": (
        "gauge", ("model", "deployment"),
        "Circuit breaker state of a deployment: 0 closed, 1 half-open, 2 open."),
    "gateway_deployment_cooldowns_total": (
        "counter", ("model", "deployment"),
        "Deployments taken out of rotation (allowed_fails or a 429/401/403/404), by deployment."),
    "gateway_fallbacks_total": (
        "counter", ("model",), "Fallbacks to another model group, by the group tried."),
    "gateway_auth_failures_total": (
        "counter", ("reason",),
        "Refused client authentications, by reason (missing_key, invalid_key, rate_limited)."),
    "gateway_recalls_total": (
        "counter", ("model",), "Recall tool calls the gateway answered, by model."),
    "gateway_owner_requests_total": (
        "counter", ("owner", "model", "outcome"),
        "Model requests by client owner (a configured owner name, api_keys[N] for a key "
        "without one, anonymous without client auth) and outcome: clean, repaired, "
        "would_repair (report policy), rejected (reject policies)."),
    "gateway_owner_repairs_total": (
        "counter", ("owner", "model", "kind", "policy"),
        "Repairs by client owner and kind; policy repair (made), report (would have been "
        "made, the request went as sent) or reject (the request was refused for it)."),
    "gateway_owner_recovery_steps_total": (
        "counter", ("owner", "model", "step"),
        "Recovery ladder steps taken, by client owner (report-policy rescues included)."),
    "gateway_owner_compactions_total": (
        "counter", ("owner", "model", "how"), "Compacted requests, by client owner."),
    "gateway_invisible_chars_total": (
        "counter", ("owner", "model", "kind", "action"),
        "Invisible characters found in what the model reads, by kind (tag, bidi, "
        "zero_width, other) and action (report, strip, reject)."),
    "gateway_condensed_outputs_total": (
        "counter", ("model", "action"),
        "Tool results condensed (repair.tool_outputs): repeated ones referenced, verbose "
        "ones written compactly; action condense (made) or report (would have been made)."),
    "gateway_condensed_saved_chars_total": (
        "counter", ("model", "action"),
        "Characters condensing tool results took (or would have taken) out of what was "
        "sent, about four to a token."),
    "gateway_history_reads_total": (
        "counter", ("read",),
        "Chat request bodies read incrementally over the client's previous turn, or whole."),
    "gateway_responses_not_kept_total": (
        "counter", ("reason",),
        "Responses answers the gateway could not keep for previous_response_id: "
        "store_unavailable (the write failed), backlog (more waited for the store than the "
        "bound)."),
    "gateway_context_tokens": (
        "histogram", ("model", "source"),
        "Estimated input tokens per request by source: system (and developer), tools, "
        "history (with tool_results, summary, images within it) and the new turn."),
    "gateway_context_used_ratio": (
        "histogram", ("model",),
        "Window used per request: (input + reserved output) / context window."),
    "gateway_prefix_turns_total": (
        "counter", ("model", "cause"),
        "Session turns by where the prompt first differs from the previous turn's: first, "
        "unchanged, appended (healthy), tools, system, message, gateway."),
    "gateway_prefix_lost_tokens_total": (
        "counter", ("model", "cause"),
        "Tokens of the previous turn's prompt put out of the cacheable prefix, by cause."),
    "gateway_prompt_cache_tokens_total": (
        "counter", ("model", "kind"),
        "Input tokens of answered requests that reported cache usage: prompt (all), read "
        "(from the provider's prompt cache), write (into it); hit ratio = read / prompt."),
    "gateway_context_level_total": (
        "counter", ("model", "level"),
        "Requests by context budget level (comfortable, warning, pressure, critical)."),
}

_HIST_BUCKETS = {
    "gateway_request_duration_seconds": LATENCY_BUCKETS,
    "gateway_added_latency_seconds": ADDED_BUCKETS,
    "gateway_upstream_latency_seconds": LATENCY_BUCKETS,
    "gateway_upstream_ttfb_seconds": LATENCY_BUCKETS,
    "gateway_compaction_duration_seconds": COMPACTION_BUCKETS,
    "gateway_context_tokens": CONTEXT_TOKEN_BUCKETS,
    "gateway_context_used_ratio": CONTEXT_USED_BUCKETS,
}
_GAUGE_MODES = {
    "gateway_in_flight_requests": "livesum",
    "gateway_open_streams": "livesum",
    "gateway_deployment_cooldown": "livemax",
    "gateway_deployment_circuit_state": "livemax",
}


def multiprocess_dir() -> str | None:
    """The directory shared by the workers, when running in multiprocess mode."""
    return os.environ.get("PROMETHEUS_MULTIPROC_DIR") or None


class _Tally:
    """A request's counter and histogram updates, added up in plain Python and written to
    the collectors in one go (:meth:`flush`, at a scrape). A prometheus update takes a lock
    and a few calls (~1 µs; a request made ~25 of them); this is a dictionary update."""

    __slots__ = ("counts", "observed")

    def __init__(self) -> None:
        self.counts: dict[Any, float] = {}  # counter child -> amount
        # histogram child -> [sum, count in bucket 0, count in bucket 1, ...]
        self.observed: dict[Any, list[float]] = {}

    def inc(self, child: Any, amount: float = 1) -> None:
        """``child.inc(amount)``, later."""
        if amount < 0:
            raise ValueError("Counters can only be incremented by non-negative amounts.")
        counts = self.counts
        counts[child] = counts.get(child, 0) + amount

    def observe(self, child: Any, value: float) -> None:
        """``child.observe(value)``, later."""
        row = self.observed.get(child)
        bounds = child._upper_bounds  # (the bucket bounds, +Inf last)
        if row is None:
            row = self.observed[child] = [0.0] * (len(bounds) + 1)
        row[0] += value
        if value == value:  # (NaN falls in no bucket, as prometheus_client has it)
            row[1 + bisect_left(bounds, value)] += 1

    def flush(self) -> None:
        """Write what was added up to the collectors."""
        counts, self.counts = self.counts, {}
        observed, self.observed = self.observed, {}
        for child, amount in counts.items():
            child.inc(amount)
        for child, row in observed.items():
            child._sum.inc(row[0])
            buckets = child._buckets
            for i, n in enumerate(row[1:]):
                if n:
                    buckets[i].inc(n)


class Metrics:
    """The gateway's collectors, and the one place that turns a request record into them."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self._m: dict[str, Any] = {}
        for name, (kind, labels, help_text) in SPEC.items():
            if kind == "counter":
                self._m[name] = Counter(name, help_text, labels, registry=self.registry)
            elif kind == "histogram":
                self._m[name] = Histogram(name, help_text, labels, registry=self.registry,
                                          buckets=_HIST_BUCKETS[name])
            else:
                self._m[name] = Gauge(name, help_text, labels, registry=self.registry,
                                      multiprocess_mode=_GAUGE_MODES[name])  # type: ignore[arg-type]
        self.in_flight = self._m["gateway_in_flight_requests"]
        self._streams = self._m["gateway_open_streams"]
        self._children: dict[tuple[str, ...], Any] = {}
        self._request_series: dict[tuple[str, str, int, str], tuple[Any, ...]] = {}
        self._tally = _Tally()
        # Workers of one gateway read each other's values from files at a scrape: each
        # request's updates are written when it is recorded.
        self._at_once = multiprocess_dir() is not None

    def _child(self, name: str, *labels: str) -> Any:
        """The labelled child, cached (label values are bounded, so is the cache)."""
        key = (name, *labels)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = self._m[name].labels(*labels)
        return child

    def _series(self, model: str, dep: str, status: int, wire: str) -> tuple[Any, ...]:
        """The children every request of these labels updates, looked up once."""
        c, code = self._child, str(status)
        series = (c("gateway_requests_total", model, dep, code, wire),
                  c("gateway_request_duration_seconds", model, dep, code, wire),
                  c("gateway_added_latency_seconds", model, wire))
        self._request_series[(model, dep, status, wire)] = series
        return series

    def inc(self, name: str, amount: float = 1, **labels: str) -> None:
        """Add to a counter (labels by name)."""
        self._m[name].labels(**labels).inc(amount)

    def observe_request(self, rec: RequestRecord) -> None:
        """Everything one finished model request contributes."""
        c, tally = self._child, self._tally
        inc, observe = tally.inc, tally.observe
        model, dep, wire = rec.model, rec.deployment, rec.wire
        series = self._request_series.get((model, dep, rec.status, wire))
        if series is None:
            series = self._series(model, dep, rec.status, wire)
        count, duration, added = series
        inc(count)
        observe(duration, rec.duration)
        observe(added, rec.added_seconds)
        if rec.attempts:
            observe(c("gateway_upstream_latency_seconds", model, dep), rec.upstream_seconds)
            if rec.ttfb is not None:
                observe(c("gateway_upstream_ttfb_seconds", model, dep), rec.ttfb)
        for a in rec.attempts:
            inc(c("gateway_upstream_attempts_total", model, a.deployment, a.step, a.verdict))
            if a.step == SUMMARY_STEP:
                inc(c("gateway_summary_calls_total", model, str(a.status)))
        for seconds, ok in rec.compaction_runs:
            self.observe_compaction(model, seconds, ok=ok)
        if rec.context is not None:
            self._observe_context(model, rec.context)
        if rec.prompt_tokens is not None:  # no cache usage reported: nothing was read
            inc(c("gateway_prompt_cache_tokens_total", model, "prompt"), rec.prompt_tokens)
            inc(c("gateway_prompt_cache_tokens_total", model, "read"),
                rec.cache_read_tokens or 0)
            if rec.cache_write_tokens:
                inc(c("gateway_prompt_cache_tokens_total", model, "write"),
                    rec.cache_write_tokens)
        if rec.prefix is not None:
            inc(c("gateway_prefix_turns_total", model, rec.prefix.cause))
            if rec.prefix.lost_tokens:
                inc(c("gateway_prefix_lost_tokens_total", model, rec.prefix.cause),
                    rec.prefix.lost_tokens)
        if rec.recovery:
            for step in rec.recovery.split(","):
                inc(c("gateway_recovery_steps_total", model, step))
        if rec.repair_metrics:
            for kind, n in rec.repair_metrics.items():
                inc(c("gateway_repairs_total", model, kind), n)
        how = rec.compaction_how
        if how:
            inc(c("gateway_compactions_total", model, how))
        if rec.input_tokens:
            inc(c("gateway_tokens_total", model, dep, "input"), rec.input_tokens)
        if rec.output_tokens:
            inc(c("gateway_tokens_total", model, dep, "output"), rec.output_tokens)
        if rec.recalls:
            inc(c("gateway_recalls_total", model), rec.recalls)
        if rec.condensed_outputs:
            action = rec.condensed_action
            inc(c("gateway_condensed_outputs_total", model, action), rec.condensed_outputs)
            inc(c("gateway_condensed_saved_chars_total", model, action),
                rec.condensed_saved_chars)
        self._observe_owner(rec)
        if self._at_once:
            tally.flush()

    def _observe_owner(self, rec: RequestRecord) -> None:
        """The owner's share of a model request: outcome, repairs, steps, compactions,
        invisible characters."""
        if not rec.owner_name:
            # Refused before the driver saw it (an unknown model, a body that does not
            # parse): no owner was resolved, and "anonymous" would blame no-auth clients.
            return
        c, owner, model = self._child, rec.owner_name, rec.model
        inc = self._tally.inc
        outcome = ("rejected" if rec.violations else "repaired" if rec.repairs
                   else "would_repair" if rec.would_repair else "clean")
        inc(c("gateway_owner_requests_total", owner, model, outcome))
        for kind, n in rec.repair_metrics.items():
            inc(c("gateway_owner_repairs_total", owner, model, kind, "repair"), n)
        for kind, n in rec.would_repair.items():
            inc(c("gateway_owner_repairs_total", owner, model, kind, "report"), n)
        for v in rec.violations:
            inc(c("gateway_owner_repairs_total", owner, model, str(v.get("rule")), "reject"))
        if rec.recovery:
            for step in rec.recovery.split(","):
                inc(c("gateway_owner_recovery_steps_total", owner, model, step))
        if rec.compaction_how:
            inc(c("gateway_owner_compactions_total", owner, model, rec.compaction_how))
        if rec.invisible is not None:
            for kind, n in rec.invisible.counts.items():
                inc(c("gateway_invisible_chars_total", owner, model, kind,
                      rec.invisible_action), n)

    def _observe_context(self, model: str, context: ContextBreakdown) -> None:
        """The request's context breakdown, window used and level."""
        c, observe, inc = self._child, self._tally.observe, self._tally.inc
        for source, n in context.tokens().items():
            if n or source in MAIN_SOURCES:  # parts of the history: when there are some
                observe(c("gateway_context_tokens", model, source), n)
        if context.used is not None:
            observe(c("gateway_context_used_ratio", model), context.used)
        if context.level is not None:
            inc(c("gateway_context_level_total", model, context.level))

    def observe_attempt(self, model: str, deployment: str, step: str, outcome: str,
                        status: int) -> None:
        """One upstream call that belongs to no request (a background summary call)."""
        self._child("gateway_upstream_attempts_total", model, deployment, step, outcome).inc()
        if step == SUMMARY_STEP:
            self._child("gateway_summary_calls_total", model, str(status)).inc()

    def observe_compaction(self, model: str, seconds: float, *, ok: bool) -> None:
        """One compaction attempt (foreground or background) and its duration."""
        self._m["gateway_compaction_duration_seconds"].labels(
            model, "ok" if ok else "failed").observe(seconds)

    def history_read(self, incremental: bool) -> None:
        """A body (chat, Messages, Responses) was read over the client's previous turn, or
        whole."""
        self._tally.inc(self._child("gateway_history_reads_total",
                                    "incremental" if incremental else "whole"))
        if self._at_once:
            self._tally.flush()

    def stream_opened(self, model: str) -> None:
        """A streamed answer started relaying."""
        self._streams.labels(model).inc()

    def stream_closed(self, model: str) -> None:
        """A streamed answer finished (or the client left)."""
        self._streams.labels(model).dec()

    def declare_deployments(self, pairs: Iterable[tuple[str, str]]) -> None:
        """Start every configured (model, deployment) at healthy, so the series exist (and
        dashboards show them) before anything happens."""
        for model, deployment in pairs:
            self.set_deployment_cooldown(model, deployment, False)
            self.set_circuit_state(model, deployment, "closed")
            self._streams.labels(model).inc(0)

    def set_deployment_cooldown(self, model: str, deployment: str, cooling: bool) -> None:
        """For the router: a deployment entered (True) or left (False) its cooldown."""
        self._m["gateway_deployment_cooldown"].labels(model, deployment).set(int(cooling))

    def set_circuit_state(self, model: str, deployment: str, state: str) -> None:
        """For the circuit breaker: ``closed``, ``half_open`` or ``open``."""
        self._m["gateway_deployment_circuit_state"].labels(model, deployment).set(
            CIRCUIT_STATES[state])

    def flush(self) -> None:
        """Write the requests' updates added up since the last scrape to the collectors."""
        self._tally.flush()

    def render(self) -> bytes:
        """The Prometheus text exposition: every worker's values in multiprocess mode."""
        if not self._at_once:  # (then it runs in a thread, and nothing is left to write)
            self._tally.flush()
        if multiprocess_dir():
            registry = CollectorRegistry()
            MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
            return generate_latest(registry)
        return generate_latest(self.registry)

    def value(self, name: str, **labels: str) -> float:
        """A sample's current value in this process (tests and health output)."""
        self._tally.flush()
        got = self.registry.get_sample_value(name, labels)
        return 0.0 if got is None else got
