"""Answering the recall tool inside the gateway (issue 15): the I/O around the pure parts in
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
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

import orjson

from gateway.compaction.recall import (
    RecallSettings,
    answer_call,
    client_tool_names,
    offers_recall,
    parse_args,
    pick_tool_name,
    recall_settings,
    render_lines,
    scan_bounds,
    tool_schema,
    with_tool,
)
from gateway.compaction.recall_wire import (
    ModelAnswer,
    SseEvents,
    StreamAssembler,
    ToolCall,
    answer_from_completion,
    signal,
)
from gateway.config import ApiKeyEntry, GatewayConfig
from gateway.providers.base import UpstreamError, UpstreamResponse
from gateway.providers.failure import UpstreamFailure
from gateway.providers.openai_compat import BufferedResponse
from gateway.sessions.archive import MAX_READ_LINES, Archive

if TYPE_CHECKING:
    from gateway.routing import ModelRoute

MAX_TOOL_ANSWER: Final = 4 * 1024 * 1024  # bytes of a streamed tool-call answer held back
LAST_ROUND_NOTE: Final = ("\n(This was the last recall this request allows: answer now with "
                          "what you have.)")
NO_ARCHIVE: Final = "The archive of this conversation is not available."


@dataclass(frozen=True, slots=True)
class RecallScope:
    """The archive lines a request may recall: the line ranges of the compactions whose
    prefixes the request carries (its own messages), in its owner's namespace."""

    session_id: str
    key: str
    ranges: tuple[tuple[int, int], ...]  # sorted, inclusive
    archive: Archive

    @property
    def last_line(self) -> int:
        """The last line it may read."""
        return self.ranges[-1][1] if self.ranges else 0


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
    found: list[RecallScope | None] = field(default_factory=list)


def _secrets(config: GatewayConfig) -> tuple[str, ...]:
    found = {m.litellm_params.api_key for m in config.model_list}
    found.update(k.key if isinstance(k, ApiKeyEntry) else k for k in config.gateway.api_keys)
    return tuple(sorted((s for s in found if s and len(s) >= 8), key=len, reverse=True))


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
    ) -> UpstreamResponse:
        """The answer for the client: recall calls answered and the model asked again until
        it answers without them. Raises UpstreamError when a follow-up fails twice."""
        run = _Run(offer, stream, send, scope, deadline, report, body)
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
        response, next_body = await self._after(body, spoken, run)
        return response if next_body is None else await self._answer(response, next_body, run)

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


# -- reading an answer ------------------------------------------------------------------


@dataclass(slots=True)
class HeldStream:
    """A stream whose first bytes were held back while the gateway looked at them."""

    inner: UpstreamResponse
    head: bytes
    rest: AsyncIterator[bytes] | None
    status: int
    content_type: str
    relay_headers: tuple[tuple[str, str], ...]

    async def chunks(self) -> AsyncIterator[bytes]:
        """The held bytes, then the rest as it arrives."""
        if self.head:
            yield self.head
        if self.rest is not None:
            async for chunk in self.rest:
                yield chunk

    async def aclose(self) -> None:
        """Close the reader and the upstream response."""
        rest = self.rest
        if rest is not None and hasattr(rest, "aclose"):
            await rest.aclose()
        await self.inner.aclose()


