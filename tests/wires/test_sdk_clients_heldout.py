"""An outsider's round with the client SDKs as existing users call them, pointed at the
gateway's base URL instead of the provider's: the ``openai`` SDK, sync and async (streams
with ``include_usage``, the stream helpers, ``parse`` with pydantic, ``with_raw_response``
and ``with_streaming_response``, Responses create/stream/parse, models, timeouts and
``max_retries`` on a ``429`` with ``Retry-After``) and the ``anthropic`` SDK, sync and async
(``messages.create``, ``messages.stream`` with ``get_final_message``, a tool loop on a model
served by a chat server, ``count_tokens``, betas, raw and streaming responses, rate limits).

Three real upstreams on 127.0.0.1 (a strict chat server, an Anthropic Messages API, a
Responses API) behind a real gateway. A sync client runs in a worker thread (the gateway
serves on the test's event loop). What is asserted is what the SDK gives its caller: the
same objects, errors and retry behaviour as against the provider itself.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from typing import Any, TypeVar

import anthropic
import openai
import pytest
from aiohttp import web
from pydantic import BaseModel

from gateway.referee import Referee
from tests.conftest import GatewayFactory, RunningGateway, model_entry
from tests.fakes.anthropic_server import FakeAnthropic, anthropic_error
from tests.fakes.native_base import Canned, FakeServer
from tests.fakes.openai_fleet import rate_limit_error
from tests.fakes.responses_server import FakeResponses
from tests.server.three_upstreams import UPSTREAM_KEY, claude, gpt, models, referee

__all__ = ["claude", "gpt", "referee"]  # the three upstreams' fixtures, shared

KEY = "client-key-sdk-heldout"
T = TypeVar("T")


class Ticket(BaseModel):
    """A structured answer."""

    title: str
    priority: int


class Hanging(FakeServer):
    """A chat server that accepts a request and never answers; tells when its caller gave
    the request up (the connection closed under it)."""

    def __init__(self) -> None:
        super().__init__()
        self.abandoned = asyncio.Event()
        self.released = asyncio.Event()

    def _routes(self, app: web.Application) -> None:
        app.router.add_post("/v1/chat/completions", self._chat)

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        await self.record(request)
        try:
            await self.released.wait()
        except asyncio.CancelledError:
            self.abandoned.set()
            raise
        return web.json_response({"error": {"message": "late", "type": "server_error"}},
                                 status=500)

    async def __aenter__(self) -> Hanging:
        app = web.Application()
        self._routes(app)
        # Cancelled when the caller closes the connection, as a provider's server notices.
        self._runner = web.AppRunner(app, access_log=None, handler_cancellation=True)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", 0).start()
        self.port = int(self._runner.addresses[0][1])
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        self.released.set()
        await super().__aexit__(*exc_info)


@pytest.fixture
async def hanging() -> AsyncIterator[Hanging]:
    async with Hanging() as server:
        yield server


@pytest.fixture
async def gw(gateway_factory: GatewayFactory, referee: Referee, claude: FakeAnthropic,
             gpt: FakeResponses, hanging: Hanging) -> RunningGateway:
    local = model_entry("local", referee.base_url, model="hosted_vllm/referee",
                        api_key=UPSTREAM_KEY)  # a chat-only server: other wires translated
    stuck = model_entry("stuck", f"{hanging.base_url}/v1", model="openai/stuck",
                        api_key=UPSTREAM_KEY)
    return await gateway_factory({"model_list": [*models(referee, claude, gpt), local, stuck],
                                  "gateway": {"api_keys": [{"key": KEY, "owner": "team"}]}})


def sync_openai(gw: RunningGateway, **options: Any) -> openai.OpenAI:
    options.setdefault("max_retries", 0)
    return openai.OpenAI(base_url=gw.base_url, api_key=options.pop("api_key", KEY), **options)


def async_openai(gw: RunningGateway, **options: Any) -> openai.AsyncOpenAI:
    options.setdefault("max_retries", 0)
    return openai.AsyncOpenAI(base_url=gw.base_url, api_key=options.pop("api_key", KEY),
                              **options)


def sync_anthropic(gw: RunningGateway, **options: Any) -> anthropic.Anthropic:
    options.setdefault("max_retries", 0)
    return anthropic.Anthropic(base_url=gw.root, api_key=options.pop("api_key", KEY),
                               **options)


def async_anthropic(gw: RunningGateway, **options: Any) -> anthropic.AsyncAnthropic:
    options.setdefault("max_retries", 0)
    return anthropic.AsyncAnthropic(base_url=gw.root, api_key=options.pop("api_key", KEY),
                                    **options)


async def in_thread(call: Callable[[], T]) -> T:
    """A sync SDK call, off the event loop the gateway serves on."""
    return await asyncio.to_thread(call)


def responses_answer(text: str) -> dict[str, Any]:
    return {"id": "resp_heldout", "object": "response", "created_at": 1,
            "status": "completed", "model": "gpt-5",
            "output": [{"type": "message", "id": "msg_heldout", "status": "completed",
                        "role": "assistant", "content": [
                            {"type": "output_text", "text": text, "annotations": []}]}],
            "parallel_tool_calls": True, "tool_choice": "auto", "tools": [], "error": None,
            "incomplete_details": None, "usage": {
                "input_tokens": 5, "output_tokens": 5, "total_tokens": 10,
                "input_tokens_details": {"cached_tokens": 0},
                "output_tokens_details": {"reasoning_tokens": 0}}}


def completion(content: str) -> dict[str, Any]:
    return {"id": "chatcmpl-heldout", "object": "chat.completion", "created": 1,
            "model": "referee", "choices": [{"index": 0, "finish_reason": "stop",
                                             "message": {"role": "assistant",
                                                         "content": content}}],
            "usage": {"prompt_tokens": 9, "completion_tokens": 5, "total_tokens": 14}}


WEATHER: anthropic.types.ToolParam = {
    "name": "get_weather", "description": "The weather in a city.",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}},
                     "required": ["city"]}}


# --- openai, sync -----------------------------------------------------------------------


@pytest.mark.parametrize("model", ["chat", "claude"])
async def test_sync_stream_with_include_usage_ends_with_the_usage_chunk(
        gw: RunningGateway, model: str) -> None:
    """As from OpenAI: content chunks with ``usage`` null, then one chunk with no choices
    and the usage, on a chat server and on Claude translated."""
    def run() -> list[Any]:
        with sync_openai(gw) as client:
            stream = client.chat.completions.create(
                model=model, messages=[{"role": "user", "content": "count me"}], stream=True,
                stream_options={"include_usage": True}, max_tokens=100)
            return list(stream)

    chunks = await in_thread(run)
    assert chunks[-1].choices == [] and chunks[-1].usage is not None
    assert chunks[-1].usage.prompt_tokens > 0 and chunks[-1].usage.completion_tokens > 0
    assert chunks[-1].usage.total_tokens == (chunks[-1].usage.prompt_tokens
                                             + chunks[-1].usage.completion_tokens)
    assert all(c.usage is None for c in chunks[:-1])
    text = "".join(c.choices[0].delta.content or "" for c in chunks[:-1] if c.choices)
    assert text
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices
                and c.choices[0].finish_reason]
    assert finishes == ["stop"]
    assert len({c.id for c in chunks}) == 1


async def test_sync_stream_helper_and_parse_give_the_final_objects(
        gw: RunningGateway, referee: Referee) -> None:
    referee.script(200, completion('{"title": "Printer on fire", "priority": 1}'))

    def run() -> tuple[Any, Any, list[str]]:
        with sync_openai(gw) as client:
            parsed = client.chat.completions.parse(
                model="chat", messages=[{"role": "user", "content": "file a ticket"}],
                response_format=Ticket)
            with client.chat.completions.stream(
                    model="chat", messages=[{"role": "user", "content": "stream helper"}],
                    stream_options={"include_usage": True}) as stream:
                kinds: list[str] = [event.type for event in stream]
                final = stream.get_final_completion()
        return final, parsed, kinds

    final, parsed, kinds = await in_thread(run)
    assert "content.delta" in kinds and "content.done" in kinds
    assert final.choices[0].message.content.startswith("referee: accepted")
    assert final.usage is not None and final.usage.total_tokens > 0
    assert parsed.choices[0].message.parsed == Ticket(title="Printer on fire", priority=1)
    rf = referee.requests[0].json()["response_format"]
    assert rf["type"] == "json_schema" and rf["json_schema"]["name"] == "Ticket"


async def test_sync_models_list_and_a_wrong_key(gw: RunningGateway) -> None:
    def run() -> tuple[list[str], openai.AuthenticationError]:
        with sync_openai(gw) as client:
            names = [m.id for m in client.models.list()]
        with sync_openai(gw, api_key="sk-wrong-key") as wrong:
            try:
                wrong.models.list()
            except openai.AuthenticationError as err:
                return names, err
        raise AssertionError("a wrong key was let in")

    names, refused = await in_thread(run)
    assert {"chat", "claude", "gpt", "local"} <= set(names)
    assert refused.status_code == 401
    assert isinstance(refused.body, dict) and isinstance(refused.body.get("message"), str)
    assert "sk-wrong-key" not in refused.message


async def test_sync_responses_create_parse_and_translation(
        gw: RunningGateway, gpt: FakeResponses, referee: Referee) -> None:
    gpt.script(Canned(200, responses_answer('{"title": "Disk full", "priority": 2}')))

    def run() -> tuple[Any, Any]:
        with sync_openai(gw) as client:
            parsed = client.responses.parse(model="gpt", input="file a ticket",
                                            text_format=Ticket)
            translated = client.responses.create(model="local", input="hello local",
                                                 instructions="be brief")
        return parsed, translated

    parsed, translated = await in_thread(run)
    assert parsed.output_parsed == Ticket(title="Disk full", priority=2)
    assert translated.status == "completed"
    assert translated.output_text.startswith("referee: accepted")
    assert translated.usage is not None and translated.usage.input_tokens > 0
    sent = referee.requests[-1].json()["messages"]
    assert sent[0] == {"role": "system", "content": "be brief"}


# --- openai, async ----------------------------------------------------------------------


async def test_streaming_response_gives_headers_first_then_the_sse_lines(
        gw: RunningGateway) -> None:
    async with async_openai(gw) as client, \
            client.chat.completions.with_streaming_response.create(
                model="chat", messages=[{"role": "user", "content": "raw lines"}],
                stream=True) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        request_id = response.headers["x-request-id"]
        lines = [line async for line in response.iter_lines() if line]
    assert request_id
    assert lines[-1] == "data: [DONE]"
    payloads = [json.loads(line.removeprefix("data: ")) for line in lines[:-1]]
    assert all(p["object"] == "chat.completion.chunk" for p in payloads)


async def test_responses_stream_through_translation_numbers_its_events_in_order(
        gw: RunningGateway, referee: Referee) -> None:
    async with async_openai(gw) as client, client.responses.stream(
            model="local", input="a streamed answer", max_output_tokens=100) as stream:
        events = [event async for event in stream]
        final = await stream.get_final_response()
    numbers = [e.sequence_number for e in events]
    assert numbers == sorted(numbers) and len(set(numbers)) == len(numbers)
    kinds = [e.type for e in events]
    assert kinds[0] == "response.created" and kinds[-1] == "response.completed"
    assert "response.output_text.done" in kinds
    assert final.status == "completed" and final.output_text.startswith("referee: accepted")
    assert final.usage is not None and final.usage.output_tokens > 0
    assert referee.requests[-1].json()["max_tokens"] == 100


async def test_responses_with_raw_response_carries_the_request_id(
        gw: RunningGateway, gpt: FakeResponses) -> None:
    async with async_openai(gw) as client:
        raw = await client.responses.with_raw_response.create(model="gpt", input="raw please")
    response = raw.parse()
    assert response.output_text == "you said: raw please"
    assert response._request_id == raw.headers["x-request-id"]
    assert gpt.requests[-1].headers["authorization"] == f"Bearer {UPSTREAM_KEY}"


async def test_the_sdk_waits_out_a_retry_after_the_gateway_passed_on(
        gw: RunningGateway, referee: Referee) -> None:
    """With the gateway's retries off for the request (``num_retries: 0``, LiteLLM's
    request field), a provider's ``429`` reaches the SDK with its ``Retry-After``: the
    SDK's own retry (``max_retries``) waits it and gets the answer."""
    referee.script(429, rate_limit_error("referee"), {"retry-after-ms": "20"})
    async with async_openai(gw, max_retries=2) as client:
        raw = await client.chat.completions.with_raw_response.create(
            model="chat", messages=[{"role": "user", "content": "rate limited once"}],
            extra_body={"num_retries": 0})
    assert (raw.parse().choices[0].message.content or "").startswith("referee: accepted")
    assert raw.retries_taken == 1
    assert len(referee.requests) == 2


