"""An outsider's third round with client SDKs pointed at the gateway's base URL: request
options a user sets (``n``, ``logprobs``, ``seed``, ``max_completion_tokens``,
``parallel_tool_calls``, ``reasoning_effort``, ``service_tier``, ``store``/``metadata``),
streamed strict tools, ``responses.stream`` with ``text_format``, reasoning items, Anthropic
tool streams with ``input_json`` deltas, the beta ``tool_runner``, thinking, cached system
blocks, images and PDFs, Agents SDK handoffs, guardrails and streamed runs on both OpenAI
models, and litellm's own SDK used as a client. Each runs against real fakes on 127.0.0.1
(a chat server, an Anthropic Messages API, a Responses API) behind a real gateway, and
asserts what the SDK hands its caller.
"""

from __future__ import annotations

import base64
import json
from typing import Any

import anthropic
import openai
import pytest
from agents import (
    Agent,
    GuardrailFunctionOutput,
    InputGuardrailTripwireTriggered,
    OpenAIChatCompletionsModel,
    OpenAIResponsesModel,
    Runner,
    function_tool,
    input_guardrail,
    set_tracing_disabled,
)
from anthropic import beta_tool
from pydantic import BaseModel

from gateway.referee import Referee
from tests.conftest import GatewayFactory, RunningGateway, model_entry
from tests.fakes.anthropic_server import FakeAnthropic
from tests.fakes.native_base import Canned, png_bytes
from tests.fakes.responses_server import FakeResponses
from tests.server.three_upstreams import UPSTREAM_KEY, claude, gpt, models, referee

__all__ = ["claude", "gpt", "referee"]  # the three upstreams' fixtures, shared

KEY = "client-key-sdk-heldout-3"
PDF = base64.b64encode(b"%PDF-1.4\n1 0 obj<<>>endobj\ntrailer<<>>\n%%EOF\n").decode()


class Ticket(BaseModel):
    """A structured answer."""

    title: str
    priority: int


class Lookup(BaseModel):
    """The arguments of a strict function tool."""

    city: str


class Query(BaseModel):
    """The arguments the fake Claude gives any tool."""

    query: str


@pytest.fixture
async def gw(gateway_factory: GatewayFactory, referee: Referee, claude: FakeAnthropic,
             gpt: FakeResponses) -> RunningGateway:
    local = model_entry("local", referee.base_url, model="hosted_vllm/referee",
                        api_key=UPSTREAM_KEY)  # a chat-only server: other wires translated
    return await gateway_factory({"model_list": [*models(referee, claude, gpt), local],
                                  "gateway": {"api_keys": [{"key": KEY, "owner": "team"}]}})


def oa(gw: RunningGateway, **options: Any) -> openai.AsyncOpenAI:
    options.setdefault("max_retries", 0)
    return openai.AsyncOpenAI(base_url=gw.base_url, api_key=KEY, **options)


def an(gw: RunningGateway, **options: Any) -> anthropic.AsyncAnthropic:
    options.setdefault("max_retries", 0)
    return anthropic.AsyncAnthropic(base_url=gw.root, api_key=KEY, **options)


def completion(*choices: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"id": "chatcmpl-h3", "object": "chat.completion", "created": 1,
            "model": "referee", "choices": [{"index": i, "finish_reason": "stop",
                                             "logprobs": None, **c}
                                            for i, c in enumerate(choices)],
            "usage": {"prompt_tokens": 9, "completion_tokens": 5, "total_tokens": 14,
                      "prompt_tokens_details": {"cached_tokens": 4},
                      "completion_tokens_details": {"reasoning_tokens": 2}}, **extra}


def said(content: str) -> dict[str, Any]:
    return {"message": {"role": "assistant", "content": content}}


def chunk(delta: dict[str, Any] | None = None, finish: str | None = None, *,
          usage: dict[str, Any] | None = None) -> bytes:
    data: dict[str, Any] = {"id": "chatcmpl-h3s", "object": "chat.completion.chunk",
                            "created": 1, "model": "referee"}
    data["choices"] = [] if delta is None and finish is None else [
        {"index": 0, "delta": delta or {}, "finish_reason": finish, "logprobs": None}]
    data["usage"] = usage
    return b"data: " + json.dumps(data).encode() + b"\n\n"


USAGE = {"prompt_tokens": 11, "completion_tokens": 6, "total_tokens": 17}
SSE = {"content-type": "text/event-stream"}


def sse(*events: bytes) -> bytes:
    return b"".join(events) + b"data: [DONE]\n\n"


def tool_stream(name: str, arguments: str) -> bytes:
    """A chat stream with one tool call, its arguments in two pieces, then the usage."""
    half = len(arguments) // 2
    return sse(chunk({"role": "assistant", "content": None}),
               chunk({"tool_calls": [{"index": 0, "id": "call_h3", "type": "function",
                                      "function": {"name": name, "arguments": ""}}]}),
               chunk({"tool_calls": [{"index": 0, "function": {"arguments": arguments[:half]}}]}),
               chunk({"tool_calls": [{"index": 0, "function": {"arguments": arguments[half:]}}]}),
               chunk(finish="tool_calls"), chunk(usage=USAGE))


def text_stream(text: str) -> bytes:
    return sse(chunk({"role": "assistant", "content": ""}), chunk({"content": text[:5]}),
               chunk({"content": text[5:]}), chunk(finish="stop"), chunk(usage=USAGE))


