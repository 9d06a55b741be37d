"""The translated paths: Messages and Responses bodies sent to a model that speaks only Chat
Completions (gateway/wires/to_chat.py), and the chat answers translated back
(gateway/wires/anthropic_answer.py, responses_answer.py, whole_stream.py).

Requests carry every block, item and part type the gateway knows, then one to three fields
take a wrong type (null, number, list, object, a huge string, a lone surrogate escape): the
client gets a 200 or a 4xx in its wire's error shape, never a 5xx, and /healthz answers
after. Answers: the chat upstream sends odd but valid chat JSON or SSE (null content, tool
calls with odd ids, usage missing, extra fields, several choices): the client gets a valid
Messages / Responses answer or a clean 502 in its wire's shape.

Bounded for ``make test`` (derandomized, no example database); ``FUZZ_EXAMPLES`` raises it.
"""

from __future__ import annotations

import asyncio
import copy
import os
from collections.abc import AsyncIterator, Callable
from typing import Any

import aiohttp
import orjson
import pytest
from aiohttp import web
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.wires.chat_validation import validate_chat_body
from tests.conftest import GatewayFactory, RunningGateway
from tests.fuzz.mutations import PNG, Path, mutate, paths

EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "25"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
                suppress_health_check=list(HealthCheck), print_blob=True)

LONE = "__lone_surrogate__"  # written as the JSON escape \ud800, which orjson cannot encode
HUGE = "__huge_string__"  # written as 300 000 characters (kept short in hypothesis' reports)

COMPLETION = {"id": "chatcmpl-1", "object": "chat.completion", "created": 0, "model": "m",
              "choices": [{"index": 0, "finish_reason": "stop",
                           "message": {"role": "assistant", "content": "fine"}}],
              "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4}}


def _chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> dict[str, Any]:
    return {"id": "c1", "object": "chat.completion.chunk", "created": 0, "model": "m",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}], **extra}


def sse(*chunks: Any, done: bool = True) -> bytes:
    """Chat SSE events for ``chunks`` (bytes kept raw), ending in ``[DONE]``."""
    out = b"".join(c if isinstance(c, bytes) else b"data: " + orjson.dumps(c) + b"\n\n"
                   for c in chunks)
    return out + (b"data: [DONE]\n\n" if done else b"")


STREAM = sse(_chunk({"role": "assistant", "content": "fi"}), _chunk({"content": "ne"}, "stop"),
             {"id": "c1", "object": "chat.completion.chunk", "created": 0, "model": "m",
              "choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 1,
                                       "total_tokens": 4}})

Answer = tuple[int, bytes, str]  # status, body, content type


class FakeChat:
    """A chat-only upstream: a valid completion (or stream) by default, or ``script``'s."""

    def __init__(self) -> None:
        self.script: Callable[[dict[str, Any]], Answer] | None = None
        self.received: list[dict[str, Any]] = []
        self.runner: web.AppRunner | None = None
        self.base_url = ""

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        body = orjson.loads(await request.read())
        self.received.append(body)
        if self.script is not None:
            status, data, kind = self.script(body)
        elif body.get("stream") is True:
            status, data, kind = 200, STREAM, "text/event-stream"
        else:
            status, data, kind = 200, orjson.dumps(COMPLETION), "application/json"
        return web.Response(status=status, body=data, content_type=kind)

    async def __aenter__(self) -> FakeChat:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post("/v1/chat/completions", self._handle)
        self.runner = web.AppRunner(app)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.base_url = f"http://127.0.0.1:{port}/v1"
        return self

    async def __aexit__(self, *_: object) -> None:
        assert self.runner is not None
        await self.runner.cleanup()


@pytest.fixture
async def chat() -> AsyncIterator[FakeChat]:
    async with FakeChat() as fake:
        yield fake


@pytest.fixture
async def gw(gateway_factory: GatewayFactory, chat: FakeChat) -> RunningGateway:
    return await gateway_factory({
        "model_list": [{"model_name": "local", "litellm_params": {
            "model": "hosted_vllm/chat-only", "api_base": chat.base_url, "api_key": "c-key"}}],
        "recovery": {"backoff_base": 0.001, "backoff_cap": 0.002},
    })