async def test_a_persistent_429_reaches_the_sdk_as_rate_limit_error_once(
        gw: RunningGateway, referee: Referee) -> None:
    referee.script(429, rate_limit_error("referee"), {"retry-after-ms": "1"}, times=20)
    async with async_openai(gw, max_retries=2) as client:
        with pytest.raises(openai.RateLimitError) as limited:
            await client.chat.completions.create(
                model="chat", messages=[{"role": "user", "content": "always limited"}])
    headers = limited.value.response.headers
    assert "Rate limit reached" in limited.value.message
    assert limited.value.code == "rate_limit_exceeded"
    assert headers["x-should-retry"] == "false"
    assert len(referee.requests) == int(headers["x-gateway-attempts"])


async def test_an_sdk_timeout_raises_and_the_gateway_lets_go_of_the_upstream(
        gw: RunningGateway, hanging: Hanging) -> None:
    async with async_openai(gw, timeout=0.5) as client:
        with pytest.raises(openai.APITimeoutError):
            await client.chat.completions.create(
                model="stuck", messages=[{"role": "user", "content": "wait forever"}])
    # The client hung up: the gateway stops waiting on the upstream (bounded wait).
    await asyncio.wait_for(hanging.abandoned.wait(), timeout=30)
    assert len(hanging.requests) == 1


