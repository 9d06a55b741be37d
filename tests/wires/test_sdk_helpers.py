"""The SDKs' higher-level helpers pointed at the gateway's base URL, the way an outside
user would: ``openai``'s stream managers and ``parse`` (structured outputs, strict function
tools), request options (timeouts, retries, idempotency, extra headers/body/query) and the
models list; ``anthropic``'s stream manager, a two-turn tool loop, token counting, betas,
raw headers and its exception classes; and the Agents SDK on both OpenAI wires. Each helper
returns what a user expects, the gateway's headers are there and nothing the client sent
is lost on the way upstream."""

from __future__ import annotations

import json
from typing import Any

import anthropic
import openai
import pytest
from agents import (
    Agent,
    ModelSettings,
    OpenAIChatCompletionsModel,
    OpenAIResponsesModel,
    Runner,
    function_tool,
    set_tracing_disabled,
)
from pydantic import BaseModel

from gateway.referee import Referee
from gateway.referee.bodies import Reply
from tests.conftest import GatewayFactory, RunningGateway, model_entry
from tests.fakes.anthropic_server import FakeAnthropic
from tests.fakes.native_base import Canned, MidStreamError
from tests.fakes.responses_server import FakeResponses
from tests.server.three_upstreams import UPSTREAM_KEY, claude, gpt, models, referee

__all__ = ["claude", "gpt", "referee"]  # the three upstreams' fixtures, shared

KEY = "client-key-helpers"


class City(BaseModel):
    """A structured answer."""

    name: str
    population: int


class Lookup(BaseModel):
    """The arguments of a strict function tool."""

    city: str


@pytest.fixture
async def gw(gateway_factory: GatewayFactory, referee: Referee, claude: FakeAnthropic,
             gpt: FakeResponses) -> RunningGateway:
    local = model_entry("local", referee.base_url, model="hosted_vllm/referee",
                        api_key=UPSTREAM_KEY)  # a chat-only server: Responses translated
    return await gateway_factory({"model_list": [*models(referee, claude, gpt), local],
                                  "gateway": {"api_keys": [{"key": KEY, "owner": "team"}]}})


def oa(gw: RunningGateway, **options: Any) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=gw.base_url, api_key=KEY, max_retries=0, **options)


def an(gw: RunningGateway) -> anthropic.AsyncAnthropic:
    return anthropic.AsyncAnthropic(base_url=gw.base_url.removesuffix("/v1"), api_key=KEY,
                                    max_retries=0)


def completion(message: dict[str, Any], finish: str = "stop") -> dict[str, Any]:
    return {"id": "chatcmpl-helpers", "object": "chat.completion", "created": 1,
            "model": "referee", "choices": [{"index": 0, "finish_reason": finish,
                                             "message": {"role": "assistant", **message}}],
            "usage": {"prompt_tokens": 9, "completion_tokens": 5, "total_tokens": 14}}


def responses_answer(text: str) -> dict[str, Any]:
    return {"id": "resp_helpers", "object": "response", "created_at": 1, "status": "completed",
            "model": "gpt-5", "output": [{"type": "message", "id": "msg_helpers",
                                          "status": "completed", "role": "assistant",
                                          "content": [{"type": "output_text", "text": text,
                                                       "annotations": []}]}],
            "parallel_tool_calls": True, "tool_choice": "auto", "tools": [], "error": None,
            "incomplete_details": None, "usage": {
                "input_tokens": 5, "output_tokens": 5, "total_tokens": 10,
                "input_tokens_details": {"cached_tokens": 0},
                "output_tokens_details": {"reasoning_tokens": 0}}}


# --- openai: Chat Completions helpers ---------------------------------------------------


async def test_chat_stream_manager_yields_events_and_the_final_completion(
    gw: RunningGateway, referee: Referee
) -> None:
    async with oa(gw) as c, c.chat.completions.stream(
        model="chat", messages=[{"role": "user", "content": "hello there"}],
        stream_options={"include_usage": True},
    ) as stream:
        kinds = [event.type async for event in stream]
        final = await stream.get_final_completion()
    assert "content.delta" in kinds and "content.done" in kinds
    text = final.choices[0].message.content or ""
    assert text.startswith("referee: accepted")
    assert final.choices[0].finish_reason == "stop"
    assert final.usage is not None and final.usage.total_tokens > 0
    sent = referee.requests[-1].json()
    assert sent["stream"] is True and sent["stream_options"] == {"include_usage": True}