_IMAGE = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}}
MESSAGES: dict[str, Any] = {
    "model": "local",
    "max_tokens": 32,
    "system": [{"type": "text", "text": "be brief", "cache_control": {"type": "ephemeral"}}],
    "messages": [
        {"role": "user", "content": [
            {"type": "text", "text": "look"},
            _IMAGE,
            {"type": "image", "source": {"type": "url", "url": "https://example.invalid/a.png"}},
            {"type": "document", "title": "a.pdf", "source": {
                "type": "base64", "media_type": "application/pdf", "data": "JVBERi0="}},
            {"type": "document", "source": {"type": "text", "media_type": "text/plain",
                                            "data": "doc"}},
            {"type": "document", "source": {"type": "url", "url": "https://example.invalid/d"}},
        ]},
        {"role": "assistant", "content": [
            {"type": "thinking", "thinking": "hmm", "signature": "sig"},
            {"type": "redacted_thinking", "data": "opaque"},
            {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search",
             "input": {"query": "q"}},
            {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_1", "content": [
                {"type": "web_search_result", "url": "https://example.invalid", "title": "t",
                 "encrypted_content": "e"}]},
            {"type": "text", "text": "reading"},
            {"type": "tool_use", "id": "toolu_1", "name": "read_file", "input": {"path": "a"}}]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_1", "is_error": True,
             "content": [{"type": "text", "text": "contents"}, _IMAGE]},
            {"type": "text", "text": "go on"}]},
        {"role": "assistant", "content": "ok"},
        {"role": "user", "content": "thanks"},
    ],
    "tools": [{"name": "read_file", "description": "read a file",
               "input_schema": {"type": "object", "properties": {}}},
              {"type": "web_search_20250305", "name": "web_search"}],
    "tool_choice": {"type": "tool", "name": "read_file", "disable_parallel_tool_use": True},
    "metadata": {"user_id": "u1"},
    "stop_sequences": ["STOP"],
    "temperature": 0.5,
    "top_p": 0.9,
    "output_format": {"type": "json_schema", "schema": {"type": "object"}},
}

RESPONSES: dict[str, Any] = {
    "model": "local",
    "instructions": "be brief",
    "input": [
        {"role": "developer", "content": "rules"},
        {"role": "system", "content": "more rules"},
        {"type": "message", "role": "user", "content": [
            {"type": "input_text", "text": "and this"},
            {"type": "input_image", "image_url": f"data:image/png;base64,{PNG}",
             "detail": "low"},
            {"type": "input_file", "filename": "a.pdf",
             "file_data": "data:application/pdf;base64,JVBERi0="},
            {"type": "input_file", "file_id": "file_1"}]},
        {"type": "reasoning", "id": "rs_1", "summary": [
            {"type": "summary_text", "text": "thinking"}], "encrypted_content": "gAAAA"},
        {"type": "function_call", "call_id": "call_1", "name": "read_file",
         "arguments": "{}", "id": "fc_1"},
        {"type": "function_call_output", "call_id": "call_1", "output": "contents"},
        {"type": "custom_tool_call", "call_id": "call_2", "name": "patch", "input": "x"},
        {"type": "custom_tool_call_output", "call_id": "call_2", "output": "patched"},
        {"type": "shell_call", "call_id": "call_3", "action": {"commands": ["ls"]},
         "status": "completed"},
        {"type": "shell_call_output", "call_id": "call_3", "output": [
            {"stdout": "a", "stderr": "", "outcome": {"type": "exit", "exit_code": 0}}]},
        {"type": "local_shell_call", "call_id": "call_4", "id": "lsh_1", "status": "completed",
         "action": {"type": "exec", "command": ["ls"], "env": {}}},
        {"type": "local_shell_call_output", "id": "call_4", "output": "a"},
        {"type": "message", "role": "assistant", "id": "msg_1", "content": [
            {"type": "output_text", "text": "done", "annotations": []},
            {"type": "refusal", "refusal": "no"}]},
        {"type": "item_reference", "id": "ref_1"},
        {"role": "user", "content": "thanks"},
    ],
    "tools": [{"type": "function", "name": "read_file", "description": "read a file",
               "parameters": {"type": "object", "properties": {}}, "strict": False},
              {"type": "custom", "name": "patch"}, {"type": "web_search"}],
    "tool_choice": {"type": "function", "name": "read_file"},
    "parallel_tool_calls": True,
    "text": {"format": {"type": "json_schema", "name": "out", "strict": True,
                        "schema": {"type": "object", "properties": {}}}},
    "reasoning": {"effort": "low"},
    "max_output_tokens": 64,
    "temperature": 0.5,
    "top_p": 0.9,
    "user": "u1",
    "store": False,
}

