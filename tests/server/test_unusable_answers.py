"""A 200 the gateway cannot use (wrong-typed fields, an empty or foreign object) is a
``502`` in the client's wire shape, on every wire and route kind, never a ``500``, an
empty success or the body relayed as if it were an answer."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import orjson
import pytest

from tests.conftest import GatewayFactory, RunningGateway, model_entry
from tests.fakes.faulty_upstream import COMPLETION, FaultyUpstream, answer, stream
from tests.http import post_json

CHOICE = COMPLETION["choices"][0]
WRONG_TYPED = {
    "choices-a-number": {**COMPLETION, "choices": 5},
    "message-a-string": {**COMPLETION, "choices": [{**CHOICE, "message": "hi"}]},
    "tool-calls-strings": {**COMPLETION, "choices": [{**CHOICE, "message": {
        "role": "assistant", "content": None, "tool_calls": ["x"]}}]},
    "usage-details-a-string": {**COMPLETION, "usage": {
        "prompt_tokens": 3, "completion_tokens": 1, "prompt_tokens_details": "cached"}},
    "empty-object": {},
    "no-choices": {**COMPLETION, "choices": []},
}
# (client wire, model): chat, and Responses / Messages translated to the chat upstream.
CHAT_UPSTREAM = [("chat", "m"), ("responses", "m"), ("anthropic", "m")]
FOREIGN = {"chat-shaped": COMPLETION, "empty-object": {}}


@pytest.fixture
async def up() -> AsyncIterator[FaultyUpstream]:
    async with FaultyUpstream() as server:
        yield server


@pytest.fixture
async def gw(gateway_factory: GatewayFactory, up: FaultyUpstream) -> RunningGateway:
    return await gateway_factory({
        "model_list": [model_entry("m", up.base_url, responses_api=False),
                       model_entry("r", up.base_url, responses_api=True),
                       model_entry("c", up.base_url, model="anthropic/claude-up")],
        "recovery": {"max_transient_retries": 0},  # one answer, then the give-up
    })


def json_200(body: Any, content_type: str = "application/json") -> Any:
    return answer(200, orjson.dumps(body), {"Content-Type": content_type})


async def ask(gw: RunningGateway, wire: str, model: str, *,
               stream: bool = False) -> tuple[int, dict[str, Any]]:
    path, body = {
        "chat": ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}]}),
        "responses": ("/v1/responses", {"input": "hi"}),
        "anthropic": ("/v1/messages", {"max_tokens": 50,
                                       "messages": [{"role": "user", "content": "hi"}]}),
    }[wire]
    status, headers, answer = await post_json(
        gw.root + path, {"model": model, "stream": stream, **body})
    assert headers["Content-Type"].split(";")[0] == "application/json"
    return status, answer


def assert_wire_502(wire: str, status: int, body: dict[str, Any]) -> str:
    """A 502 in the wire's error shape: its message."""
    assert status == 502, body
    if wire == "anthropic":
        assert body["type"] == "error" and body["error"]["type"] == "api_error"
        return str(body["error"]["message"])
    assert body["error"]["type"] == "api_error"
    return str(body["error"]["message"])


@pytest.mark.parametrize("shape", list(WRONG_TYPED))
@pytest.mark.parametrize(("wire", "model"), CHAT_UPSTREAM, ids=[w for w, _ in CHAT_UPSTREAM])
async def test_a_wrong_typed_chat_answer_is_a_502_on_every_wire(
    gw: RunningGateway, up: FaultyUpstream, wire: str, model: str, shape: str,
) -> None:
    up.then(json_200(WRONG_TYPED[shape]))
    status, body = await ask(gw, wire, model)
    message = assert_wire_502(wire, status, body)
    assert "upstream of model 'm'" in message


@pytest.mark.parametrize("shape", ["choices-a-number", "tool-calls-strings"])
@pytest.mark.parametrize(("wire", "model"), CHAT_UPSTREAM, ids=[w for w, _ in CHAT_UPSTREAM])
async def test_a_stream_whose_first_chunk_is_wrong_typed_is_a_502(
    gw: RunningGateway, up: FaultyUpstream, wire: str, model: str, shape: str,
) -> None:
    chunk = {"choices-a-number": {"choices": 5},
             "tool-calls-strings": {"choices": [{"index": 0, "delta": {"tool_calls": ["x"]}}]},
             }[shape]
    up.then(stream(b"data: " + orjson.dumps(chunk) + b"\n\n"))
    status, body = await ask(gw, wire, model, stream=True)
    assert_wire_502(wire, status, body)


@pytest.mark.parametrize("shape", list(FOREIGN))
@pytest.mark.parametrize(("wire", "model"), [("responses", "r"), ("anthropic", "c")],
                         ids=["responses-native", "messages-native"])
async def test_a_native_upstream_answering_something_else_is_a_502(
    gw: RunningGateway, up: FaultyUpstream, wire: str, model: str, shape: str,
) -> None:
    up.then(json_200(FOREIGN[shape]))
    status, body = await ask(gw, wire, model)
    message = assert_wire_502(wire, status, body)
    assert ("not a Responses response" if wire == "responses"
            else "not an Anthropic message") in message


async def test_native_count_tokens_answering_something_else_is_a_502(
    gw: RunningGateway, up: FaultyUpstream,
) -> None:
    up.then(json_200({}))
    async with aiohttp.ClientSession() as s, s.post(
            gw.root + "/v1/messages/count_tokens",
            json={"model": "c", "messages": [{"role": "user", "content": "hi"}]}) as r:
        body = await r.json()
    assert_wire_502("anthropic", r.status, body)


@pytest.mark.parametrize(("wire", "model"), [*CHAT_UPSTREAM, ("responses", "r")],
                         ids=["chat", "responses", "anthropic", "responses-native"])
async def test_a_usable_answer_still_passes(
    gw: RunningGateway, up: FaultyUpstream, wire: str, model: str,
) -> None:
    body = COMPLETION
    if model == "r":
        body = {"id": "resp_1", "object": "response", "status": "completed", "model": "up",
                "output": [{"type": "message", "role": "assistant", "id": "msg_1",
                            "content": [{"type": "output_text", "text": "fine",
                                         "annotations": []}]}]}
    up.then(json_200(body))
    status, got = await ask(gw, wire, model)
    assert status == 200, got
    if wire == "chat":
        assert got == COMPLETION  # relayed as it came
    elif wire == "anthropic":
        assert got["content"] == [{"type": "text", "text": "fine"}]
    elif model == "r":
        assert got == body
    else:
        assert got["output"][0]["content"][0]["text"] == "fine"


@pytest.mark.parametrize(("wire", "model"), CHAT_UPSTREAM, ids=[w for w, _ in CHAT_UPSTREAM])
async def test_a_stream_without_an_answer_is_a_502_not_an_empty_success(
    gw: RunningGateway, up: FaultyUpstream, wire: str, model: str,
) -> None:
    up.then(stream(b"data: [DONE]\n\n"))
    status, body = await ask(gw, wire, model, stream=True)
    assert "without sending an answer" in assert_wire_502(wire, status, body)
