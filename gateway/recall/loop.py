"""Answering the recall tool inside the gateway: the I/O around the pure parts in
``recall`` and ``recall_wire``.

The driver calls :meth:`RecallTool.add` when it builds the body of a request whose history
carries a stored compaction, and :meth:`RecallTool.answer` with the upstream's answer to
such a body. When the model calls only the recall tool (or the recall tool among the
client's tools), the calls are answered from the session's archive, appended after the
sent messages with their results, and the model is asked again, up to
``compaction.recall_rounds`` rounds within the request deadline. The client gets the last
answer and never sees a recall turn; nothing is stored, so the next request's prefix (and the
provider's prompt cache) is what it would have been without the tool.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

from gateway.compaction.recall_scope import RecallScope, RecallSettings, recall_settings
from gateway.config import GatewayConfig
from gateway.providers.base import UpstreamError, UpstreamResponse
from gateway.providers.failure import UpstreamFailure
from gateway.recall.stream import HeldStream, SplicedStream, inspect
from gateway.recall.tool import (
    answer_call,
    client_tool_names,
    offers_recall,
    parse_args,
    pick_tool_name,
    render_lines,
    scan_bounds,
    tool_schema,
    with_tool,
)
from gateway.recall.wire import ModelAnswer, ToolCall
from gateway.redact import MIN_SECRET_CHARS
from gateway.sessions.archive import MAX_READ_LINES

if TYPE_CHECKING:
    from gateway.routing import ModelRoute

LAST_ROUND_NOTE: Final = ("\n(This was the last recall this request allows: answer now with "
                          "what you have.)")
NO_ARCHIVE: Final = "The archive of this conversation is not available."


@dataclass(frozen=True, slots=True)
class Offer:
    """The recall tool as offered to one request."""

    name: str
    tool: dict[str, Any]
    settings: RecallSettings


@dataclass(slots=True)
class RecallReport:
    """What the recall did for one request: for the header, span events and metrics."""

    calls: int = 0
    rounds: int = 0
    events: list[tuple[str, dict[str, str | int]]] = field(default_factory=list)

    def note(self, name: str, **attributes: str | int) -> None:
        """Record one event."""
        self.events.append((name, attributes))


Send = Callable[[dict[str, Any]], Awaitable[UpstreamResponse]]
ScopeLookup = Callable[[], Awaitable[RecallScope | None]]


@dataclass(slots=True)
class _Run:
    """One request's recall loop: what it was offered, how to ask, what it found."""

    offer: Offer
    stream: bool
    send: Send
    scope: ScopeLookup
    deadline: float
    report: RecallReport
    original: dict[str, Any]  # the body first sent (the fallback drops the tool from it)
    late: Callable[[int], None] | None = None  # told of calls answered mid-stream
    found: list[RecallScope | None] = field(default_factory=list)


def _secrets(config: GatewayConfig) -> tuple[str, ...]:
    found = config.secrets()  # the master key and secrets from the environment included
    return tuple(sorted((s for s in found if len(s) >= MIN_SECRET_CHARS), key=len, reverse=True))