WRONG = st.sampled_from([None, 0, -1, 1.5, True, [], ["x"], [None], {}, {"type": "x"},
                         {"type": None}, HUGE, LONE, "", "text"])


def _at(body: Any, path: Path) -> Any:
    for key in path:
        body = body[key]
    return body


@st.composite
def wrong_typed(draw: st.DrawFn, seed: dict[str, Any]) -> dict[str, Any]:
    """``seed`` (copied) with one to three fields of a wrong type, streamed or not."""
    body = copy.deepcopy(seed)
    body["stream"] = draw(st.booleans())
    for _ in range(draw(st.integers(1, 3))):
        found = [p for p in paths(body) if p not in (("model",), ("stream",))]
        if not found:
            break
        path = draw(st.sampled_from(found))
        _at(body, path[:-1])[path[-1]] = copy.deepcopy(draw(WRONG))  # never shared
    return body


@st.composite
def mutated(draw: st.DrawFn, seed: dict[str, Any]) -> dict[str, Any]:
    """``seed`` streamed or not, through the shared mutations (fields added, removed,
    wrapped, nested to the depth limit)."""
    return draw(mutate(seed | {"stream": draw(st.booleans())}))


def encode(body: Any) -> bytes:
    """The JSON bytes, each ``LONE`` marker a lone surrogate escape, each ``HUGE`` one a
    huge string."""
    return (orjson.dumps(body).replace(f'"{LONE}"'.encode(), b'"\\ud800"')
            .replace(f'"{HUGE}"'.encode(), b'"' + b"x" * 300_000 + b'"'))


def check_error(wire: str, error: Any, shown: bytes) -> None:
    """An error body in the wire's shape."""
    assert isinstance(error, dict) and isinstance(error.get("error"), dict), shown
    assert isinstance(error["error"].get("message"), str), shown
    if wire == "messages":
        assert error.get("type") == "error", shown


def check_answer(wire: str, data: bytes, content_type: str) -> None:
    """A 200 answer that is a whole Messages / Responses answer, or a stream that ends."""
    if content_type == "text/event-stream":
        last = data.rstrip(b"\n").rsplit(b"\n\n", 1)[-1]
        ends = ((b"event: message_stop", b"event: error") if wire == "messages" else
                (b"event: response.completed", b"event: response.incomplete",
                 b"event: response.failed", b"event: error"))
        assert last.startswith(ends), data[-600:]
        return
    answer = orjson.loads(data)
    if wire == "messages":
        assert answer["type"] == "message" and answer["role"] == "assistant", data[:600]
        assert isinstance(answer["content"], list), data[:600]
        for block in answer["content"]:
            assert block["type"] in ("text", "tool_use", "thinking"), data[:600]
            if block["type"] == "tool_use":
                assert isinstance(block["id"], str) and isinstance(block["input"], dict)
    else:
        assert answer["object"] == "response", data[:600]
        assert isinstance(answer["output"], list), data[:600]
        for item in answer["output"]:
            assert item["type"] in ("message", "function_call", "reasoning"), data[:600]
            if item["type"] == "function_call":
                assert isinstance(item["call_id"], str) and isinstance(item["arguments"], str)


async def send(gw: RunningGateway, wire: str, data: bytes) -> tuple[int, bytes]:
    """POST ``data`` to the wire's route; fail on a 5xx or an answer out of shape."""
    path = "/v1/messages" if wire == "messages" else "/v1/responses"
    timeout = aiohttp.ClientTimeout(total=60)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        async with session.post(gw.root + path, data=data,
                                headers={"content-type": "application/json"}) as answer:
            body = await answer.read()
            status, kind = answer.status, answer.content_type
        async with session.get(gw.root + "/healthz") as health:
            assert health.status == 200
    if status >= 400:
        check_error(wire, orjson.loads(body), body[:600])
    else:
        check_answer(wire, body, kind)
    return status, body