def sent(referee: Referee) -> dict[str, Any]:
    body: dict[str, Any] = json.loads(referee.requests[-1].body)
    return body


# --- openai: Chat Completions ------------------------------------------------------------


async def test_n_choices_and_logprobs_reach_the_caller(gw: RunningGateway,
                                                       referee: Referee) -> None:
    """``n=2`` gives two choices; ``logprobs``/``top_logprobs`` come back as sent."""
    top = [{"token": "Hi", "logprob": -0.1, "bytes": [72, 105]},
           {"token": "Hey", "logprob": -2.3, "bytes": [72, 101, 121]}]
    logprobs = {"content": [{**top[0], "top_logprobs": top}], "refusal": None}
    referee.script(200, completion({**said("Hi"), "logprobs": logprobs}, said("Hello")))
    async with oa(gw) as client:
        answer = await client.chat.completions.create(
            model="chat", messages=[{"role": "user", "content": "greet"}], n=2,
            logprobs=True, top_logprobs=2)
    assert [c.message.content for c in answer.choices] == ["Hi", "Hello"]
    assert [c.index for c in answer.choices] == [0, 1]
    first = answer.choices[0].logprobs
    assert first is not None and first.content is not None
    assert [t.token for t in first.content[0].top_logprobs] == ["Hi", "Hey"]
    body = sent(referee)
    assert body["n"] == 2 and body["logprobs"] is True and body["top_logprobs"] == 2


async def test_request_options_reach_a_chat_server_as_sent(gw: RunningGateway,
                                                           referee: Referee) -> None:
    """``seed``, ``max_completion_tokens``, ``parallel_tool_calls``, ``reasoning_effort``,
    ``service_tier``, ``store`` and ``metadata`` pass untouched; the answer's
    ``service_tier``, ``system_fingerprint`` and usage details come back."""
    referee.script(200, completion(said("ok"), service_tier="default",
                                   system_fingerprint="fp_h3"))
    async with oa(gw) as client:
        answer = await client.chat.completions.create(
            model="chat", messages=[{"role": "user", "content": "options"}], seed=7,
            max_completion_tokens=50, parallel_tool_calls=False, reasoning_effort="low",
            service_tier="default", store=True, metadata={"ticket": "h3"},
            tools=[openai.pydantic_function_tool(Lookup)])
    body = sent(referee)
    assert body["seed"] == 7 and body["max_completion_tokens"] == 50
    assert body["parallel_tool_calls"] is False and body["reasoning_effort"] == "low"
    assert body["service_tier"] == "default" and body["store"] is True
    assert body["metadata"] == {"ticket": "h3"}
    assert answer.service_tier == "default" and answer.system_fingerprint == "fp_h3"
    assert answer.usage is not None and answer.usage.prompt_tokens_details is not None
    assert answer.usage.prompt_tokens_details.cached_tokens == 4
    assert answer.usage.completion_tokens_details is not None
    assert answer.usage.completion_tokens_details.reasoning_tokens == 2


async def test_options_for_claude_become_the_messages_fields(gw: RunningGateway,
                                                             claude: FakeAnthropic) -> None:
    """Through translation: ``max_completion_tokens`` is ``max_tokens``, ``stop`` is
    ``stop_sequences``, ``parallel_tool_calls=False`` disables parallel tool use."""
    async with oa(gw) as client:
        answer = await client.chat.completions.create(
            model="claude", messages=[{"role": "user", "content": "translate options"}],
            max_completion_tokens=77, stop=["END"], parallel_tool_calls=False,
            tools=[openai.pydantic_function_tool(Lookup)])
    body = claude.requests[-1].body
    assert body["max_tokens"] == 77 and body["stop_sequences"] == ["END"]
    assert body["tool_choice"]["disable_parallel_tool_use"] is True
    assert answer.choices[0].message.content == "you said: translate options"


async def test_a_stop_sequence_from_claude_finishes_with_stop(gw: RunningGateway,
                                                              claude: FakeAnthropic) -> None:
    claude.script(Canned(200, {"id": "msg_h3", "type": "message", "role": "assistant",
                               "model": "claude-sonnet-4-5", "stop_reason": "stop_sequence",
                               "stop_sequence": "END", "content": [
                                   {"type": "text", "text": "up to the"}],
                               "usage": {"input_tokens": 5, "output_tokens": 3}}))
    async with oa(gw) as client:
        answer = await client.chat.completions.create(
            model="claude", messages=[{"role": "user", "content": "stop"}], stop="END")
    assert answer.choices[0].finish_reason == "stop"
    assert answer.choices[0].message.content == "up to the"


async def test_an_image_for_claude_through_chat_completions(gw: RunningGateway,
                                                            claude: FakeAnthropic) -> None:
    url = "data:image/png;base64," + base64.b64encode(png_bytes()).decode()
    async with oa(gw) as client:
        answer = await client.chat.completions.create(model="claude", messages=[
            {"role": "user", "content": [{"type": "text", "text": "look"},
                                         {"type": "image_url", "image_url": {"url": url}}]}])
    assert answer.choices[0].message.content == "you said: look | [images: 1]"
    block = claude.requests[-1].body["messages"][0]["content"][1]
    assert block["type"] == "image" and block["source"]["media_type"] == "image/png"