class RecallTool:
    """The recall tool of a gateway: offers it, answers it. One per driver."""

    def __init__(self, config: GatewayConfig) -> None:
        self.config = config
        self.secrets = _secrets(config)
        self._settings: dict[str, RecallSettings] = {}

    def settings(self, route: ModelRoute) -> RecallSettings:
        """The model's recall settings (resolved once)."""
        found = self._settings.get(route.name)
        if found is None:
            found = self._settings[route.name] = recall_settings(self.config, route)
        return found

    def offer(self, route: ModelRoute, client_body: dict[str, Any]) -> Offer | None:
        """The tool this request gets when its history carries a compaction (None: none)."""
        settings = self.settings(route)
        if not settings.enabled or not offers_recall(client_body):
            return None
        name = pick_tool_name(settings.tool, client_tool_names(client_body))
        return Offer(name, tool_schema(name, settings.tool), settings)

    def add(self, route: ModelRoute, client_body: dict[str, Any]) -> dict[str, Any]:
        """The client's body with the tool added after its own, for a history carrying a
        compaction (the upstream body is built from it: an Anthropic cache breakpoint then
        marks the end of the tools, the recall tool included)."""
        offer = self.offer(route, client_body)
        return client_body if offer is None else with_tool(client_body, offer.tool)

    def offered(self, route: ModelRoute, client_body: dict[str, Any],
                body: dict[str, Any]) -> Offer | None:
        """The offer ``body`` was sent with, or None when it carries no recall tool."""
        tools = body.get("tools")
        if not isinstance(tools, list) or not tools:
            return None
        offer = self.offer(route, client_body)
        # Its name is no client tool's, so a sent tool of that name is the gateway's.
        return offer if offer is not None and offer.name in _tool_names(tools) else None

    async def answer(
        self, response: UpstreamResponse, body: dict[str, Any], offer: Offer, *,
        stream: bool, send: Send, scope: ScopeLookup, deadline: float, report: RecallReport,
        late: Callable[[int], None] | None = None,
    ) -> UpstreamResponse:
        """The answer for the client: recall calls answered and the model asked again until
        it answers without them. Raises UpstreamError when a follow-up fails twice.
        ``late`` is told how many calls were answered after the response was returned
        (a streamed answer that called the tool after its first text)."""
        run = _Run(offer, stream, send, scope, deadline, report, body, late)
        return await self._answer(response, body, run)

    async def _answer(self, response: UpstreamResponse, body: dict[str, Any], run: _Run
                      ) -> UpstreamResponse:
        while True:
            answer, relay = await _inspect_by(response, run.stream, run.deadline)
            calls = [] if answer is None else answer.calls_named(run.offer.name)
            if not calls:
                assert relay is not None
                if isinstance(relay, HeldStream) and relay.rest is not None:
                    # A text stream is relayed as it comes; should it end in a recall call,
                    # the call is answered and the next answer continues the same stream.
                    return SplicedStream(relay, run.offer.name,
                                         functools.partial(self._resume, body, run))
                return relay
            assert answer is not None
            if relay is not None:
                await relay.aclose()
            response, next_body = await self._after(body, answer, run)
            if next_body is None:
                return response
            body = next_body

    async def _resume(self, body: dict[str, Any], run: _Run, spoken: ModelAnswer
                      ) -> UpstreamResponse:
        """After a text stream ended in a recall call: answer it, ask again."""
        before = run.report.calls
        try:
            response, next_body = await self._after(body, spoken, run)
            if next_body is not None:
                response = await self._answer(response, next_body, run)
        finally:
            if run.late is not None and run.report.calls > before:
                run.late(run.report.calls - before)
        return response

    async def _after(self, body: dict[str, Any], answer: ModelAnswer, run: _Run
                     ) -> tuple[UpstreamResponse, dict[str, Any] | None]:
        """Answer the recall calls of ``answer`` and ask again: the new response and the body
        it answers (None for the last answer, asked with tools off after the last round)."""
        calls = answer.calls_named(run.offer.name)
        report = run.report
        if report.rounds >= run.offer.settings.rounds:
            # Out of rounds and the model still asks: one last answer, tools off.
            report.note("gateway.recall.limit", rounds=report.rounds)
            final = {**body, "tool_choice": "none"}
            return await self._follow_up(final, run), None
        if not run.found:
            run.found.append(await run.scope())
        last_round = report.rounds + 1 >= run.offer.settings.rounds
        results = [await self._run(call, run.found[0], run.offer, report, last_round)
                   for call in calls]
        report.rounds += 1
        body = _appended(body, answer, calls, results, report.rounds)
        return await self._follow_up(body, run), body

    async def _follow_up(self, body: dict[str, Any], run: _Run) -> UpstreamResponse:
        """Ask again within the deadline; on a refusal, ask as if there were no recall tool
        (the request the gateway would have sent without it)."""
        try:
            return await _bounded(run.send(body), run.deadline)
        except UpstreamError as err:
            run.report.note("gateway.recall.failed", status=err.failure.status)
            without = dict(run.original)
            tools = [t for t in run.original.get("tools") or ()
                     if run.offer.name not in _tool_names([t])]
            if tools:
                without["tools"] = tools
            else:
                without.pop("tools", None)
            return await _bounded(run.send(without), run.deadline)

    async def _run(self, call: ToolCall, scope: RecallScope | None, offer: Offer,
                   report: RecallReport, last_round: bool) -> str:
        """The tool result of one call (never raises: problems are told to the model)."""
        report.calls += 1
        if scope is None or scope.last_line < 1:
            report.note("gateway.recall", outcome="no_archive")
            return NO_ARCHIVE
        args = parse_args(call.arguments, scope.last_line)
        if isinstance(args, str):
            report.note("gateway.recall", outcome="bad_arguments")
            return f"Error: {args}"
        first, last = scan_bounds(args)
        messages = await _read(scope, first, last)
        text = await asyncio.to_thread(
            lambda: answer_call(render_lines(messages, self.secrets), args, scope.session_id,
                                scope.ranges, offer.settings.max_chars))
        report.note("gateway.recall", outcome="ok", first_line=args.first,
                    last_line=args.last, mode="search" if args.query else "range",
                    chars=len(text))
        return text + (LAST_ROUND_NOTE if last_round else "")