async def search(gw: RunningGateway, cases: st.SearchStrategy[Any],
                 run: Callable[[Any], Any]) -> None:
    """Run hypothesis in a thread; each case runs on this loop, the gateway's."""
    loop = asyncio.get_running_loop()

    @FUZZ
    @given(case=cases)
    def one(case: Any) -> None:
        asyncio.run_coroutine_threadsafe(run(case), loop).result()

    await asyncio.to_thread(one)


SEEDS = {"messages": MESSAGES, "responses": RESPONSES}
SIMPLE: dict[str, dict[str, Any]] = {
    "messages": {"model": "local", "max_tokens": 32,
                 "messages": [{"role": "user", "content": "hi"}]},
    "responses": {"model": "local", "input": "hi"}}


@pytest.mark.parametrize("wire", list(SEEDS))
async def test_seeds_pass_through_the_chat_model(gw: RunningGateway, chat: FakeChat,
                                                 wire: str) -> None:
    """Every block and item type at once is a valid request: a 200 either way."""
    for stream in (False, True):
        status, body = await send(gw, wire, encode(SEEDS[wire] | {"stream": stream}))
        assert status == 200, body[:600]


@pytest.mark.parametrize("wire", list(SEEDS))
async def test_wrong_typed_fields_never_fail_with_5xx(gw: RunningGateway, chat: FakeChat,
                                                      wire: str) -> None:
    """Never a 5xx; and what reaches the chat model is a chat body the gateway itself
    would take from a chat client (no wire-only part or field leaks through)."""
    async def run(body: dict[str, Any]) -> None:
        chat.received.clear()
        status, shown = await send(gw, wire, encode(body))
        assert status < 500, shown[:600]
        for sent in chat.received:
            validate_chat_body(sent)

    await search(gw, st.one_of(wrong_typed(SEEDS[wire]), mutated(SEEDS[wire])), run)


# Odd but valid chat answers.
_IDS = st.sampled_from(["call_1", "", "call 1/ä", "x" * 300, None, 7, ["a"]])
_TOOL_CALL = st.fixed_dictionaries({}, optional={
    "id": _IDS, "type": st.sampled_from(["function", None, "custom"]),
    "function": st.fixed_dictionaries({}, optional={
        "name": st.sampled_from(["read_file", "", None, "a" * 300]),
        "arguments": st.sampled_from(["{}", '{"a": 1}', "", "{not json", "[1]", '{"a": ',
                                      "1}", None])}),
    "index": st.sampled_from([0, 1, 5, -1, None, 2**40]), "extra": st.just({"x": 1})})
_CONTENT = st.sampled_from([None, "", "hi", "é\u2028", ["text"], {"a": 1}, 5])
_MESSAGE = st.fixed_dictionaries(
    {"role": st.sampled_from(["assistant", None, "tool"])},
    optional={"content": _CONTENT, "tool_calls": st.none() | st.lists(_TOOL_CALL, max_size=3),
              "refusal": st.sampled_from([None, "no", 3]),
              "reasoning_content": st.sampled_from([None, "hmm", ["x"]]),
              "function_call": st.just({"name": "f", "arguments": "{}"}),
              "audio": st.just({"id": "a"}), "annotations": st.just([])})
_FINISH = st.sampled_from(["stop", "length", "tool_calls", "content_filter",
                           "function_call", None, "weird"])
_USAGE = st.sampled_from([None, {}, {"prompt_tokens": 3}, {"prompt_tokens": "3"},
                          {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4,
                           "prompt_tokens_details": {"cached_tokens": 2}},
                          {"prompt_tokens_details": None, "completion_tokens": -1}])


@st.composite
def chat_completions(draw: st.DrawFn) -> bytes:
    """An odd chat.completion body: extra fields, several choices, usage missing or odd."""
    choices = draw(st.lists(st.fixed_dictionaries(
        {"index": st.integers(0, 2), "message": _MESSAGE, "finish_reason": _FINISH},
        optional={"logprobs": st.none()}), min_size=1, max_size=3))
    answer: dict[str, Any] = {"id": "chatcmpl-1", "object": "chat.completion", "created": 0,
                              "model": "m", "choices": choices, "system_fingerprint": "fp"}
    usage = draw(_USAGE)
    if usage is not None:
        answer["usage"] = usage
    return orjson.dumps(answer)


