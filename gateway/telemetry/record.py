"""What one finished request did, as a flat snapshot: the input of the metrics, the access
log line and the inspector's entry.

It is a *view*, built once when the request is over (``gateway.flow.render.record``) from the
request's :class:`~gateway.flow.flow.Flow` and the HTTP facts of the edge (method, path,
status, duration); nothing writes it while the request runs. Requests that are not model
requests (``/v1/models``, a 404, a refused key) are views of the HTTP facts alone.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from gateway.projection.anomalies import Anomaly, Message
from gateway.projection.invisible import Scan
from gateway.telemetry.context import ContextBreakdown
from gateway.telemetry.prefix import PrefixBreak

SUMMARY_STEP = "summary"  # the step of a compaction's summary calls


@dataclass(slots=True)
class AttemptRecord:
    """One upstream attempt: which ladder step, where, how long, and the verdict."""

    number: int
    step: str  # "initial", "strict", "media", "retry", "compact", ..., or "summary"
    deployment: str
    started: float  # seconds after the request started
    seconds: float  # until the upstream's answer started (or its refusal arrived)
    status: int | None = None
    verdict: str = "ok"

    def as_dict(self) -> dict[str, Any]:
        """The JSON shape for the inspector."""
        return {"number": self.number, "step": self.step, "deployment": self.deployment,
                "started_ms": round(self.started * 1000, 3),
                "ms": round(self.seconds * 1000, 3), "status": self.status,
                "verdict": self.verdict}


@dataclass(slots=True)
class RequestRecord:
    """One request, from the first byte read to the last byte written."""

    request_id: str = ""
    method: str = ""
    path: str = ""
    started_at: float = 0.0  # wall clock, for display
    wire: str = ""  # the client-facing API ("chat"); empty for non-model routes
    model: str = ""  # a configured model name, never an unchecked client string
    deployment: str = ""
    provider: str = ""
    stream: bool = False
    client_key_id: str = ""
    owner: str = ""  # the client key's hash (as sessions store it): who may inspect this
    # The authenticated key's owner as configured (the access log names it on a request
    # refused before its Flow resolved ``owner_name``; metrics and reports do not count it).
    key_owner: str = ""
    session_id: str | None = None
    status: int = 0
    duration: float = 0.0
    upstream_seconds: float = 0.0  # attempts' upstream wait plus the relay of the answer
    ttfb: float | None = None  # until the answer that was relayed started
    backoff_seconds: float = 0.0
    attempts: list[AttemptRecord] = field(default_factory=list)
    repairs: dict[str, int] = field(default_factory=dict)
    anomalies: Sequence[Anomaly] = ()  # the repairs, in step order
    strict: bool = False
    recovery: str = ""
    compaction: str = ""
    compaction_failed: str = ""
    compaction_runs: list[tuple[float, bool]] = field(default_factory=list)  # (seconds, ok)
    input_tokens: int | None = None
    output_tokens: int | None = None
    recalls: int = 0  # recall tool calls the gateway answered itself
    # gateway_repairs_total labels: trailing syntheses apart (telemetry.repairs.metric_counts)
    repair_metrics: dict[str, int] = field(default_factory=dict)
    response_model: str = ""
    error: str = ""
    disconnected: bool = False
    client_messages: list[Message] | None = None
    upstream_messages: list[Message] | None = None
    owner_name: str = ""  # the owner's configured name (metrics label, inspector filter)
    policy: str = "repair"  # the request's repair policy: repair, report or reject
    would_repair: dict[str, int] = field(default_factory=dict)  # report: kind -> count
    would_anomalies: Sequence[Anomaly] = ()
    violations: list[dict[str, Any]] = field(default_factory=list)  # refused: what is wrong
    invisible: Scan | None = None  # invisible characters found
    invisible_action: str = ""  # report, strip or reject
    condensed_outputs: int = 0  # tool results condensed (``repair.tool_outputs``)
    condensed_saved_chars: int = 0  # the characters that saved
    condensed_action: str = ""  # condense (made) or report (would have been made)
    context: ContextBreakdown | None = None  # input tokens by source, window used
    prefix: PrefixBreak | None = None  # where the prompt first differs from the last turn
    prompt_tokens: int | None = None  # every input token, cached ones included
    cache_read_tokens: int | None = None  # read from the provider's prompt cache
    cache_write_tokens: int | None = None  # written to it (Anthropic)

    @property
    def chat_attempts(self) -> int:
        """How often the client's request was sent (summary calls left out)."""
        return sum(1 for a in self.attempts if a.step != SUMMARY_STEP)

    @property
    def added_seconds(self) -> float:
        """Time the gateway itself added: everything but the upstream wait and backoff."""
        return max(0.0, self.duration - self.upstream_seconds - self.backoff_seconds)

    @property
    def cache_hit_ratio(self) -> float | None:
        """Share of the prompt read from the provider's cache (None: not reported)."""
        if not self.prompt_tokens or self.cache_read_tokens is None:
            return None
        return round(self.cache_read_tokens / self.prompt_tokens, 4)

    @property
    def compaction_how(self) -> str:
        """``summarized``, ``reused``, ``background-applied``, ``failed`` or empty."""
        if self.compaction:
            return self.compaction.split(";", 1)[0].strip()
        return "failed" if self.compaction_failed else ""

    def summary(self) -> dict[str, Any]:
        """The list entry of the inspector (no bodies)."""
        return {
            "request_id": self.request_id, "time": self.started_at, "model": self.model,
            "deployment": self.deployment, "wire": self.wire, "stream": self.stream,
            "status": self.status, "ms": round(self.duration * 1000, 3),
            "added_ms": round(self.added_seconds * 1000, 3), "attempts": self.chat_attempts,
            "repairs": self.repairs, "recovery": self.recovery,
            "compaction": self.compaction_how, "session_id": self.session_id,
            "client_key_id": self.client_key_id, "owner": self.owner,
            "owner_name": self.owner_name, "policy": self.policy,
            "would_repair": self.would_repair, "rejected": bool(self.violations),
            "invisible": self.invisible.total if self.invisible is not None else 0,
            "condensed_outputs": self.condensed_outputs,
            "condensed_saved_chars": self.condensed_saved_chars,
            "condensed_action": self.condensed_action,
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens, "disconnected": self.disconnected,
            "context": None if self.context is None else self.context.as_dict(),
            "prefix": None if self.prefix is None else self.prefix.as_dict(),
            "cache_read_tokens": self.cache_read_tokens,
            "cache_write_tokens": self.cache_write_tokens,
            "cache_hit_ratio": self.cache_hit_ratio,
        }

    def detail(self) -> dict[str, Any]:
        """Everything the inspector's request page shows."""
        out = self.summary()
        out.update({
            "path": self.path, "provider": self.provider, "strict": self.strict,
            "anomalies": [a.as_dict() for a in self.anomalies],
            "attempts_detail": [a.as_dict() for a in self.attempts],
            "compaction_header": self.compaction, "compaction_failed": self.compaction_failed,
            "upstream_ms": round(self.upstream_seconds * 1000, 3),
            "ttfb_ms": None if self.ttfb is None else round(self.ttfb * 1000, 3),
            "backoff_ms": round(self.backoff_seconds * 1000, 3),
            "response_model": self.response_model, "error": self.error,
            "client_messages": self.client_messages,
            "upstream_messages": self.upstream_messages,
            "would_repair_anomalies": [a.as_dict() for a in self.would_anomalies],
            "violations": self.violations,
            "invisible_detail": None if self.invisible is None else {
                "action": self.invisible_action, "total": self.invisible.total,
                "counts": self.invisible.counts,
                "findings": [f.as_dict() for f in self.invisible.findings[:200]],
                "hidden_text": self.invisible.hidden_text()},
        })
        return out