async def inspect(response: UpstreamResponse, stream: bool
                  ) -> tuple[ModelAnswer | None, UpstreamResponse | None]:
    """Read as much of ``response`` as it takes to know whether it calls tools.

    Returns the answer when it is a tool-call answer (None for text), and the response to
    relay when the answer is not consumed by the caller (None after a complete tool-call
    stream was read: the caller decides). A text stream is held back only until its first
    text (or end); a tool-call stream is read to its end.
    """
    if not stream or not response.content_type.startswith("text/event-stream"):
        try:
            raw = b"".join([chunk async for chunk in response.chunks()])
        finally:
            await response.aclose()
        held = BufferedResponse(raw, response.status, response.content_type,
                                response.relay_headers)
        return answer_from_completion(raw), held
    source = response.chunks()
    events = SseEvents()
    assembler = StreamAssembler()
    buffered: list[bytes] = []
    size = 0
    tools = False
    try:
        async for chunk in source:
            buffered.append(chunk)
            size += len(chunk)
            for event in events.feed(chunk):
                assembler.add(event)
                if not tools:
                    seen = signal(event)
                    if seen == "text":
                        return None, _held(response, buffered, source)
                    tools = seen == "tools"
            if tools and size > MAX_TOOL_ANSWER:
                return None, _held(response, buffered, source)
            if events.done and not tools:
                break
    except BaseException:  # cancelled (client gone, deadline): release the upstream
        await source.aclose()  # type: ignore[attr-defined]
        await response.aclose()
        raise
    if not tools:
        return None, _held(response, buffered, source)
    answer = assembler.answer()
    return answer, _held(response, buffered, None)


def _held(response: UpstreamResponse, buffered: list[bytes],
          rest: AsyncIterator[bytes] | None) -> HeldStream:
    return HeldStream(response, b"".join(buffered), rest, response.status,
                      response.content_type, response.relay_headers)


class RawEvents:
    """Splits SSE bytes into whole events: ``(bytes to relay, the data object or None)``."""

    def __init__(self) -> None:
        self._pending = b""

    def feed(self, chunk: bytes) -> list[tuple[bytes, dict[str, Any] | None]]:
        """The complete events in ``chunk`` (with what was pending before it)."""
        *events, self._pending = (self._pending + chunk).replace(b"\r\n", b"\n").split(b"\n\n")
        out: list[tuple[bytes, dict[str, Any] | None]] = []
        for event in events:
            parsed = SseEvents().feed(event + b"\n\n")
            out.append((event + b"\n\n", parsed[0] if parsed else None))
        return out

    def rest(self) -> bytes:
        """Bytes after the last complete event."""
        return self._pending


def _calls_tool(chunk: dict[str, Any], name: str) -> bool:
    choices = chunk.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        return False
    delta = choices[0].get("delta")
    calls = delta.get("tool_calls") if isinstance(delta, dict) else None
    return isinstance(calls, list) and any(
        isinstance(c, dict) and isinstance(c.get("function"), dict)
        and c["function"].get("name") == name for c in calls)


class SplicedStream:
    """A text stream relayed event by event; when it turns into a recall call, the call
    and the rest of that answer are held back, answered, and the next answer (from
    ``resume``) continues the same stream, so the client sees one answer and no recall."""

    def __init__(self, held: HeldStream, name: str,
                 resume: Callable[[ModelAnswer], Awaitable[UpstreamResponse]]) -> None:
        self.held = held
        self.name = name
        self.resume = resume
        self.status = held.status
        self.content_type = held.content_type
        self.relay_headers = held.relay_headers
        self._next: UpstreamResponse | None = None

    async def chunks(self) -> AsyncIterator[bytes]:
        """The events as they come; after a recall call, the next answer's."""
        events = RawEvents()
        assembler = StreamAssembler()
        captured = False
        async for chunk in self.held.chunks():
            for raw, parsed in events.feed(chunk):
                if parsed is not None:
                    assembler.add(parsed)
                    captured = captured or _calls_tool(parsed, self.name)
                if not captured:
                    yield raw
        if not captured:
            if events.rest():
                yield events.rest()
            return
        await self.held.aclose()
        try:
            self._next = await self.resume(assembler.answer())
        except UpstreamError as err:
            error = {"error": {"message": err.failure.message, "type": "api_error",
                               "param": None, "code": err.failure.code or str(err.failure.status)}}
            yield b"data: " + orjson.dumps(error) + b"\n\n"
            return
        async for chunk in self._next.chunks():
            yield chunk

    async def aclose(self) -> None:
        """Close the held stream and the next answer's."""
        await self.held.aclose()
        if self._next is not None:
            await self._next.aclose()