async def test_chat_stream_manager_accumulates_a_tool_call(
    gw: RunningGateway, referee: Referee
) -> None:
    tools: list[Any] = [{"type": "function", "function": {
        "name": "lookup", "description": "Look a city up.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]
    async with oa(gw) as c, c.chat.completions.stream(
        model="chat", messages=[{"role": "user", "content": "use the TOOL"}], tools=tools,
    ) as stream:
        kinds = {event.type async for event in stream}
        final = await stream.get_final_completion()
    assert "tool_calls.function.arguments.done" in kinds
    call = (final.choices[0].message.tool_calls or [])[0]
    assert call.function.name == "lookup" and final.choices[0].finish_reason == "tool_calls"
    assert referee.requests[-1].json()["tools"] == tools


async def test_chat_parse_returns_the_pydantic_object(
    gw: RunningGateway, referee: Referee
) -> None:
    referee.script(200, completion({"content": '{"name": "Paris", "population": 2100000}'}))
    async with oa(gw) as c:
        raw = await c.chat.completions.with_raw_response.parse(
            model="chat", messages=[{"role": "user", "content": "the capital of France"}],
            response_format=City)
    parsed = raw.parse().choices[0].message.parsed
    assert parsed == City(name="Paris", population=2100000)
    assert raw.headers.get("x-request-id")
    sent = referee.requests[-1].json()
    schema = sent["response_format"]
    assert schema["type"] == "json_schema" and schema["json_schema"]["name"] == "City"
    assert schema["json_schema"]["strict"] is True
    assert set(schema["json_schema"]["schema"]["required"]) == {"name", "population"}


async def test_chat_stream_manager_parses_a_structured_answer(
    gw: RunningGateway, referee: Referee
) -> None:
    pieces = ['{"name": "Lis', 'bon", "population": 545000}']
    chunks = [{"id": "chatcmpl-s", "object": "chat.completion.chunk", "created": 1,
               "model": "referee", "choices": [{"index": 0, "delta": delta,
                                                "finish_reason": finish}]}
              for delta, finish in [({"role": "assistant", "content": ""}, None),
                                    *[({"content": p}, None) for p in pieces], ({}, "stop")]]
    events = b"".join(b"data: " + json.dumps(c).encode() + b"\n\n" for c in chunks)
    referee.script(Reply(200, events + b"data: [DONE]\n\n", content_type="text/event-stream"))
    async with oa(gw) as c, c.chat.completions.stream(
        model="chat", messages=[{"role": "user", "content": "the capital of Portugal"}],
        response_format=City,
    ) as stream:
        done = [e.parsed async for e in stream if e.type == "content.done"]
        final = await stream.get_final_completion()
    assert done == [City(name="Lisbon", population=545000)]
    assert final.choices[0].message.parsed == City(name="Lisbon", population=545000)
    assert referee.requests[-1].json()["response_format"]["json_schema"]["name"] == "City"


async def test_chat_parse_with_a_pydantic_function_tool_parses_the_arguments(
    gw: RunningGateway, referee: Referee
) -> None:
    referee.script(200, completion({"content": None, "tool_calls": [{
        "id": "call_1", "type": "function",
        "function": {"name": "Lookup", "arguments": '{"city": "Oslo"}'}}]}, "tool_calls"))
    async with oa(gw) as c:
        done = await c.chat.completions.parse(
            model="chat", messages=[{"role": "user", "content": "weather in Oslo"}],
            tools=[openai.pydantic_function_tool(Lookup)])
    call = (done.choices[0].message.tool_calls or [])[0]
    assert call.function.parsed_arguments == Lookup(city="Oslo")
    assert referee.requests[-1].json()["tools"][0]["function"]["name"] == "Lookup"


async def test_request_options_reach_the_upstream_and_the_answer_carries_gateway_headers(
    gw: RunningGateway, referee: Referee
) -> None:
    async with oa(gw) as c:
        raw = await c.with_options(timeout=30.0, max_retries=1).chat.completions \
            .with_raw_response.create(
                model="chat", messages=[{"role": "user", "content": "hi"}],
                extra_headers={"Idempotency-Key": "idem-1", "X-Trace": "t-1"},
                extra_body={"user": "u-42", "metadata": {"ticket": "T-1"}, "store": False},
                extra_query={"trace": "yes"})
    assert raw.parse().choices[0].message.content
    assert raw.headers.get("x-request-id")
    sent = referee.requests[-1]
    body = sent.json()
    assert body["user"] == "u-42" and body["metadata"] == {"ticket": "T-1"}
    assert body["store"] is False


async def test_a_failure_the_gateway_already_retried_is_not_retried_again_by_the_sdk(
    gw: RunningGateway, referee: Referee
) -> None:
    referee.script(500, {"error": {"message": "upstream broke", "type": "server_error",
                                   "param": None, "code": None}},
                   {"retry-after-ms": "1"}, times=20)
    async with oa(gw) as c:
        with pytest.raises(openai.InternalServerError) as broke:
            await c.with_options(max_retries=2).chat.completions.create(
                model="chat", messages=[{"role": "user", "content": "hi"}])
    headers = broke.value.response.headers
    assert "upstream broke" in broke.value.message
    assert headers["x-should-retry"] == "false"
    # One request to the gateway: its own attempts, not three times as many.
    assert len(referee.requests) == int(headers["x-gateway-attempts"]) > 1


async def test_models_list_and_retrieve_name_the_configured_models(gw: RunningGateway) -> None:
    async with oa(gw) as c:
        names = [m.id async for m in c.models.list()]
        one = await c.models.retrieve("claude")
        with pytest.raises(openai.NotFoundError):
            await c.models.retrieve("no-such-model")
    assert {"chat", "claude", "gpt"} <= set(names)
    assert one.id == "claude"


# --- openai: Responses helpers ------------------------------------------------------------


async def test_responses_stream_manager_yields_events_and_the_final_response(
    gw: RunningGateway, gpt: FakeResponses
) -> None:
    async with oa(gw) as c, c.responses.stream(
        model="gpt", input="hello stream", instructions="be brief",
        metadata={"ticket": "T-2"},
    ) as stream:
        kinds = [event.type async for event in stream]
        final = await stream.get_final_response()
    assert kinds[0] == "response.created" and kinds[-1] == "response.completed"
    assert "response.output_text.delta" in kinds
    assert final.output_text == "you said: hello stream"
    sent = gpt.requests[-1].body
    assert sent["instructions"] == "be brief" and sent["metadata"] == {"ticket": "T-2"}
    assert sent["stream"] is True


async def test_responses_stream_through_translation_to_a_chat_upstream(
    gw: RunningGateway, referee: Referee
) -> None:
    async with oa(gw) as c, c.responses.stream(model="local", input="hello chat") as stream:
        kinds = [event.type async for event in stream]
        final = await stream.get_final_response()
    assert kinds[-1] == "response.completed"
    assert final.output_text.startswith("referee: accepted")
    assert referee.requests[-1].json()["messages"][-1]["content"] == "hello chat"


async def test_responses_parse_returns_the_pydantic_object(
    gw: RunningGateway, gpt: FakeResponses
) -> None:
    gpt.script(Canned(200, responses_answer('{"name": "Rome", "population": 2800000}')))
    async with oa(gw) as c:
        done = await c.responses.parse(model="gpt", input="the capital of Italy",
                                       text_format=City)
    assert done.output_parsed == City(name="Rome", population=2800000)
    fmt = gpt.requests[-1].body["text"]["format"]
    assert fmt["type"] == "json_schema" and fmt["name"] == "City" and fmt["strict"] is True


async def test_responses_parse_through_translation_sends_the_schema_as_response_format(
    gw: RunningGateway, referee: Referee
) -> None:
    referee.script(200, completion({"content": '{"name": "Bern", "population": 140000}'}))
    async with oa(gw) as c:
        done = await c.responses.parse(model="local", input="the capital of Switzerland",
                                       text_format=City)
    assert done.output_parsed == City(name="Bern", population=140000)
    rf = referee.requests[-1].json()["response_format"]
    assert rf["type"] == "json_schema" and rf["json_schema"]["name"] == "City"
    assert json.dumps(rf["json_schema"]["schema"])  # the schema itself, not dropped


# --- anthropic ----------------------------------------------------------------------------

WEATHER: anthropic.types.ToolParam = {
    "name": "get_weather", "description": "The weather in a city.",
    "input_schema": {"type": "object", "properties": {"query": {"type": "string"}}}}


async def test_messages_stream_manager_gives_text_and_the_final_message(
    gw: RunningGateway, claude: FakeAnthropic
) -> None:
    async with an(gw) as a, a.messages.stream(
        model="claude", max_tokens=200, system="be brief", stop_sequences=["END"],
        metadata={"user_id": "u-7"}, messages=[{"role": "user", "content": "hello stream"}],
    ) as stream:
        pieces = [piece async for piece in stream.text_stream]
        final = await stream.get_final_message()
    # The SDK's request id is the gateway's (Anthropic's header name, on a stream too).
    assert stream.request_id and stream.request_id == stream.response.headers["x-request-id"]
    assert "".join(pieces) == "you said: hello stream"
    assert final.content[0].type == "text" and final.content[0].text == "you said: hello stream"
    assert final.stop_reason == "end_turn" and final.usage.output_tokens > 0
    sent = claude.requests[-1].body
    assert sent["system"] == "be brief" and sent["stop_sequences"] == ["END"]
    assert sent["metadata"] == {"user_id": "u-7"} and sent["stream"] is True


async def test_messages_tool_loop_over_two_turns(
    gw: RunningGateway, claude: FakeAnthropic
) -> None:
    messages: list[Any] = [{"role": "user", "content": "check the TOOL please"}]
    async with an(gw) as a:
        first = await a.messages.create(model="claude", max_tokens=200, tools=[WEATHER],
                                        messages=messages)
        assert first.stop_reason == "tool_use"
        use = next(b for b in first.content if b.type == "tool_use")
        messages += [{"role": "assistant", "content": [b.model_dump() for b in first.content]},
                     {"role": "user", "content": [{"type": "tool_result",
                                                   "tool_use_id": use.id,
                                                   "content": "sunny, 21C"}]}]
        second = await a.messages.create(model="claude", max_tokens=200, tools=[WEATHER],
                                         messages=messages)
    assert second.stop_reason == "end_turn"
    assert second.content[0].type == "text"
    assert second.content[0].text == "tool results: sunny, 21C"
    sent = claude.requests[-1].body
    assert sent["messages"][1]["content"][0]["id"] == use.id
    assert sent["messages"][2]["content"][0] == messages[2]["content"][0]
    assert sent["tools"] == [WEATHER]


async def test_messages_stream_manager_on_a_chat_model_gives_the_tool_use(
    gw: RunningGateway, referee: Referee
) -> None:
    async with an(gw) as a, a.messages.stream(
        model="chat", max_tokens=200, tools=[WEATHER],
        messages=[{"role": "user", "content": "call the TOOL"}],
    ) as stream:
        kinds = {event.type async for event in stream}
        final = await stream.get_final_message()
    assert "content_block_start" in kinds and "message_stop" in kinds
    use = final.content[0]
    assert use.type == "tool_use" and use.name == "get_weather" and use.input == {}
    assert final.stop_reason == "tool_use"
    sent = referee.requests[-1].json()
    assert sent["tools"][0]["function"]["name"] == "get_weather"
    assert sent["tools"][0]["function"]["parameters"] == WEATHER["input_schema"]


async def test_count_tokens_answers_from_the_upstream(
    gw: RunningGateway, claude: FakeAnthropic
) -> None:
    async with an(gw) as a:
        counted = await a.messages.count_tokens(
            model="claude", system="be brief", tools=[WEATHER],
            messages=[{"role": "user", "content": "how many tokens is this"}])
    assert counted.input_tokens > 0
    sent = claude.requests[-1]
    assert sent.path == "/v1/messages/count_tokens"
    assert sent.body["tools"] == [WEATHER] and sent.body["system"] == "be brief"


async def test_beta_messages_forward_the_betas_and_raw_headers_carry_the_gateways(
    gw: RunningGateway, claude: FakeAnthropic
) -> None:
    async with an(gw) as a:
        raw = await a.beta.messages.with_raw_response.create(
            model="claude", max_tokens=100, betas=["context-management-2025-06-27"],
            messages=[{"role": "user", "content": "beta hello"}])
    message = await raw.parse()
    assert message.content[0].type == "text"
    assert message.content[0].text == "you said: beta hello"
    assert message._request_id and message._request_id == raw.headers["x-request-id"]
    sent = claude.requests[-1].headers
    assert "context-management-2025-06-27" in sent["anthropic-beta"]
    assert sent["x-api-key"] == UPSTREAM_KEY  # the client's own key stays at the gateway


async def test_a_request_the_gateway_refuses_raises_bad_request_with_its_message(
    gw: RunningGateway, claude: FakeAnthropic
) -> None:
    robot: Any = [{"role": "robot", "content": "hi"}]
    async with an(gw) as a:
        with pytest.raises(anthropic.BadRequestError) as refused:
            await a.messages.create(model="claude", max_tokens=100, messages=robot)
    assert refused.value.status_code == 400
    assert "messages.0.role" in refused.value.message
    assert refused.value.request_id == refused.value.response.headers["x-request-id"]
    body = refused.value.body
    assert isinstance(body, dict) and body["type"] == "error"
    assert body["error"]["type"] == "invalid_request_error"
    assert claude.requests == []  # refused before any upstream call


async def test_an_upstream_failure_raises_the_sdk_class_without_sdk_retries(
    gw: RunningGateway, claude: FakeAnthropic
) -> None:
    broke = {"type": "error", "error": {"type": "api_error", "message": "claude broke"}}
    claude.script(*[Canned(500, broke, {"retry-after-ms": "1"})] * 20)
    async with an(gw) as a:
        with pytest.raises(anthropic.InternalServerError) as failed:
            await a.with_options(max_retries=2).messages.create(
                model="claude", max_tokens=50, messages=[{"role": "user", "content": "hi"}])
    assert "claude broke" in failed.value.message and failed.value.request_id
    headers = failed.value.response.headers
    assert len(claude.requests) == int(headers["x-gateway-attempts"]) > 1


async def test_an_error_in_the_middle_of_a_stream_raises_from_the_stream_manager(
    gw: RunningGateway, claude: FakeAnthropic
) -> None:
    claude.script(MidStreamError("Overloaded"))
    async with an(gw) as a:
        with pytest.raises(anthropic.APIStatusError) as failed:
            async with a.messages.stream(
                model="claude", max_tokens=50,
                messages=[{"role": "user", "content": "a long enough answer please"}],
            ) as stream:
                async for _ in stream.text_stream:
                    pass
    assert isinstance(failed.value.body, dict)
    assert failed.value.body["error"] == {"type": "overloaded_error", "message": "Overloaded"}


async def test_anthropic_models_list_and_retrieve(gw: RunningGateway) -> None:
    async with an(gw) as a:
        page = await a.models.list()
        one = await a.models.retrieve("claude")
        with pytest.raises(anthropic.NotFoundError):
            await a.models.retrieve("no-such-model")
    assert {"chat", "claude", "gpt", "local"} <= {m.id for m in page.data}
    assert all(m.type == "model" and m.display_name == m.id for m in page.data)
    assert page.has_more is False and page.last_id == page.data[-1].id
    assert one.id == "claude" and one.created_at is not None


async def test_an_unknown_model_raises_not_found(
    gw: RunningGateway, claude: FakeAnthropic
) -> None:
    async with an(gw) as a:
        with pytest.raises(anthropic.NotFoundError) as missing:
            await a.messages.create(model="no-such-model", max_tokens=100,
                                    messages=[{"role": "user", "content": "hi"}])
    assert "no-such-model" in missing.value.message
    assert missing.value.request_id and missing.value.request_id.startswith("req_")
    assert isinstance(missing.value.body, dict)
    assert missing.value.body["error"]["type"] == "not_found_error"


# --- openai-agents ------------------------------------------------------------------------

looked_up: list[str] = []


@function_tool
def lookup(query: str = "") -> str:
    """Look the user's question up."""
    looked_up.append(query)
    return "the answer is 42"


@pytest.fixture
def agents_offline() -> None:
    set_tracing_disabled(True)  # the SDK would export traces to OpenAI otherwise
    looked_up.clear()


def helper(model: OpenAIResponsesModel | OpenAIChatCompletionsModel) -> Agent[Any]:
    return Agent(name="helper", instructions="Use tools when asked.", tools=[lookup],
                 model=model)


@pytest.mark.usefixtures("agents_offline")
async def test_agent_on_the_chat_completions_model_runs_its_tool_loop(
    gw: RunningGateway, referee: Referee
) -> None:
    async with oa(gw) as c:
        result = await Runner.run(
            helper(OpenAIChatCompletionsModel(model="chat", openai_client=c)),
            "look it up with the TOOL")
    assert len(looked_up) == 1
    assert str(result.final_output).startswith("referee: accepted")
    sent = referee.requests[-1].json()["messages"]
    assert sent[0] == {"role": "system", "content": "Use tools when asked."}
    assert [m["role"] for m in sent[1:]] == ["user", "assistant", "tool"]
    assert sent[-1]["content"] == "the answer is 42"
    assert sent[-1]["tool_call_id"] == sent[-2]["tool_calls"][0]["id"]


@pytest.mark.usefixtures("agents_offline")
async def test_agent_streamed_on_the_responses_model_runs_its_tool_loop(
    gw: RunningGateway, gpt: FakeResponses
) -> None:
    async with oa(gw) as c:
        run = Runner.run_streamed(helper(OpenAIResponsesModel(model="gpt", openai_client=c)),
                                  "look it up with the TOOL")
        kinds = [event.type async for event in run.stream_events()]
    assert looked_up == ["look it up with the TOOL"]
    assert run.final_output == "tool results: the answer is 42"
    assert "raw_response_event" in kinds and "run_item_stream_event" in kinds
    assert all(r.body["stream"] is True for r in gpt.requests)
    kinds_sent = [i.get("type", "message") for i in gpt.requests[-1].body["input"]]
    assert kinds_sent.count("function_call") == 1
    assert kinds_sent.count("function_call_output") == 1


@pytest.mark.usefixtures("agents_offline")
async def test_agent_streamed_on_the_chat_completions_model_runs_its_tool_loop(
    gw: RunningGateway, referee: Referee
) -> None:
    async with oa(gw) as c:
        run = Runner.run_streamed(
            helper(OpenAIChatCompletionsModel(model="chat", openai_client=c)),
            "look it up with the TOOL")
        texts = [event.data.delta async for event in run.stream_events()
                 if event.type == "raw_response_event"
                 and event.data.type == "response.output_text.delta"]
    assert len(looked_up) == 1
    assert "".join(texts) == run.final_output
    assert str(run.final_output).startswith("referee: accepted")
    assert all(r.json()["stream"] is True for r in referee.requests)


@pytest.mark.usefixtures("agents_offline")
async def test_agent_on_the_responses_model_translated_to_a_chat_server(
    gw: RunningGateway, referee: Referee
) -> None:
    async with oa(gw) as c:
        result = await Runner.run(
            helper(OpenAIResponsesModel(model="local", openai_client=c)),
            "look it up with the TOOL")
    assert len(looked_up) == 1
    assert str(result.final_output).startswith("referee: accepted")
    sent = referee.requests[-1].json()["messages"]
    assert sent[-1] == {"role": "tool", "tool_call_id": sent[-2]["tool_calls"][0]["id"],
                        "content": "the answer is 42"}


@pytest.mark.usefixtures("agents_offline")
@pytest.mark.parametrize("path", ["chat-completions", "responses-translated"])
async def test_agent_with_an_output_type_gets_its_pydantic_object(
    gw: RunningGateway, referee: Referee, path: str
) -> None:
    referee.script(200, completion({"content": '{"name": "Bern", "population": 140000}'}))
    async with oa(gw) as c:
        model = (OpenAIChatCompletionsModel(model="chat", openai_client=c)
                 if path == "chat-completions"
                 else OpenAIResponsesModel(model="local", openai_client=c))
        capital = Agent(name="capital", instructions="Answer with the city.", output_type=City,
                        model=model, model_settings=ModelSettings(
                            temperature=0.3, max_tokens=300, extra_body={"user": "u-9"}))
        result = await Runner.run(capital, "the capital of Switzerland")
    assert result.final_output == City(name="Bern", population=140000)
    sent = referee.requests[-1].json()
    assert (sent["temperature"], sent["max_tokens"], sent["user"]) == (0.3, 300, "u-9")
    schema = sent["response_format"]["json_schema"]
    assert schema["strict"] is True and set(schema["schema"]["required"]) == {"name",
                                                                             "population"}