# --- anthropic ---------------------------------------------------------------------------


@pytest.mark.parametrize("model", ["claude", "chat"])
async def test_sync_messages_create_and_stream_final_message(
        gw: RunningGateway, model: str) -> None:
    def run() -> tuple[Any, list[str], Any]:
        with sync_anthropic(gw) as client:
            made = client.messages.create(
                model=model, max_tokens=100,
                messages=[{"role": "user", "content": "sync hello"}])
            with client.messages.stream(
                    model=model, max_tokens=100,
                    messages=[{"role": "user", "content": "sync stream"}]) as stream:
                pieces = list(stream.text_stream)
                final = stream.get_final_message()
        return made, pieces, final

    made, pieces, final = await in_thread(run)
    assert made.type == "message" and made.role == "assistant"
    assert made.content[0].type == "text" and made.content[0].text
    assert made.stop_reason == "end_turn" and made.usage.output_tokens > 0
    assert made._request_id
    assert "".join(pieces) == final.content[0].text
    assert final.stop_reason == "end_turn"
    assert final.usage.input_tokens > 0 and final.usage.output_tokens > 0


async def test_a_tool_loop_on_a_model_served_by_a_chat_server(
        gw: RunningGateway, referee: Referee) -> None:
    """Claude Code's loop through the gateway to an OpenAI-compatible server: a
    ``tool_use`` comes back with an id, the ``tool_result`` goes up as the tool message."""
    messages: list[Any] = [{"role": "user", "content": "use the TOOL for Oslo"}]
    async with async_anthropic(gw) as client:
        first = await client.messages.create(model="local", max_tokens=200, tools=[WEATHER],
                                             messages=messages)
        assert first.stop_reason == "tool_use"
        use = next(b for b in first.content if b.type == "tool_use")
        messages += [{"role": "assistant", "content": [b.model_dump() for b in first.content]},
                     {"role": "user", "content": [{"type": "tool_result",
                                                   "tool_use_id": use.id,
                                                   "content": "cloudy, 8C"}]}]
        second = await client.messages.create(model="local", max_tokens=200,
                                              tools=[WEATHER], messages=messages)
    assert use.name == "get_weather" and use.id
    assert second.stop_reason == "end_turn" and second.content[0].type == "text"
    sent = referee.requests[-1].json()["messages"]
    assert sent[-2]["tool_calls"][0]["id"] == use.id
    assert sent[-1] == {"role": "tool", "tool_call_id": use.id, "content": "cloudy, 8C"}