def _tool_names(tools: list[Any]) -> set[str]:
    return client_tool_names({"tools": tools})


async def _read(scope: RecallScope, first: int, last: int) -> list[tuple[int, Any]]:
    """The numbered messages of lines ``first..last`` within the scope's ranges."""
    out: list[tuple[int, Any]] = []
    for low, high in scope.ranges:
        start, stop = max(first, low), min(last, high)
        while start <= stop:
            end = min(stop, start + MAX_READ_LINES - 1)
            chunk = await scope.archive.read(scope.key, start, end)
            out.extend(enumerate(chunk, start=start))
            if len(chunk) < end - start + 1:
                break
            start = end + 1
    return out


_DEADLINE = UpstreamFailure(504, "gateway", "the request deadline passed while the gateway "
                            "answered the model's recall calls", code="deadline_exceeded")


async def _inspect_by(response: UpstreamResponse, stream: bool, deadline: float
                      ) -> tuple[ModelAnswer | None, UpstreamResponse | None]:
    """``inspect`` within the deadline (a tool-call answer is read to its end)."""
    try:
        async with asyncio.timeout(max(0.0, deadline - time.monotonic())):
            return await inspect(response, stream)
    except TimeoutError:
        await response.aclose()
        raise UpstreamError(_DEADLINE) from None


async def _bounded(call: Awaitable[UpstreamResponse], deadline: float) -> UpstreamResponse:
    remaining = deadline - time.monotonic()
    failure = _DEADLINE
    if remaining <= 0:
        if asyncio.iscoroutine(call):
            call.close()
        raise UpstreamError(failure)
    try:
        async with asyncio.timeout(remaining):
            return await call
    except TimeoutError:
        raise UpstreamError(failure) from None


def _appended(body: dict[str, Any], answer: ModelAnswer, calls: Sequence[ToolCall],
              results: Sequence[str], round_number: int) -> dict[str, Any]:
    """``body`` with the model's recall calls (only those) and their results appended."""
    wired = [c.wire(f"call_recall_{round_number}_{i}") for i, c in enumerate(calls)]
    assistant = {"role": "assistant", "content": answer.content, "tool_calls": wired}
    tools = [{"role": "tool", "tool_call_id": w["id"], "content": r}
             for w, r in zip(wired, results, strict=True)]
    out = dict(body)
    out["messages"] = [*body["messages"], assistant, *tools]
    return out