async def test_streamed_strict_tool_call_is_parsed_with_usage(gw: RunningGateway,
                                                              referee: Referee) -> None:
    """The stream helper with a pydantic tool: the arguments event carries the parsed
    model, and ``include_usage`` gives the usage on the final completion."""
    referee.script(200, tool_stream("Lookup", '{"city": "Oslo"}'), SSE)
    async with oa(gw) as client, client.chat.completions.stream(
            model="chat", messages=[{"role": "user", "content": "look up Oslo"}],
            tools=[openai.pydantic_function_tool(Lookup)],
            stream_options={"include_usage": True}) as stream:
        done = [e async for e in stream if e.type == "tool_calls.function.arguments.done"]
        final = await stream.get_final_completion()
    assert len(done) == 1 and done[0].parsed_arguments == Lookup(city="Oslo")
    call = final.choices[0].message.tool_calls
    assert call is not None and call[0].function.parsed_arguments == Lookup(city="Oslo")
    assert final.choices[0].finish_reason == "tool_calls"
    assert final.usage is not None and final.usage.total_tokens == 17


async def test_streamed_strict_tool_call_from_claude(gw: RunningGateway) -> None:
    """The same through translation: Claude's ``input_json`` deltas become arguments."""
    async with oa(gw) as client, client.chat.completions.stream(
            model="claude", messages=[{"role": "user", "content": "TOOL Oslo"}],
            tools=[openai.pydantic_function_tool(Query)],
            stream_options={"include_usage": True}) as stream:
        final = await stream.get_final_completion()
    call = final.choices[0].message.tool_calls
    assert call is not None and call[0].function.name == "Query"
    assert call[0].function.parsed_arguments == Query(query="TOOL Oslo")
    assert final.choices[0].finish_reason == "tool_calls"
    assert final.usage is not None and final.usage.completion_tokens > 0


async def test_parse_through_translation_to_claude(gw: RunningGateway,
                                                   claude: FakeAnthropic) -> None:
    """``parse`` with a pydantic response format on a Claude model gives the object."""
    claude.script(Canned(200, {"id": "msg_h3p", "type": "message", "role": "assistant",
                               "model": "claude-sonnet-4-5", "stop_reason": "end_turn",
                               "stop_sequence": None, "content": [
                                   {"type": "text",
                                    "text": '{"title": "Fire", "priority": 1}'}],
                               "usage": {"input_tokens": 5, "output_tokens": 3}}))
    async with oa(gw) as client:
        parsed = await client.chat.completions.parse(
            model="claude", messages=[{"role": "user", "content": "ticket"}],
            response_format=Ticket)
    assert parsed.choices[0].message.parsed == Ticket(title="Fire", priority=1)


# --- openai: Responses -------------------------------------------------------------------


async def test_responses_stream_with_text_format_through_translation(
        gw: RunningGateway, referee: Referee) -> None:
    referee.script(200, text_stream('{"title": "Leak", "priority": 2}'), SSE)
    async with oa(gw) as client, client.responses.stream(
            model="local", input="file it", text_format=Ticket) as stream:
        deltas = [e.delta async for e in stream if e.type == "response.output_text.delta"]
        final = await stream.get_final_response()
    assert "".join(deltas) == '{"title": "Leak", "priority": 2}'
    assert final.output_parsed == Ticket(title="Leak", priority=2)
    assert final.usage is not None and final.usage.total_tokens == 17
    body = sent(referee)
    assert body["response_format"]["type"] == "json_schema"


async def test_responses_options_pass_to_a_responses_api(gw: RunningGateway,
                                                         gpt: FakeResponses) -> None:
    """``instructions``, ``max_output_tokens``, ``metadata``, ``store=False``, ``reasoning``
    reach the upstream; the reasoning item comes back before the message."""
    async with oa(gw) as client:
        answer = await client.responses.create(
            model="gpt", input="think first", instructions="be short", max_output_tokens=64,
            metadata={"ticket": "h3"}, store=False, reasoning={"effort": "low"},
            include=["reasoning.encrypted_content"])
    body = gpt.requests[-1].body
    assert body["instructions"] == "be short" and body["max_output_tokens"] == 64
    assert body["metadata"] == {"ticket": "h3"} and body["store"] is False
    assert body["reasoning"] == {"effort": "low"}
    assert [i.type for i in answer.output] == ["reasoning", "message"]
    assert answer.output_text == "you said: think first"


async def test_responses_tools_and_options_through_translation(gw: RunningGateway,
                                                               referee: Referee) -> None:
    """``parallel_tool_calls=False``, ``tool_choice="required"`` and
    ``max_output_tokens`` become the chat fields; the call comes back as an item."""
    async with oa(gw) as client:
        answer = await client.responses.create(
            model="local", input="use the TOOL", parallel_tool_calls=False,
            tool_choice="required", max_output_tokens=80,
            tools=[{"type": "function", "name": "lookup", "parameters": {
                "type": "object", "properties": {"city": {"type": "string"}}}}])
    body = sent(referee)
    assert body["parallel_tool_calls"] is False and body["tool_choice"] == "required"
    assert body.get("max_completion_tokens", body.get("max_tokens")) == 80
    calls = [i for i in answer.output if i.type == "function_call"]
    assert len(calls) == 1 and calls[0].name == "lookup"