_DELTA = st.fixed_dictionaries({}, optional={
    "role": st.sampled_from(["assistant", None]), "content": _CONTENT,
    "tool_calls": st.none() | st.lists(_TOOL_CALL, max_size=2),
    "reasoning_content": st.sampled_from([None, "hmm"]), "refusal": st.sampled_from([None, "no"]),
    "extra": st.just([1])})


@st.composite
def chat_streams(draw: st.DrawFn) -> bytes:
    """Chat SSE: odd deltas, several choices, usage or not, keep-alives, [DONE] or not."""
    events: list[Any] = []
    for _ in range(draw(st.integers(1, 5))):
        kind = draw(st.sampled_from(["delta", "delta", "delta", "choices", "usage", "comment"]))
        if kind == "delta":
            events.append(_chunk(draw(_DELTA), draw(_FINISH)))
        elif kind == "choices":
            events.append({"id": "c1", "object": "chat.completion.chunk", "created": 0,
                           "model": "m", "choices": [
                               {"index": i, "delta": draw(_DELTA), "finish_reason": draw(_FINISH)}
                               for i in range(draw(st.integers(0, 3)))]})
        elif kind == "usage":
            events.append({"id": "c1", "object": "chat.completion.chunk", "created": 0,
                           "model": "m", "choices": [], "usage": draw(_USAGE)})
        else:
            events.append(b": keep-alive\n\n")
    return sse(*events, done=draw(st.booleans()))


@pytest.mark.parametrize("wire", list(SEEDS))
@pytest.mark.parametrize("stream", [False, True])
async def test_odd_chat_answers_translate_or_fail_cleanly(gw: RunningGateway, chat: FakeChat,
                                                          wire: str, stream: bool) -> None:
    request = SIMPLE[wire]

    async def run(case: tuple[bytes, bool]) -> None:
        answer, as_stream = case
        kind = "text/event-stream" if as_stream else "application/json"
        chat.script = lambda _: (200, answer, kind)
        status, shown = await send(gw, wire, encode(request | {"stream": stream}))
        assert status in (200, 502), shown[:600]

    cases = st.tuples(chat_streams(), st.just(True)) | st.tuples(chat_completions(),
                                                                 st.just(False))
    await search(gw, cases, run)


@pytest.mark.parametrize("wire", list(SEEDS))
async def test_failing_chat_upstream_is_a_clean_5xx(gw: RunningGateway, chat: FakeChat,
                                                    wire: str) -> None:
    """An upstream told to fail: the 5xx the client gets is in its wire's shape."""
    chat.script = lambda _: (500, b'{"error": {"message": "boom"}}', "application/json")
    for stream in (False, True):
        status, body = await send(gw, wire, encode(SIMPLE[wire] | {"stream": stream}))
        assert status >= 500, body[:600]


_ERROR_BODIES = st.sampled_from([
    b'{"error": {"message": "bad", "type": "invalid_request_error", "code": null}}',
    b'{"error": {"message": "This model\'s maximum context length is 8 tokens"}}',
    b'{"error": "flat string"}', b'{"detail": [{"msg": "x"}]}', b"", b"<html>oops</html>",
    b'{"error": {"message": null, "code": 5}}', b"[1, 2]"])


@pytest.mark.parametrize("wire", list(SEEDS))
async def test_chat_upstream_errors_reach_the_client_in_its_wire_shape(
        gw: RunningGateway, chat: FakeChat, wire: str) -> None:
    """Any status and body the chat upstream fails with: an error in the client's wire
    shape, never a 200 or a traceback."""
    async def run(case: tuple[int, bytes, bool]) -> None:
        status, body, stream = case
        chat.script = lambda _: (status, body, "application/json")
        got, shown = await send(gw, wire, encode(SIMPLE[wire] | {"stream": stream}))
        assert got >= 400, shown[:600]

    cases = st.tuples(st.sampled_from([400, 401, 403, 404, 408, 409, 413, 422, 429, 500, 502,
                                       503, 529]), _ERROR_BODIES, st.booleans())
    await search(gw, cases, run)


_CALL = {"id": "call_9", "type": "function",
         "function": {"name": "read_file", "arguments": '{"path": "a"}'}}