async def test_count_tokens_on_a_model_served_by_a_chat_server(gw: RunningGateway) -> None:
    """Claude Code counts tokens before each turn: for a model whose server has no count
    endpoint the answer is still a count (or a clear error the SDK raises)."""
    async with async_anthropic(gw) as client:
        counted = await client.messages.count_tokens(
            model="local", system="be brief", tools=[WEATHER],
            messages=[{"role": "user", "content": "how many tokens is this " * 20}])
        small = await client.messages.count_tokens(
            model="local", messages=[{"role": "user", "content": "hi"}])
    assert counted.input_tokens > small.input_tokens > 0


async def test_anthropic_raw_and_streaming_responses(
        gw: RunningGateway, claude: FakeAnthropic) -> None:
    async with async_anthropic(gw) as client:
        raw = await client.messages.with_raw_response.create(
            model="claude", max_tokens=50, messages=[{"role": "user", "content": "raw"}],
            extra_headers={"anthropic-beta": "prompt-caching-2024-07-31"})
        async with client.messages.with_streaming_response.create(
                model="claude", max_tokens=50, stream=True,
                messages=[{"role": "user", "content": "streamed raw"}]) as streamed:
            lines = [line async for line in streamed.iter_lines() if line]
            stream_request_id = streamed.headers.get("request-id")
    message = await raw.parse()
    assert message.content[0].type == "text" and message.content[0].text == "you said: raw"
    assert raw.headers["request-id"] == message._request_id
    assert stream_request_id
    events = [line.removeprefix("event: ") for line in lines if line.startswith("event: ")]
    assert events[0] == "message_start" and events[-1] == "message_stop"
    assert claude.requests[0].headers["anthropic-beta"] == "prompt-caching-2024-07-31"