async def test_responses_usage_details_through_translation(gw: RunningGateway,
                                                           referee: Referee) -> None:
    """Cached and reasoning tokens from a chat server's usage reach the Responses usage."""
    referee.script(200, completion(said("counted")))
    async with oa(gw) as client:
        answer = await client.responses.create(model="local", input="count")
    assert answer.usage is not None
    assert answer.usage.input_tokens == 9 and answer.usage.output_tokens == 5
    assert answer.usage.input_tokens_details.cached_tokens == 4
    assert answer.usage.output_tokens_details.reasoning_tokens == 2


async def test_responses_image_and_file_input_through_translation(
        gw: RunningGateway, referee: Referee) -> None:
    """``input_image`` becomes an ``image_url`` part and ``input_file`` a chat ``file``
    part (it was dropped: the model never saw the PDF)."""
    url = "data:image/png;base64," + base64.b64encode(png_bytes()).decode()
    pdf = f"data:application/pdf;base64,{PDF}"
    async with oa(gw) as client:
        answer = await client.responses.create(model="local", input=[
            {"role": "user", "content": [{"type": "input_text", "text": "see"},
                                         {"type": "input_image", "image_url": url,
                                          "detail": "low"},
                                         {"type": "input_file", "filename": "a.pdf",
                                          "file_data": pdf}]}])
    assert answer.output_text
    parts = sent(referee)["messages"][-1]["content"]
    assert parts[1] == {"type": "image_url", "image_url": {"url": url, "detail": "low"}}
    assert parts[2] == {"type": "file", "file": {"file_data": pdf, "filename": "a.pdf"}}


# --- anthropic ---------------------------------------------------------------------------


async def test_messages_stream_tool_use_gives_input_json_events(gw: RunningGateway) -> None:
    """Natively and through translation: ``input_json`` events with the growing snapshot,
    and the final message's tool input parsed."""
    tool: anthropic.types.ToolParam = {
        "name": "lookup", "description": "Look up.",
        "input_schema": {"type": "object", "properties": {"query": {"type": "string"}}}}
    for model in ("claude", "local"):
        async with an(gw) as client, client.messages.stream(
                model=model, max_tokens=100, tools=[tool],
                messages=[{"role": "user", "content": "use the TOOL"}]) as stream:
            events = [e async for e in stream if e.type == "input_json"]
            final = await stream.get_final_message()
        use = next(b for b in final.content if b.type == "tool_use")
        assert final.stop_reason == "tool_use" and use.name == "lookup"
        assert events and events[-1].snapshot == use.input
        assert "".join(e.partial_json for e in events) == json.dumps(use.input,
                                                                     separators=(",", ":")) \
            or json.loads("".join(e.partial_json for e in events)) == use.input


calls_made: list[str] = []


@beta_tool
def lookup(query: str) -> str:
    """Look the query up.

    Args:
        query: what to look up
    """
    calls_made.append(query)
    return "found 42"


@pytest.mark.parametrize("model", ["claude", "local"])
async def test_tool_runner_runs_the_loop(gw: RunningGateway, referee: Referee,
                                         model: str) -> None:
    """The beta tool runner (message threads by default): the gateway's
    ``thread_unsupported_request`` makes it send whole histories, and the loop completes."""
    calls_made.clear()
    referee.script(200, completion({"finish_reason": "tool_calls", "message": {
        "role": "assistant", "content": None, "tool_calls": [{
            "id": "call_h3r", "type": "function",
            "function": {"name": "lookup", "arguments": '{"query": "the TOOL"}'}}]}}))
    with anthropic.Anthropic(base_url=gw.root, api_key=KEY, max_retries=0) as client:
        runner = client.beta.messages.tool_runner(
            model=model, max_tokens=200, tools=[lookup],
            messages=[{"role": "user", "content": "please use the TOOL"}])

        def run() -> list[Any]:
            return list(runner)

        import asyncio
        messages = await asyncio.to_thread(run)
    assert len(calls_made) == 1
    assert messages[0].stop_reason == "tool_use" and messages[-1].stop_reason == "end_turn"
    last = messages[-1].content[0]
    assert last.type == "text"
    assert "42" in last.text if model == "claude" else last.text == "referee: accepted 3 messages"


async def test_thinking_and_betas_reach_claude(gw: RunningGateway,
                                               claude: FakeAnthropic) -> None:
    async with an(gw) as client:
        message = await client.beta.messages.create(
            model="claude", max_tokens=2048, betas=["interleaved-thinking-2025-05-14",
                                                    "context-1m-2025-08-07"],
            thinking={"type": "enabled", "budget_tokens": 1024},
            messages=[{"role": "user", "content": "think"}])
    assert message.content[-1].type == "text"
    request = claude.requests[-1]
    assert "interleaved-thinking-2025-05-14" in request.headers["anthropic-beta"]
    assert "context-1m-2025-08-07" in request.headers["anthropic-beta"]
    assert request.body["thinking"] == {"type": "enabled", "budget_tokens": 1024}


async def test_thinking_on_a_chat_model_is_accepted(gw: RunningGateway,
                                                    referee: Referee) -> None:
    """A thinking budget on a model served by a chat server: an answer, not a 400."""
    async with an(gw) as client:
        message = await client.messages.create(
            model="local", max_tokens=2048, thinking={"type": "enabled", "budget_tokens": 1024},
            messages=[{"role": "user", "content": "think"}])
    assert message.content[-1].type == "text" and message.stop_reason == "end_turn"