@pytest.mark.parametrize("wire", list(SEEDS))
@pytest.mark.parametrize("stream", [False, True])
async def test_chat_tool_calls_come_back_as_the_wires_calls(
        gw: RunningGateway, chat: FakeChat, wire: str, stream: bool) -> None:
    """The property's baseline: a chat tool call is the wire's own call, input parsed."""
    if stream:
        first = {**_CALL, "index": 0, "function": {"name": "read_file", "arguments": '{"pa'}}
        data = sse(_chunk({"role": "assistant", "content": None, "tool_calls": [first]}),
                   _chunk({"tool_calls": [{"index": 0, "function": {"arguments": 'th": "a"}'}}]},
                          "tool_calls"))
        chat.script = lambda _: (200, data, "text/event-stream")
    else:
        answer = copy.deepcopy(COMPLETION)
        answer["choices"][0] |= {"finish_reason": "tool_calls", "message": {
            "role": "assistant", "content": None, "tool_calls": [_CALL]}}
        chat.script = lambda _: (200, orjson.dumps(answer), "application/json")
    status, body = await send(gw, wire, encode(SIMPLE[wire] | {"stream": stream}))
    assert status == 200, body[:600]
    if wire == "messages":
        assert b'"partial_json"' in body if stream else b'"stop_reason":"tool_use"' in body
        if not stream:
            (block,) = orjson.loads(body)["content"]
            assert block == {"type": "tool_use", "id": "call_9", "name": "read_file",
                             "input": {"path": "a"}}
    else:
        assert b'"call_id":"call_9"' in body
        if not stream:
            (item,) = orjson.loads(body)["output"]
            assert (item["type"], item["name"], item["arguments"]) == (
                "function_call", "read_file", '{"path": "a"}')


@pytest.mark.parametrize(("wire", "fields", "message"), [
    ("messages", {"tools": [{"name": "f", "input_schema": {}}], "tool_choice": {"type": "tool"}},
     "tool_choice.name: Field required"),
    ("responses", {"tools": [{"type": "function", "name": "f"}],
                   "tool_choice": {"type": "function", "name": None}},
     "Missing required parameter: 'tool_choice.name'."),
])
@pytest.mark.parametrize("stream", [False, True])
async def test_forced_tool_without_a_name_is_a_400(gw: RunningGateway, chat: FakeChat,
                                                   wire: str, fields: dict[str, Any],
                                                   message: str, stream: bool) -> None:
    """Found by the fuzzer: the chat model got ``tool_choice.function.name: null``, which a
    chat API refuses; now the client gets its own API's 400 and nothing is sent."""
    status, body = await send(gw, wire, encode(SIMPLE[wire] | fields | {"stream": stream}))
    assert status == 400, body[:600]
    assert orjson.loads(body)["error"]["message"] == message
    assert chat.received == []


@pytest.mark.parametrize("stream", [False, True])
async def test_custom_tool_call_without_a_name_is_a_400(gw: RunningGateway, chat: FakeChat,
                                                        stream: bool) -> None:
    """Found by the fuzzer: a ``custom_tool_call`` named null reached the chat model as a
    tool call with a null function name; now it is OpenAI's 400 naming the field."""
    body = {"model": "local", "stream": stream, "input": [
        {"role": "user", "content": "patch it"},
        {"type": "custom_tool_call", "call_id": "call_2", "name": None, "input": "x"},
        {"type": "custom_tool_call_output", "call_id": "call_2", "output": "patched"}]}
    status, answer = await send(gw, "responses", encode(body))
    assert status == 400, answer[:600]
    assert "input[1].name" in orjson.loads(answer)["error"]["message"]
    assert chat.received == []


@pytest.mark.parametrize("name", [True, 5, ["sh"], {"a": 1}])
async def test_call_item_with_a_name_of_another_type_is_a_400(gw: RunningGateway,
                                                               chat: FakeChat, name: Any) -> None:
    """Found by the fuzzer: a shell call carrying a ``name`` that is not a string reached the
    chat model as a tool call named ``true``; any item's name must be a string."""
    body = {"model": "local", "input": [
        {"role": "user", "content": "list"},
        {"type": "shell_call", "call_id": "call_3", "name": name,
         "action": {"commands": ["ls"]}, "status": "completed"},
        {"type": "shell_call_output", "call_id": "call_3", "output": "a"}]}
    status, answer = await send(gw, "responses", encode(body))
    assert status == 400, answer[:600]
    assert "input[1].name" in orjson.loads(answer)["error"]["message"]
    assert chat.received == []
