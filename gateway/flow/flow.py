"""The record of one chat request: everything the gateway did for it, in one place.

A :class:`Flow` is created by the server for each validated request, filled in by the
driver (``gateway.flow.driver``) as it runs, and read at the edge (``gateway.flow.render``)
to produce the response headers, the give-up body, span attributes, metrics and the log
line. No module writes headers to tell another module something: they write the Flow.

Times are ``time.monotonic()`` seconds. Extend it with fields, not with side channels.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from gateway.compaction.outcome import CompactionOutcome, PreparedHistory
from gateway.compaction.session_view import KnownHistory
from gateway.projection.anomalies import Anomaly, Message, Projection
from gateway.projection.condense import Condensed
from gateway.projection.invisible import Scan
from gateway.providers.base import UpstreamResponse
from gateway.recall.loop import RecallReport
from gateway.recovery.policy import GiveUp
from gateway.router.request_fields import NO_OPTIONS, RequestOptions
from gateway.telemetry.context import ContextBreakdown, EdgeTurn
from gateway.telemetry.prefix import PrefixBreak, session_key
from gateway.telemetry.usage import Usage

if TYPE_CHECKING:
    from gateway.routing import ModelRoute
    from gateway.wires.base import WireCodec

AttemptKind = Literal["chat", "summary", "recall"]

__all__ = ["Attempt", "ChatRequest", "CompactionOutcome", "Flow", "FlowEvent",
           "KnownHistory", "PreparedHistory", "Refusal"]


@dataclass(slots=True)
class ChatRequest:
    """One validated client request."""

    body: dict[str, Any]
    raw: bytes
    messages: list[Message]
    route: ModelRoute
    stream: bool
    request_id: str
    session_id: str | None = None
    owner: str | None = None
    options: RequestOptions = NO_OPTIONS  # LiteLLM-only fields the client sent
    client_wire: str = "chat"  # the API the client spoke: chat, responses or anthropic
    # A request translated from another wire (``client_wire``) to Chat Completions: for each
    # message, the client's message or input item it came from (None: a top-level field),
    # so what the gateway tells the client names the client's own positions.
    positions: tuple[int | None, ...] | None = None
    # A native non-chat wire (Responses, Anthropic Messages): it builds the upstream body
    # from the projected neutral messages and names the provider that sends it.
    wire: WireCodec | None = None
    known: KnownHistory | None = None  # set when ``messages`` are the client's, as read
    # The repair policy of this request (``repair``, ``report``, ``reject``) and its owner's
    # name as configured (the metrics' bounded owner label), set when its Flow is made.
    policy: str = "repair"
    owner_name: str = ""
    tool_outputs: str = "keep"  # ``condense``: tool results written in fewer tokens
    # What the gateway changed before projecting (invisible characters stripped).
    read_anomalies: tuple[Anomaly, ...] = ()
    # Fields the gateway wrote translating the client's wire (``reasoning_effort`` from a
    # Responses ``reasoning.effort``): left out when the upstream refuses one as
    # unsupported, whatever ``drop_params`` says (the client did not send them so).
    optional_fields: frozenset[str] = frozenset()

    @property
    def edge_turn(self) -> EdgeTurn | None:
        """Which body ``messages`` are and which kept one they were read over (per-session
        telemetry compares turns by it), when the edge read them."""
        known = self.known
        return None if known is None else EdgeTurn(known.turn, known.extends, known.reused,
                                                    known.counted)

    def laid_over(self, sent: object) -> list[Message] | None:
        """The previous turn's sent list when ``sent`` is this turn's projection laid out
        over it (its items begin ``sent``: ``TurnLayouts.extends``), else None: per-session
        telemetry then needs no walk to compare the two."""
        layouts = self.known.layouts if self.known is not None else None
        return layouts.extends(sent) if layouts is not None else None

    def session_key(self) -> str:
        """The session per-session telemetry (the context report, prefix stability) counts
        this turn within: the owner's, on the route's model (``telemetry.prefix.session_key``),
        with the fingerprint the edge computed when it read the body."""
        return session_key(self.route.name, self.session_id, self.messages,
                           self.known.fingerprint if self.known is not None else None,
                           self.owner)


@dataclass(slots=True)
class Attempt:
    """One upstream call made for the request: a chat attempt or a summary call.

    ``ttfb`` is when the upstream's answer head (status, first event of a stream) arrived;
    ``ended`` when the call returned or failed. ``verdict`` is ``"ok"`` or the classifier's
    verdict of the refusal.
    """

    kind: AttemptKind
    model: str
    started: float
    deployment: str = ""  # the route's LiteLLM model (``provider/model``)
    number: int = 0
    step: str | None = None
    structure: str = "default"
    media: str = "original"
    ended: float | None = None
    ttfb: float | None = None
    status: int | None = None
    verdict: str | None = None
    deployment_id: str = ""  # the deployment of the model group (``model_info.id``)
    cooldown: float = 0.0  # seconds the deployment was cooled down for after this refusal

    def finish(self, status: int, verdict: str) -> None:
        """Record the end of the call."""
        self.ended = time.monotonic()
        self.status = status
        self.verdict = verdict
        if verdict == "ok":
            self.ttfb = self.ended

    def report(self) -> dict[str, Any]:
        """The attempt as listed in the give-up body's ``gateway.attempts``."""
        out: dict[str, Any] = {"number": self.number, "step": self.step,
                               "structure": self.structure, "media": self.media,
                               "model": self.model}
        if self.deployment_id:
            out["deployment"] = self.deployment_id
        if self.cooldown:
            out["cooldown"] = self.cooldown
        if self.status is not None:
            out["status"] = self.status
        if self.verdict is not None and self.verdict != "ok":
            out["verdict"] = self.verdict
        return out