async def test_stop_sequences_and_user_id_through_translation(gw: RunningGateway,
                                                              referee: Referee) -> None:
    async with an(gw) as client:
        await client.messages.create(
            model="local", max_tokens=100, stop_sequences=["END"],
            metadata={"user_id": "u-9"},
            messages=[{"role": "user", "content": "stop here"}])
    body = sent(referee)
    assert body["stop"] == ["END"]
    assert body.get("user") == "u-9" or body.get("safety_identifier") == "u-9"


async def test_cached_system_blocks_report_cache_reads(gw: RunningGateway,
                                                       claude: FakeAnthropic) -> None:
    system: list[anthropic.types.TextBlockParam] = [
        {"type": "text", "text": "a long policy " * 50, "cache_control": {"type": "ephemeral"}}]
    async with an(gw) as client:
        first = await client.messages.create(model="claude", max_tokens=50, system=system,
                                             messages=[{"role": "user", "content": "one"}])
        second = await client.messages.create(model="claude", max_tokens=50, system=system,
                                              messages=[{"role": "user", "content": "two"}])
    assert (first.usage.cache_creation_input_tokens or 0) > 0
    assert (second.usage.cache_read_input_tokens or 0) > 0
    assert claude.requests[-1].body["system"] == system


async def test_system_blocks_on_a_chat_model_become_a_system_message(
        gw: RunningGateway, referee: Referee) -> None:
    async with an(gw) as client:
        await client.messages.create(
            model="local", max_tokens=50, system=[
                {"type": "text", "text": "rule one", "cache_control": {"type": "ephemeral"}},
                {"type": "text", "text": "rule two"}],
            messages=[{"role": "user", "content": "hi"}])
    first = sent(referee)["messages"][0]
    assert first["role"] == "system"
    text = first["content"] if isinstance(first["content"], str) else " ".join(
        p["text"] for p in first["content"])
    assert "rule one" in text and "rule two" in text


async def test_image_and_pdf_inputs(gw: RunningGateway, claude: FakeAnthropic,
                                    referee: Referee) -> None:
    """Natively both reach Claude as sent; to a chat server the image is an ``image_url``
    and the PDF a ``file`` part."""
    image = base64.b64encode(png_bytes()).decode()
    content: list[Any] = [
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": image}},
        {"type": "document", "source": {"type": "base64", "media_type": "application/pdf",
                                        "data": PDF}},
        {"type": "text", "text": "read these"}]
    async with an(gw) as client:
        native = await client.messages.create(model="claude", max_tokens=50,
                                              messages=[{"role": "user", "content": content}])
        assert native.content[0].type == "text" and "[images: 1]" in native.content[0].text
        assert claude.requests[-1].body["messages"][0]["content"] == content
        translated = await client.messages.create(
            model="local", max_tokens=50, messages=[{"role": "user", "content": content}])
    assert translated.content[0].type == "text"
    parts = sent(referee)["messages"][-1]["content"]
    kinds = [p["type"] for p in parts]
    assert kinds == ["image_url", "file", "text"]
    assert parts[0]["image_url"]["url"] == f"data:image/png;base64,{image}"
    assert parts[1]["file"] == {"file_data": f"data:application/pdf;base64,{PDF}",
                               "filename": "document.pdf"}


async def test_overloaded_claude_raises_the_sdks_overloaded_error(
        gw: RunningGateway, claude: FakeAnthropic) -> None:
    overloaded = {"type": "error", "error": {"type": "overloaded_error",
                                             "message": "Overloaded"}}
    claude.script(*[Canned(529, overloaded)] * 5)
    async with an(gw) as client:
        with pytest.raises(anthropic.APIStatusError) as raised:
            await client.messages.create(model="claude", max_tokens=50,
                                         messages=[{"role": "user", "content": "hi"}])
    assert raised.value.status_code == 529
    assert isinstance(raised.value, anthropic.OverloadedError)
    assert raised.value.body["error"]["type"] == "overloaded_error"  # type: ignore[index]


# --- Agents SDK --------------------------------------------------------------------------


@function_tool
def read_file(query: str = "") -> str:
    """Read the file the user means."""
    return "the file says 42"


@pytest.fixture
def agents_offline() -> None:
    set_tracing_disabled(True)  # the SDK would export traces to OpenAI otherwise


def team(model: Any) -> tuple[Agent[Any], Agent[Any]]:
    specialist = Agent(name="specialist", instructions="Answer the question.", model=model)
    triage = Agent(name="triage", instructions="Hand off with the TOOL.",
                   handoffs=[specialist], model=model)
    return triage, specialist


@pytest.mark.usefixtures("agents_offline")
async def test_a_handoff_on_the_responses_model(gw: RunningGateway, gpt: FakeResponses) -> None:
    async with oa(gw) as client:
        triage, specialist = team(OpenAIResponsesModel(model="gpt", openai_client=client))
        result = await Runner.run(triage, "route this with the TOOL")
    assert result.last_agent is specialist
    assert gpt.requests[0].body["tools"][0]["name"] == "transfer_to_specialist"
    assert isinstance(result.final_output, str) and result.final_output


