"""A stream, once started, always ends with the wire's own terminal event and a correctly
closed chunked body, whatever fails after the first byte: garbage, a cut connection, data
that is not JSON, an exception in the gateway's own translation. Through real sockets, on
every wire and route kind (chat; Responses and Messages translated to a chat upstream, or
relayed from a native one)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import orjson
import pytest

from tests.conftest import GatewayFactory, RunningGateway, model_entry
from tests.fakes.faulty_upstream import FaultyUpstream, chunk_event, stream
from tests.fakes.raw_http import exchange
from tests.server.wire_sse import assert_ends_with_wire_error, sse_events

ANTHROPIC_START = (
    b'event: message_start\ndata: {"type":"message_start","message":{"id":"msg_1",'
    b'"type":"message","role":"assistant","model":"up","content":[],"stop_reason":null,'
    b'"usage":{"input_tokens":5,"output_tokens":1}}}\n\n'
    b'event: content_block_start\ndata: {"type":"content_block_start","index":0,'
    b'"content_block":{"type":"text","text":""}}\n\n'
    b'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,'
    b'"delta":{"type":"text_delta","text":"hello "}}\n\n')
ANTHROPIC_END = (
    b'event: content_block_stop\ndata: {"type":"content_block_stop","index":0}\n\n'
    b'event: message_delta\ndata: {"type":"message_delta","delta":{"stop_reason":"end_turn"},'
    b'"usage":{"output_tokens":2}}\n\n'
    b'event: message_stop\ndata: {"type":"message_stop"}\n\n')
RESPONSES_START = (
    b'event: response.created\ndata: {"type":"response.created","sequence_number":0,'
    b'"response":{"id":"resp_1","object":"response","status":"in_progress","model":"up",'
    b'"output":[]}}\n\n'
    b'event: response.output_text.delta\ndata: {"type":"response.output_text.delta",'
    b'"sequence_number":1,"item_id":"msg_1","output_index":0,"content_index":0,'
    b'"delta":"hello "}\n\n')
RESPONSES_END = (
    b'event: response.completed\ndata: {"type":"response.completed","sequence_number":2,'
    b'"response":{"id":"resp_1","object":"response","status":"completed","model":"up",'
    b'"output":[]}}\n\n')
CHAT_START = chunk_event("hello ")
CHAT_END = chunk_event("there") + b"data: [DONE]\n\n"

# (name, client wire, model, the upstream's first events, the rest of a good stream)
ROUTES = [
    ("chat", "chat", "m", CHAT_START, CHAT_END),
    ("responses-translated", "responses", "m", CHAT_START, CHAT_END),
    ("messages-translated", "anthropic", "m", CHAT_START, CHAT_END),
    ("responses-native", "responses", "r", RESPONSES_START, RESPONSES_END),
    ("messages-native", "anthropic", "c", ANTHROPIC_START, ANTHROPIC_END),
]
FAULTS = {
    "garbage": b"<html>this is not an event stream</html>\n\n",
    "cut": b"",  # the upstream closes the connection after its first events
    "invalid-json": b'data: {"choices": [{"delta": {"content": "x"\n\n',
}


@pytest.fixture
async def up() -> AsyncIterator[FaultyUpstream]:
    async with FaultyUpstream() as server:
        yield server


@pytest.fixture
async def gw(gateway_factory: GatewayFactory, up: FaultyUpstream) -> RunningGateway:
    return await gateway_factory({"model_list": [
        model_entry("m", up.base_url, responses_api=False),  # chat only: translated
        model_entry("r", up.base_url, responses_api=True),
        model_entry("c", up.base_url, model="anthropic/claude-up"),
    ]})


def request_bytes(wire: str, model: str) -> bytes:
    """A streamed request on ``wire``, asking the server to close the connection after."""
    if wire == "chat":
        path, body = "/v1/chat/completions", {"model": model, "stream": True,
                                              "messages": [{"role": "user", "content": "hi"}]}
    elif wire == "responses":
        path, body = "/v1/responses", {"model": model, "input": "hi", "stream": True}
    else:
        path, body = "/v1/messages", {"model": model, "max_tokens": 50, "stream": True,
                                      "messages": [{"role": "user", "content": "hi"}]}
    data = orjson.dumps(body)
    return (f"POST {path} HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(data)}\r\nConnection: close\r\n\r\n").encode() + data


def dechunk(body: bytes) -> tuple[bytes, bool]:
    """The payload of a chunked body and whether it ended with its zero-length chunk."""
    out = bytearray()
    rest = body
    while rest:
        size_line, sep, rest = rest.partition(b"\r\n")
        if not sep:
            return bytes(out), False
        size = int(size_line.split(b";")[0], 16)
        if size == 0:
            return bytes(out), rest == b"\r\n"
        out += rest[:size]
        if rest[size:size + 2] != b"\r\n":
            return bytes(out), False
        rest = rest[size + 2:]
    return bytes(out), False


async def streamed(gw: RunningGateway, wire: str, model: str) -> list[tuple[str | None, Any]]:
    """Send a streamed request over a raw socket: its events, after checking the HTTP side
    (one 200, a correctly closed chunked body, nothing written after it)."""
    answer = await exchange(gw.root, request_bytes(wire, model))
    assert answer.status == 200, answer.body[:600]
    assert answer.headers["transfer-encoding"] == "chunked"
    payload, closed = dechunk(answer.body)
    assert closed, f"the chunked body was not closed: {answer.body[-200:]!r}"
    assert b"HTTP/1.1" not in answer.body
    return sse_events(payload)


def text_of(wire: str, events: list[tuple[str | None, Any]]) -> str:
    """The text the client got before the end."""
    if wire == "chat":
        return "".join(d["choices"][0]["delta"].get("content") or "" for _, d in events
                       if isinstance(d, dict) and d.get("choices"))
    if wire == "responses":
        return "".join(d["delta"] for n, d in events if n == "response.output_text.delta")
    return "".join(d["delta"].get("text", "") for n, d in events if n == "content_block_delta")


@pytest.mark.parametrize("fault", list(FAULTS))
@pytest.mark.parametrize(("route", "wire", "model", "start", "end"), ROUTES,
                         ids=[r[0] for r in ROUTES])
async def test_a_stream_that_breaks_after_its_first_byte_ends_in_the_wire_shape(
    gw: RunningGateway, up: FaultyUpstream, route: str, wire: str, model: str, start: bytes,
    end: bytes, fault: str,
) -> None:
    up.then(stream(start, FAULTS[fault]))
    events = await streamed(gw, wire, model)
    assert text_of(wire, events) == "hello "  # what came before the failure was relayed
    message = assert_ends_with_wire_error(wire, events)
    assert "upstream of model" in message


def raise_on(cls: type, name: str, marker: bytes, monkeypatch: pytest.MonkeyPatch) -> None:
    """Make ``cls.name`` raise when it is given a chunk holding ``marker`` (a bug in the
    gateway's own code, met after the stream began)."""
    original: Callable[..., Any] = getattr(cls, name)

    def broken(self: Any, chunk: Any) -> Any:
        if marker in (chunk if isinstance(chunk, bytes) else orjson.dumps(chunk)):
            raise RuntimeError("a bug in the translation")
        return original(self, chunk)

    monkeypatch.setattr(cls, name, broken)


@pytest.mark.parametrize(("route", "wire", "model", "start", "end"), ROUTES,
                         ids=[r[0] for r in ROUTES])
async def test_an_exception_in_the_gateways_own_code_ends_the_stream_in_the_wire_shape(
    gw: RunningGateway, up: FaultyUpstream, monkeypatch: pytest.MonkeyPatch, route: str,
    wire: str, model: str, start: bytes, end: bytes,
) -> None:
    from gateway.wires.anthropic_answer import AnthropicAnswer
    from gateway.wires.relaying import ChatRelay, NativeRelay
    from gateway.wires.responses_answer import ResponsesAnswer

    target = {"chat": ChatRelay, "responses-native": NativeRelay,
              "messages-native": NativeRelay, "responses-translated": ResponsesAnswer,
              "messages-translated": AnthropicAnswer}[route]
    marker = {"responses-native": b"response.completed",
              "messages-native": b"message_stop"}.get(route, b"there")
    raise_on(target, "feed", marker, monkeypatch)
    up.then(stream(start, end))
    events = await streamed(gw, wire, model)
    message = assert_ends_with_wire_error(wire, events)
    assert "could not relay the answer of model" in message


async def test_a_failure_outside_the_relay_never_writes_a_second_response(
    gw: RunningGateway, up: FaultyUpstream, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Belt and braces: were anything to raise after the first byte outside the relay's
    own handling, the connection is closed, never a ``500`` written inside the stream."""
    from gateway.server import relay

    async def broken_pump(request: Any, response: Any, *_: Any) -> list[bytes]:
        await response.write(b": started\n\n")
        raise RuntimeError("a bug after the first byte")

    monkeypatch.setattr(relay, "_pump", broken_pump)
    up.then(stream(CHAT_START, CHAT_END))
    answer = await exchange(gw.root, request_bytes("chat", "m"))
    assert answer.status == 200
    assert b"HTTP/1.1" not in answer.body and b"internal gateway error" not in answer.body