@dataclass(frozen=True, slots=True)
class Refusal:
    """The gateway's own answer when it cannot forward (no upstream refusal to relay)."""

    status: int
    message: str
    code: str | None = None
    param: str | None = None
    reason: str | None = None  # a give-up reason (``deadline: ...``) for ``gateway.gave_up``
    # What is wrong with a refused request, item by item (the ``reject`` policies).
    violations: tuple[dict[str, Any], ...] = ()


@dataclass(slots=True)
class FlowEvent:
    """A timestamped note of something the driver did (compaction started, lock waited)."""

    at: float
    name: str
    detail: str = ""


@dataclass(slots=True)
class Flow:
    """One request, from validation to the first byte of the answer (or the give-up)."""

    request: ChatRequest
    deadline: float  # monotonic time by which the request must be answered or given up
    started: float = field(default_factory=time.monotonic)
    history: PreparedHistory | None = None
    context_level: str | None = None
    context: ContextBreakdown | None = None  # tokens by source (x-gateway-context)
    prefix: PrefixBreak | None = None  # where the prompt left the last turn's prefix
    compactions: list[CompactionOutcome] = field(default_factory=list)  # in order
    attempts: list[Attempt] = field(default_factory=list)
    events: list[FlowEvent] = field(default_factory=list)
    steps: tuple[str, ...] = ()  # ladder steps taken (x-gateway-recovery)
    projection: Projection | None = None  # the projection of the answered attempt
    # The projection of the last attempt sent, when none was answered (its repairs are
    # reported with the refusal, which quotes that body).
    refused_projection: Projection | None = None
    strict: bool = False  # the answered attempt was strictly projected
    response: UpstreamResponse | None = None
    give_up: GiveUp | None = None
    refusal: Refusal | None = None
    served_by: ModelRoute | None = None  # the deployment of the last chat attempt
    moved_from: str | None = None  # the group a context-window fallback left before sending
    backoff: float = 0.0  # seconds the ladder waited before resending
    sent: list[Message] | None = None  # the messages the answering upstream received
    sent_input: list[Any] | None = None  # a native Responses request's ``input`` as sent
    # The answer's way to the client, written by the edge while it relays it.
    received: float | None = None  # when the edge began reading the request (monotonic)
    relayed: float | None = None  # when the last byte of the answer was written
    input_tokens: int | None = None  # the upstream's ``usage``, streams included
    output_tokens: int | None = None
    cache: Usage | None = None  # the whole usage: prompt-cache reads and writes
    response_model: str = ""
    disconnected: bool = False  # the client went away before the answer was written
    recall: RecallReport | None = None  # the recall tool's calls answered
    # ``report`` policy: what repair would have changed (the request went as sent).
    would_repair: tuple[Anomaly, ...] = ()
    rejected: bool = False  # refused by a ``reject`` policy (``refusal`` says what)
    invisible: Scan | None = None  # invisible characters found (``invisible_mode`` did)
    invisible_mode: str = "off"
    condensed: Condensed | None = None  # the tool results condensed in what was sent
    # False when nothing is traced (no exporter, no client trace context): spans are skipped.
    traced: bool = True

    @property
    def route(self) -> ModelRoute:
        """The route the request addressed."""
        return self.request.route

    def remaining(self) -> float:
        """Seconds left before the deadline (never negative)."""
        return max(0.0, self.deadline - time.monotonic())

    def elapsed(self) -> float:
        """Seconds since the request began."""
        return time.monotonic() - self.started

    def release_bodies(self) -> None:
        """Drop the parsed request and history once only relaying is left (a parsed history
        holds about twice its JSON size, and a stream may stay open for minutes). What the
        report needs stays: the repairs' anomalies, the attempts, the timings."""
        self.request.body, self.request.raw, self.request.messages = {}, b"", []
        self.history = None
        self.sent = self.sent_input = None
        if self.projection is not None:
            self.projection = Projection([], self.projection.anomalies)

    def note(self, name: str, detail: str = "") -> None:
        """Append an event."""
        self.events.append(FlowEvent(time.monotonic(), name, detail))

    def start_attempt(self, kind: AttemptKind, model: str, **plan: Any) -> Attempt:
        """Open the record of one upstream call."""
        attempt = Attempt(kind=kind, model=model, started=time.monotonic(), **plan)
        self.attempts.append(attempt)
        return attempt

    @property
    def compaction(self) -> CompactionOutcome | None:
        """The last compaction applied to the history sent (None when none was)."""
        applied = [c for c in self.compactions if c.how is not None]
        return applied[-1] if applied else None

    @property
    def compaction_failed(self) -> str | None:
        """Why the last compaction that was needed could not be made (None if none failed)."""
        failed = [c.failed for c in self.compactions if c.failed]
        return failed[-1] if failed else None

    @property
    def answered(self) -> Attempt | None:
        """The chat attempt whose answer is relayed (None after a give-up or refusal)."""
        chat = self.chat_attempts
        return chat[-1] if self.response is not None and chat else None

    @property
    def chat_attempts(self) -> list[Attempt]:
        """The attempts that sent the client's request (summary calls left out)."""
        return [a for a in self.attempts if a.kind == "chat"]

    @property
    def status(self) -> int:
        """The HTTP status the client gets."""
        if self.response is not None:
            return self.response.status
        if self.refusal is not None:
            return self.refusal.status
        if self.give_up is not None:
            return self.give_up.failure.status
        return 500