@pytest.mark.usefixtures("agents_offline")
@pytest.mark.parametrize("wire", ["responses", "chat"])
async def test_a_streamed_handoff_on_both_models(gw: RunningGateway, wire: str) -> None:
    async with oa(gw) as client:
        model: Any = (OpenAIResponsesModel(model="local", openai_client=client)
                      if wire == "responses"
                      else OpenAIChatCompletionsModel(model="claude", openai_client=client))
        triage, specialist = team(model)
        result = Runner.run_streamed(triage, "route this with the TOOL")
        kinds = [e.type async for e in result.stream_events()]
    assert "agent_updated_stream_event" in kinds and "raw_response_event" in kinds
    assert result.last_agent is specialist
    assert isinstance(result.final_output, str) and result.final_output


@pytest.mark.usefixtures("agents_offline")
async def test_an_input_guardrail_trips_before_the_model_answers(gw: RunningGateway) -> None:
    @input_guardrail
    async def no_secrets(ctx: Any, agent: Any, text: Any) -> GuardrailFunctionOutput:
        return GuardrailFunctionOutput(output_info=None,
                                       tripwire_triggered="password" in str(text))

    async with oa(gw) as client:
        guarded = Agent(name="guarded", instructions="Help.", input_guardrails=[no_secrets],
                        tools=[read_file],
                        model=OpenAIChatCompletionsModel(model="chat", openai_client=client))
        with pytest.raises(InputGuardrailTripwireTriggered):
            await Runner.run(guarded, "my password is hunter2")
        fine = await Runner.run(guarded, "read it with the TOOL")
    assert "referee" in str(fine.final_output)


# --- litellm's SDK as a client -----------------------------------------------------------


# litellm's stream reader reads a deprecated pydantic attribute (its own code, not the
# gateway's answer): the warning is no failure of what the user gets.
@pytest.mark.filterwarnings("ignore::pydantic.warnings.PydanticDeprecatedSince211")
async def test_litellm_completion_pointed_at_the_gateway(gw: RunningGateway,
                                                         referee: Referee) -> None:
    import litellm

    answer = await litellm.acompletion(model="openai/claude", api_base=gw.base_url,
                                       api_key=KEY, messages=[{"role": "user", "content": "hi"}],
                                       max_tokens=50)
    assert answer.choices[0].message.content == "you said: hi"
    stream = await litellm.acompletion(model="openai/chat", api_base=gw.base_url, api_key=KEY,
                                       messages=[{"role": "user", "content": "hi"}],
                                       stream=True, stream_options={"include_usage": True})
    text = ""
    usage = None
    async for part in stream:
        if part.choices:
            text += part.choices[0].delta.content or ""
        usage = getattr(part, "usage", None) or usage
    assert text.startswith("referee: accepted")
    assert usage is not None and usage.total_tokens > 0


async def test_litellm_anthropic_messages_pointed_at_the_gateway(gw: RunningGateway,
                                                                 claude: FakeAnthropic) -> None:
    import litellm

    answer = await litellm.anthropic.messages.acreate(
        model="anthropic/claude", api_base=gw.root, api_key=KEY, max_tokens=50,
        messages=[{"role": "user", "content": "hello"}])
    assert isinstance(answer, dict)
    assert answer["content"][0]["text"] == "you said: hello"
    assert claude.requests[-1].headers["x-api-key"] == UPSTREAM_KEY


# --- round 3, second batch ---------------------------------------------------------------


async def test_streaming_tool_runner_and_thread_false(gw: RunningGateway,
                                                      claude: FakeAnthropic) -> None:
    """The streaming tool runner falls back from threads too; ``thread=False`` never
    sends one."""
    calls_made.clear()

    def run() -> tuple[list[Any], list[Any]]:
        with anthropic.Anthropic(base_url=gw.root, api_key=KEY, max_retries=0) as client:
            streamed = [stream.get_final_message() for stream in
                        client.beta.messages.tool_runner(
                            model="claude", max_tokens=200, tools=[lookup], stream=True,
                            messages=[{"role": "user", "content": "stream the TOOL"}])]
            plain = list(client.beta.messages.tool_runner(
                model="claude", max_tokens=200, tools=[lookup], thread=False,
                messages=[{"role": "user", "content": "plain TOOL"}]))
            return streamed, plain

    import asyncio
    streamed, plain = await asyncio.to_thread(run)
    assert [m.stop_reason for m in streamed] == ["tool_use", "end_turn"]
    assert [m.stop_reason for m in plain] == ["tool_use", "end_turn"]
    assert len(calls_made) == 2
    assert all("thread" not in r.body for r in claude.requests)


async def test_anthropic_parse_with_an_output_format(gw: RunningGateway, claude: FakeAnthropic,
                                                     referee: Referee) -> None:
    """``messages.parse(output_format=...)``: natively the ``output_config`` reaches Claude;
    on a chat model it becomes ``response_format`` and the SDK parses the answer."""
    claude.script(Canned(200, {"id": "msg_h3f", "type": "message", "role": "assistant",
                               "model": "claude-sonnet-4-5", "stop_reason": "end_turn",
                               "stop_sequence": None, "content": [
                                   {"type": "text", "text": '{"title": "A", "priority": 3}'}],
                               "usage": {"input_tokens": 5, "output_tokens": 3}}))
    referee.script(200, completion(said('{"title": "B", "priority": 4}')))
    async with an(gw) as client:
        native = await client.messages.parse(
            model="claude", max_tokens=100, output_format=Ticket,
            messages=[{"role": "user", "content": "ticket"}])
        translated = await client.messages.parse(
            model="local", max_tokens=100, output_format=Ticket,
            messages=[{"role": "user", "content": "ticket"}])
    assert native.parsed_output == Ticket(title="A", priority=3)
    assert claude.requests[-1].body["output_config"]["format"]["type"] == "json_schema"
    assert translated.parsed_output == Ticket(title="B", priority=4)
    body = sent(referee)
    assert body["response_format"]["type"] == "json_schema"
    assert body["response_format"]["json_schema"]["schema"]["properties"].keys() == {
        "title", "priority"}