async def test_anthropic_rate_limit_is_retried_by_the_sdk_when_the_gateway_did_not(
        gw: RunningGateway, claude: FakeAnthropic) -> None:
    limited = anthropic_error(429, "Number of request tokens has exceeded your per-minute "
                              "rate limit", "rate_limit_error", {"retry-after": "0"})
    claude.script(*[limited] * 20)
    async with async_anthropic(gw, max_retries=2) as client:
        with pytest.raises(anthropic.RateLimitError) as refused:
            await client.messages.create(
                model="claude", max_tokens=50,
                messages=[{"role": "user", "content": "always limited"}])
    body = refused.value.body
    assert isinstance(body, dict) and body["error"]["type"] == "rate_limit_error"
    headers = refused.value.response.headers
    assert headers["x-should-retry"] == "false"
    assert len(claude.requests) == int(headers["x-gateway-attempts"])


async def test_claude_codes_auth_token_is_a_client_key_and_never_goes_upstream(
        gw: RunningGateway, claude: FakeAnthropic) -> None:
    """``ANTHROPIC_AUTH_TOKEN`` (the SDK's ``auth_token``: ``Authorization: Bearer``) is how
    Claude Code is pointed at a LiteLLM proxy with its master key."""
    async with anthropic.AsyncAnthropic(base_url=gw.root, auth_token=KEY, api_key=None,
                                        max_retries=0) as client:
        made = await client.messages.create(
            model="claude", max_tokens=50, messages=[{"role": "user", "content": "bearer"}])
    async with anthropic.AsyncAnthropic(base_url=gw.root, auth_token="sk-not-a-key",
                                        api_key=None, max_retries=0) as wrong:
        with pytest.raises(anthropic.AuthenticationError) as refused:
            await wrong.messages.create(
                model="claude", max_tokens=50, messages=[{"role": "user", "content": "no"}])
    assert made.content[0].type == "text" and made.content[0].text == "you said: bearer"
    sent = claude.requests[0].headers
    assert sent["x-api-key"] == UPSTREAM_KEY and "authorization" not in sent
    body = refused.value.body
    assert isinstance(body, dict) and body["error"]["type"] == "authentication_error"
    assert len(claude.requests) == 1


async def test_the_clients_organization_and_project_never_replace_the_deployments(
        gw: RunningGateway, referee: Referee) -> None:
    """The openai SDK sends ``OpenAI-Organization``/``OpenAI-Project`` from its own settings
    (``OPENAI_ORG_ID``): the upstream is billed as the operator configured, as through the
    proxy, and the client's key stays at the gateway."""
    async with openai.AsyncOpenAI(base_url=gw.base_url, api_key=KEY, max_retries=0,
                                  organization="org-client-side",
                                  project="proj-client-side") as client:
        await client.chat.completions.create(
            model="chat", messages=[{"role": "user", "content": "billing"}])
    sent = referee.requests[-1]
    assert sent.header("authorization") == f"Bearer {UPSTREAM_KEY}"
    assert sent.header("openai-organization") is None
    assert sent.header("openai-project") is None