async def test_a_named_tool_choice_on_a_chat_model(gw: RunningGateway,
                                                   referee: Referee) -> None:
    async with an(gw) as client:
        message = await client.messages.create(
            model="local", max_tokens=100, tool_choice={"type": "tool", "name": "lookup"},
            tools=[{"name": "lookup", "input_schema": {"type": "object", "properties": {}}}],
            messages=[{"role": "user", "content": "use the TOOL"}])
    assert sent(referee)["tool_choice"] == {"type": "function", "function": {"name": "lookup"}}
    assert message.stop_reason == "tool_use"
    assert message.content[-1].type == "tool_use" and message.content[-1].name == "lookup"


async def test_responses_parse_with_a_pydantic_function_tool(gw: RunningGateway,
                                                             referee: Referee) -> None:
    """A strict function tool on ``responses.parse``: the call's arguments are parsed."""
    referee.script(200, completion({"finish_reason": "tool_calls", "message": {
        "role": "assistant", "content": None, "tool_calls": [{
            "id": "call_h3p", "type": "function",
            "function": {"name": "Lookup", "arguments": '{"city": "Rome"}'}}]}}))
    async with oa(gw) as client:
        parsed = await client.responses.parse(
            model="local", input="where", tools=[openai.pydantic_function_tool(Lookup)])
    call = next(i for i in parsed.output if i.type == "function_call")
    assert call.parsed_arguments == Lookup(city="Rome")
    tool = sent(referee)["tools"][0]
    assert tool["function"]["name"] == "Lookup" and tool["function"]["strict"] is True


async def test_responses_stream_of_a_tool_call_through_translation(
        gw: RunningGateway, referee: Referee) -> None:
    """The events a Responses client waits for on a call: ``...arguments.delta`` pieces,
    ``...arguments.done`` with the whole, and the call in the final response."""
    referee.script(200, tool_stream("lookup", '{"city": "Lima"}'), SSE)
    async with oa(gw) as client, client.responses.stream(
            model="local", input="call it", tools=[{
                "type": "function", "name": "lookup", "strict": False, "parameters": {
                    "type": "object", "properties": {"city": {"type": "string"}}}}]) as stream:
        events = [e async for e in stream]
        final = await stream.get_final_response()
    deltas = [e.delta for e in events if e.type == "response.function_call_arguments.delta"]
    done = [e for e in events if e.type == "response.function_call_arguments.done"]
    assert "".join(deltas) == '{"city": "Lima"}'
    assert len(done) == 1 and done[0].arguments == '{"city": "Lima"}'
    call = next(i for i in final.output if i.type == "function_call")
    assert call.call_id == "call_h3" and call.arguments == '{"city": "Lima"}'
    assert final.usage is not None and final.usage.output_tokens == 6


async def test_n_choices_streamed_keep_their_indexes(gw: RunningGateway,
                                                     referee: Referee) -> None:
    def two(delta: dict[str, Any], index: int, finish: str | None = None) -> bytes:
        data = {"id": "chatcmpl-n", "object": "chat.completion.chunk", "created": 1,
                "model": "referee", "choices": [{"index": index, "delta": delta,
                                                 "finish_reason": finish, "logprobs": None}]}
        return b"data: " + json.dumps(data).encode() + b"\n\n"

    referee.script(200, sse(two({"role": "assistant", "content": "one"}, 0),
                            two({"role": "assistant", "content": "two"}, 1),
                            two({}, 0, "stop"), two({}, 1, "stop")), SSE)
    async with oa(gw) as client, client.chat.completions.stream(
            model="chat", n=2, messages=[{"role": "user", "content": "twice"}]) as stream:
        final = await stream.get_final_completion()
    assert [c.message.content for c in final.choices] == ["one", "two"]


@pytest.mark.usefixtures("agents_offline")
async def test_agent_model_settings_reach_the_upstream(gw: RunningGateway,
                                                       gpt: FakeResponses) -> None:
    """``ModelSettings`` (tool_choice, parallel_tool_calls, max_tokens, metadata) and a
    follow-up turn by ``previous_response_id`` on a Responses model."""
    from agents import ModelSettings

    async with oa(gw) as client:
        agent = Agent(name="tuned", instructions="Use tools.", tools=[read_file],
                      model=OpenAIResponsesModel(model="gpt", openai_client=client),
                      model_settings=ModelSettings(tool_choice="required", max_tokens=90,
                                                   parallel_tool_calls=False,
                                                   metadata={"run": "h3"}),
                      reset_tool_choice=True)
        first = await Runner.run(agent, "read it with the TOOL")
        second = await Runner.run(agent, "and now?", previous_response_id=first.last_response_id)
    body = gpt.requests[0].body
    assert body["tool_choice"] == "required" and body["parallel_tool_calls"] is False
    assert body["max_output_tokens"] == 90 and body["metadata"] == {"run": "h3"}
    assert "the file says 42" in str(first.final_output)
    assert gpt.requests[-1].body["previous_response_id"] == first.last_response_id
    assert second.final_output == "you said: and now?"


async def test_litellm_responses_and_tools_through_the_gateway(
        gw: RunningGateway, claude: FakeAnthropic) -> None:
    import litellm

    answer = await litellm.aresponses(model="openai/gpt", api_base=gw.base_url, api_key=KEY,
                                      input="hello responses")
    assert answer.output[0].content[0].text == "you said: hello responses"
    called = await litellm.acompletion(
        model="openai/claude", api_base=gw.base_url, api_key=KEY, max_tokens=100,
        messages=[{"role": "user", "content": "the TOOL please"}],
        tools=[{"type": "function", "function": {
            "name": "lookup", "parameters": {"type": "object", "properties": {}}}}])
    call = called.choices[0].message.tool_calls[0]
    assert called.choices[0].finish_reason == "tool_calls"
    assert call.function.name == "lookup"
    assert json.loads(call.function.arguments) == {"query": "the TOOL please"}


# --- round 3, third batch: the wires crossed ---------------------------------------------


async def test_responses_on_a_claude_model(gw: RunningGateway, claude: FakeAnthropic) -> None:
    """The Responses API in front of Claude: text, a tool call item, usage, and a stream."""
    tool: Any = {"type": "function", "name": "lookup", "strict": False,
                 "parameters": {"type": "object", "properties": {"query": {"type": "string"}}}}
    async with oa(gw) as client:
        text = await client.responses.create(model="claude", input="hello there",
                                             instructions="be kind", max_output_tokens=60)
        called = await client.responses.create(model="claude", input="the TOOL now",
                                               tools=[tool])
        async with client.responses.stream(model="claude", input="stream me") as stream:
            deltas = [e.delta async for e in stream if e.type == "response.output_text.delta"]
            final = await stream.get_final_response()
    assert text.output_text == "you said: hello there" and text.status == "completed"
    assert text.usage is not None and text.usage.output_tokens > 0
    system = claude.requests[0].body["system"]  # the gateway marks it for prompt caching
    assert system == "be kind" or [b["text"] for b in system] == ["be kind"]
    assert claude.requests[0].body["max_tokens"] == 60
    call = next(i for i in called.output if i.type == "function_call")
    assert call.name == "lookup" and json.loads(call.arguments) == {"query": "the TOOL now"}
    assert "".join(deltas) == final.output_text == "you said: stream me"


async def test_chat_options_claude_cannot_take(gw: RunningGateway,
                                               claude: FakeAnthropic) -> None:
    """``n=2`` and ``logprobs`` on Claude through Chat Completions: a clear 400 (as an
    OpenAI-compatible server without them answers), not a silent single choice."""
    async with oa(gw) as client:
        for extra in ({"n": 2}, {"logprobs": True}):
            with pytest.raises(openai.BadRequestError) as raised:
                await client.chat.completions.create(
                    model="claude", messages=[{"role": "user", "content": "hi"}],
                    **extra)
            assert raised.value.status_code == 400
            assert next(iter(extra)) in raised.value.message


async def test_a_503_with_retry_after_reaches_the_sdk_once(gw: RunningGateway,
                                                           referee: Referee) -> None:
    body = {"error": {"message": "The server is overloaded.", "type": "server_error",
                      "param": None, "code": None}}
    referee.script(503, body, {"retry-after": "0"}, times=20)
    async with oa(gw, max_retries=2) as client:
        with pytest.raises(openai.InternalServerError) as raised:
            await client.chat.completions.create(
                model="chat", messages=[{"role": "user", "content": "busy?"}])
    assert raised.value.status_code == 503
    upstream_calls = len(referee.requests)
    assert upstream_calls <= 4  # the gateway's own retries, not the SDK's on top of them
    assert raised.value.response.headers.get("x-should-retry") == "false"


async def test_anthropic_native_only_fields_pass_to_claude(gw: RunningGateway,
                                                           claude: FakeAnthropic) -> None:
    async with an(gw) as client:
        message = await client.messages.create(
            model="claude", max_tokens=50, service_tier="auto",
            stop_sequences=["\n\nHuman:"], metadata={"user_id": "u-1"},
            messages=[{"role": "user", "content": "fields"}],
            extra_headers={"anthropic-beta": "fine-grained-tool-streaming-2025-05-14"})
    request = claude.requests[-1]
    assert request.body["service_tier"] == "auto"
    assert request.body["stop_sequences"] == ["\n\nHuman:"]
    assert "fine-grained-tool-streaming-2025-05-14" in request.headers["anthropic-beta"]
    assert message.content[0].type == "text"


async def test_a_thread_is_refused_in_the_code_the_sdk_understands(
        gw: RunningGateway, claude: FakeAnthropic) -> None:
    """A hand-made threaded request: a 400 naming ``thread_unsupported_request``, before
    any upstream is called."""
    async with an(gw) as client:
        with pytest.raises(anthropic.BadRequestError) as raised:
            await client.messages.create(
                model="claude", max_tokens=50, messages=[{"role": "user", "content": "hi"}],
                extra_body={"thread": {"type": "create"}})
    error = raised.value.body["error"]  # type: ignore[index]
    assert error["type"] == "invalid_request_error" and "thread" in error["message"]
    assert error["details"]["error_code"] == "thread_unsupported_request"
    assert claude.requests == []
