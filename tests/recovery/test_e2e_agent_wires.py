"""Real provider refusals (tests/data/provider-errors.jsonl) end to end on the agent wires.

Each case is one recorded refusal answered once, with its status and content type, by the
upstream behind one of four routes: Anthropic Messages (``/v1/messages``) to the native
Anthropic fake and to a chat-only model (the translated path), and Responses
(``/v1/responses``) to the native Responses fake and to a chat-only model. The real
``anthropic`` / ``openai`` SDK sees the rung taken (``x-gateway-recovery``) and the 200 after
it, or, on give-up, a clean error in its own wire's shape: never a 500, never the upstream key.
"""

from __future__ import annotations

import base64
import io
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import anthropic
import openai
import pytest
from PIL import Image

from gateway.recovery.classifier import Verdict
from gateway.referee import Referee
from tests.conftest import GatewayFactory, RunningGateway, model_entry
from tests.fakes.anthropic_server import FakeAnthropic
from tests.fakes.native_base import Canned
from tests.fakes.responses_server import FakeResponses
from tests.fakes.three_wires import anthropic_whole, responses_whole
from tests.recovery.e2e_support import FAST_RECOVERY
from tests.recovery.test_classifier import RECORDS, _expected, status_of

UPSTREAM_KEY = "upstream-secret-key"
S, M, OV, R, T, F = (Verdict.STRUCTURAL, Verdict.MEDIA, Verdict.OVERFLOW,
                     Verdict.REQUEST_TOO_LARGE, Verdict.TRANSIENT, Verdict.FATAL)

# Lines of the file, across every rung and the providers that send them.
LINES = [
    1, 2, 5, 11, 18, 26, 28, 37, 44, 50, 54, 140,  # structural -> strict
    58, 59, 62, 66, 71, 77,  # media -> degraded
    80, 81, 82, 87, 89, 97, 103,  # overflow / too large -> compaction
    104, 105, 110, 112, 113, 118, 124,  # transient -> retry
    107, 111, 127, 133, 135,  # fatal -> give up
]
ROUTES = ["messages-native", "messages-chat", "responses-native", "responses-chat"]


@dataclass(frozen=True)
class Case:
    """One recorded refusal: its line, rung, status, content type and body."""

    line: int
    provider: str
    verdict: Verdict
    status: int
    content_type: str
    body: str


def content_type_of(body: str) -> str:
    """The content type a provider sends such a body with."""
    text = body.lstrip()
    if text.startswith("<"):
        return "text/html"
    try:
        json.loads(body)
    except ValueError:
        return "text/plain"
    return "application/json"


def _case(line: int) -> Case:
    number, record = RECORDS[line - 1]
    assert number == line
    verdicts = _expected(number, record)
    verdict = M if M in verdicts else (OV if OV in verdicts else next(iter(verdicts)))
    return Case(line, record["provider"], verdict, status_of(record["status"]),
                content_type_of(record["body"]), record["body"])


CASES = [_case(n) for n in LINES]


def wide_png() -> str:
    """A 1200x300 PNG as base64 (larger than the gateway's 256 px media bound)."""
    buf = io.BytesIO()
    Image.linear_gradient("L").resize((1200, 300)).convert("RGB").save(buf, "PNG")
    return base64.b64encode(buf.getvalue()).decode()


CODE = "\n".join(f"def handler_{n}(x):  # line {n}\n    return x * {n}" for n in range(40))


def messages_for(verdict: Verdict) -> list[dict[str, Any]]:
    """An Anthropic Messages history fit for the rung: an image, a long agent loop, or hi."""
    if verdict is M:
        return [{"role": "user", "content": [
            {"type": "text", "text": "what is this?"},
            {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                         "data": wide_png()}}]}]
    if verdict in (OV, R):
        history: list[dict[str, Any]] = []
        for i in range(8):
            history += [
                {"role": "user", "content": f"Step {i}: read module_{i}.py"},
                {"role": "assistant", "content": [{"type": "tool_use", "id": f"toolu_{i:04d}",
                                                   "name": "read_file",
                                                   "input": {"path": f"module_{i}.py"}}]},
                {"role": "user", "content": [{"type": "tool_result",
                                              "tool_use_id": f"toolu_{i:04d}",
                                              "content": CODE}]},
                {"role": "assistant", "content": f"Read module_{i}.py."},
            ]
        return [*history, {"role": "user", "content": "What does handler_3 do?"}]
    if verdict is S:  # two assistant turns in a row: the strict rung merges them
        return [{"role": "user", "content": "q"}, {"role": "assistant", "content": "first"},
                {"role": "assistant", "content": "second"}, {"role": "user", "content": "next"}]
    return [{"role": "user", "content": "hi"}]


def input_for(verdict: Verdict) -> list[dict[str, Any]]:
    """A Responses input fit for the rung."""
    if verdict is M:
        return [{"role": "user", "content": [
            {"type": "input_text", "text": "what is this?"},
            {"type": "input_image", "image_url": "data:image/png;base64," + wide_png()}]}]
    if verdict in (OV, R):
        items: list[dict[str, Any]] = []
        for i in range(8):
            items += [
                {"role": "user", "content": f"Step {i}: read module_{i}.py"},
                {"type": "function_call", "call_id": f"call_{i}", "name": "read_file",
                 "arguments": json.dumps({"path": f"module_{i}.py"})},
                {"type": "function_call_output", "call_id": f"call_{i}", "output": CODE},
                {"role": "assistant", "content": f"Read module_{i}.py."},
            ]
        return [*items, {"role": "user", "content": "What does handler_3 do?"}]
    if verdict is S:
        return [{"role": "user", "content": "q"}, {"role": "assistant", "content": "first"},
                {"role": "assistant", "content": "second"}, {"role": "user", "content": "next"}]
    return [{"role": "user", "content": "hi"}]


TOOLS_ANTHROPIC = [{"name": "read_file", "description": "Read a file.",
                    "input_schema": {"type": "object",
                                     "properties": {"path": {"type": "string"}}}}]
TOOLS_RESPONSES = [{"type": "function", "name": "read_file", "description": "Read a file.",
                    "parameters": {"type": "object",
                                   "properties": {"path": {"type": "string"}}}}]


@dataclass
class Upstreams:
    """The three upstreams behind one gateway."""

    gw: RunningGateway
    claude: FakeAnthropic
    responses: FakeResponses
    referee: Referee


@pytest.fixture
async def ups(gateway_factory: GatewayFactory) -> AsyncIterator[Upstreams]:
    async with FakeAnthropic() as claude, FakeResponses() as responses, \
            Referee(rules="openai", style="openai") as referee:
        gw = await gateway_factory({
            "model_list": [
                model_entry("claude", claude.base_url, model="anthropic/claude-sonnet-4-5"),
                model_entry("resp", f"{responses.base_url}/v1", model="openai/gpt-5",
                            responses_api=True, mode="responses"),  # no chat endpoint
                model_entry("demo", referee.base_url, model="openai/referee",
                            responses_api=False),  # chat only: the translated path
            ],
            "recovery": FAST_RECOVERY,
            "media": {"max_side": 256, "allowed_formats": ["png", "jpeg"]},
        })
        yield Upstreams(gw, claude, responses, referee)


def script(ups: Upstreams, route: str, case: Case) -> None:
    """The upstream behind ``route`` answers the case's body once, then serves normally."""
    headers = {"content-type": case.content_type}
    if route.endswith("chat"):
        ups.referee.script(case.status, case.body, headers, times=1)
        return
    refusal = Canned(case.status, case.body.encode(), headers)
    # The native fakes echo the last user text, so a summary would be as long as the
    # transcript it summarizes: after an overflow the next answer (the summary call's) is
    # a short one, as a model's summary is.
    short = [] if case.verdict not in (OV, R) else [
        Canned(200, anthropic_whole("claude-sonnet-4-5") if route.startswith("messages")
               else responses_whole("gpt-5"))]
    if route.startswith("messages"):
        ups.claude.script(refusal, *short)
    else:
        ups.responses.script(refusal, *short)


def upstream_requests(ups: Upstreams, route: str) -> int:
    if route.endswith("chat"):
        return len(ups.referee.requests)
    if route.startswith("messages"):
        return len(ups.claude.requests)
    return len([r for r in ups.responses.requests if r.path == "/v1/responses"])


def assert_rung(case: Case, header: str | None) -> None:
    assert header, f"line {case.line}: no recovery header"
    steps = header.split(",")
    if case.verdict is S:
        assert steps[0] in {"strict", "drop_param"}, header
    elif case.verdict is M:
        assert steps[0].startswith("media="), header
    elif case.verdict in (OV, R):
        assert "compact" in steps, header
    else:
        assert steps == ["retry"], header


def assert_clean(status: int, text: str, headers: Any) -> None:
    assert status != 500
    assert UPSTREAM_KEY not in text
    assert all(UPSTREAM_KEY not in str(v) for v in headers.values())


async def call_messages(ups: Upstreams, route: str, case: Case) -> None:
    model = "claude" if route == "messages-native" else "demo"
    async with anthropic.AsyncAnthropic(base_url=ups.gw.root, api_key="client-key",
                                        max_retries=0, timeout=30.0) as c:
        if case.verdict is F:
            with pytest.raises(anthropic.APIStatusError) as info:
                await c.messages.create(model=model, max_tokens=64,
                                        messages=messages_for(case.verdict))  # type: ignore[arg-type]
            response = info.value.response
            assert 400 <= response.status_code < 600
            assert_clean(response.status_code, response.text, response.headers)
            got = response.json()
            assert got["type"] == "error", got
            assert isinstance(got["error"]["type"], str)
            assert isinstance(got["error"]["message"], str) and got["error"]["message"]
            assert upstream_requests(ups, route) == 1
            return
        raw = await c.messages.with_raw_response.create(
            model=model, max_tokens=64, messages=messages_for(case.verdict),  # type: ignore[arg-type]
            tools=TOOLS_ANTHROPIC)  # type: ignore[arg-type]
    assert raw.status_code == 200
    assert_clean(raw.status_code, raw.http_response.text, raw.headers)
    message = await raw.parse()
    assert message.type == "message" and message.content
    assert_rung(case, raw.headers.get("x-gateway-recovery"))
    assert upstream_requests(ups, route) >= 2


async def call_responses(ups: Upstreams, route: str, case: Case) -> None:
    model = "resp" if route == "responses-native" else "demo"
    async with openai.AsyncOpenAI(base_url=ups.gw.base_url, api_key="client-key",
                                  max_retries=0, timeout=30.0) as c:
        if case.verdict is F:
            with pytest.raises(openai.APIStatusError) as info:
                await c.responses.create(model=model, input=input_for(case.verdict))  # type: ignore[arg-type]
            response = info.value.response
            assert 400 <= response.status_code < 600
            assert_clean(response.status_code, response.text, response.headers)
            got = response.json()
            assert isinstance(got["error"], dict), got
            assert isinstance(got["error"]["message"], str) and got["error"]["message"]
            assert upstream_requests(ups, route) == 1
            return
        raw = await c.responses.with_raw_response.create(
            model=model, input=input_for(case.verdict),  # type: ignore[arg-type]
            tools=TOOLS_RESPONSES)  # type: ignore[arg-type]
    assert raw.status_code == 200
    assert_clean(raw.status_code, raw.http_response.text, raw.headers)
    answer = raw.parse()
    assert answer.status == "completed" and answer.output
    assert_rung(case, raw.headers.get("x-gateway-recovery"))
    assert upstream_requests(ups, route) >= 2


@pytest.mark.parametrize("route", ROUTES)
@pytest.mark.parametrize("case", CASES, ids=[f"L{c.line}-{c.provider}-{c.verdict.name.lower()}"
                                              for c in CASES])
async def test_a_recorded_refusal_on_an_agent_wire(ups: Upstreams, route: str,
                                                   case: Case) -> None:
    script(ups, route, case)
    if route.startswith("messages"):
        await call_messages(ups, route, case)
    else:
        await call_responses(ups, route, case)


# --- streams: the same refusals, asked for with stream=True ------------------------------

STREAMED = [c for c in CASES if c.line in (2, 26, 58, 87, 89, 105, 124, 111, 133)]


async def stream_messages(ups: Upstreams, route: str, case: Case) -> None:
    model = "claude" if route == "messages-native" else "demo"
    async with anthropic.AsyncAnthropic(base_url=ups.gw.root, api_key="client-key",
                                        max_retries=0, timeout=30.0) as c:
        if case.verdict is F:
            with pytest.raises(anthropic.APIStatusError) as info:
                async with c.messages.stream(model=model, max_tokens=64,
                                             messages=messages_for(case.verdict)) as events:  # type: ignore[arg-type]
                    async for _ in events:
                        pass
            assert info.value.status_code != 500
            body = info.value.body
            assert isinstance(body, dict) and body.get("type") == "error", body
            assert isinstance(body["error"]["message"], str) and body["error"]["message"]
            assert UPSTREAM_KEY not in json.dumps(body)
            return
        async with c.messages.stream(model=model, max_tokens=64,
                                     messages=messages_for(case.verdict),  # type: ignore[arg-type]
                                     tools=TOOLS_ANTHROPIC) as events:  # type: ignore[arg-type]
            header = events.response.headers.get("x-gateway-recovery")
            message = await events.get_final_message()
    assert message.content and message.stop_reason
    assert_rung(case, header)


async def stream_responses(ups: Upstreams, route: str, case: Case) -> None:
    model = "resp" if route == "responses-native" else "demo"
    async with openai.AsyncOpenAI(base_url=ups.gw.base_url, api_key="client-key",
                                  max_retries=0, timeout=30.0) as c:
        if case.verdict is F:
            with pytest.raises(openai.APIStatusError) as info:
                async with c.responses.stream(model=model,
                                              input=input_for(case.verdict)) as events:  # type: ignore[arg-type]
                    async for _ in events:
                        pass
            assert info.value.status_code != 500
            body = info.value.response.json()
            assert isinstance(body["error"]["message"], str) and body["error"]["message"]
            assert UPSTREAM_KEY not in info.value.response.text
            return
        raw = await c.responses.with_raw_response.create(
            model=model, input=input_for(case.verdict), stream=True,  # type: ignore[arg-type]
            tools=TOOLS_RESPONSES)  # type: ignore[arg-type]
        kinds = [event.type async for event in raw.parse()]
    assert kinds[0] == "response.created" and kinds[-1] == "response.completed", kinds
    assert "error" not in kinds
    assert_rung(case, raw.headers.get("x-gateway-recovery"))


@pytest.mark.parametrize("route", ROUTES)
@pytest.mark.parametrize("case", STREAMED, ids=[f"L{c.line}-{c.provider}-{c.verdict.name.lower()}"
                                                for c in STREAMED])
async def test_a_recorded_refusal_on_an_agent_wire_stream(ups: Upstreams, route: str,
                                                          case: Case) -> None:
    script(ups, route, case)
    if route.startswith("messages"):
        await stream_messages(ups, route, case)
    else:
        await stream_responses(ups, route, case)


# --- a 200 stream whose first event is the refusal ---------------------------------------

def _event(name: str, data: dict[str, Any]) -> bytes:
    return f"event: {name}\ndata: {json.dumps(data)}\n\n".encode()


SSE = {"content-type": "text/event-stream"}
# Line 88: gpt-5.2's overflow, sent as the Responses stream's error event.
RESPONSES_OVERFLOW_EVENT = json.loads(RECORDS[87][1]["body"].partition("   (")[0])
ANTHROPIC_OVERLOADED = {"type": "error", "error": {"type": "overloaded_error",
                                                   "message": "Overloaded"}}


async def test_a_responses_stream_opening_with_an_overflow_event_is_compacted(
    ups: Upstreams,
) -> None:
    ups.responses.script(Canned(200, _event("error", RESPONSES_OVERFLOW_EVENT), SSE),
                         Canned(200, responses_whole("gpt-5")))  # the summary
    async with openai.AsyncOpenAI(base_url=ups.gw.base_url, api_key="client-key",
                                  max_retries=0, timeout=30.0) as c:
        raw = await c.responses.with_raw_response.create(
            model="resp", input=input_for(OV), stream=True)  # type: ignore[arg-type]
        kinds = [event.type async for event in raw.parse()]
    assert kinds[-1] == "response.completed" and "error" not in kinds
    assert raw.headers["x-gateway-recovery"] == "compact"


async def test_an_anthropic_stream_opening_with_overloaded_is_retried(ups: Upstreams) -> None:
    ups.claude.script(Canned(200, _event("error", ANTHROPIC_OVERLOADED), SSE))
    c = anthropic.AsyncAnthropic(base_url=ups.gw.root, api_key="client-key", max_retries=0,
                                 timeout=30.0)
    async with c, c.messages.stream(model="claude", max_tokens=64,
                                    messages=messages_for(T)) as events:  # type: ignore[arg-type]
        header = events.response.headers.get("x-gateway-recovery")
        message = await events.get_final_message()
    assert message.content[0].type == "text" and message.content[0].text == "you said: hi"
    assert header == "retry"
    assert len(ups.claude.requests) == 2


# --- nothing leaks: a refusal that echoes the upstream key -------------------------------

ECHO = ('{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key: '
        + UPSTREAM_KEY + '"}}')
OPENAI_ECHO = ('{"error":{"message":"Incorrect API key provided: ' + UPSTREAM_KEY
               + '.","type":"invalid_request_error","param":null,"code":"invalid_api_key"}}')


@pytest.mark.parametrize("route", ROUTES)
@pytest.mark.parametrize("stream", [False, True])
async def test_a_refusal_echoing_the_upstream_key_never_reaches_the_client(
    ups: Upstreams, route: str, stream: bool,
) -> None:
    body = ECHO if route == "messages-native" else OPENAI_ECHO
    script(ups, route, Case(0, "echo", F, 401, "application/json", body))
    if route.startswith("messages"):
        model = "claude" if route == "messages-native" else "demo"
        async with anthropic.AsyncAnthropic(base_url=ups.gw.root, api_key="client-key",
                                            max_retries=0, timeout=30.0) as a:
            with pytest.raises(anthropic.APIStatusError) as info:
                await a.messages.create(model=model, max_tokens=64, stream=stream,  # type: ignore[call-overload]
                                        messages=messages_for(T))
        response = info.value.response
        assert response.json()["type"] == "error"
    else:
        model = "resp" if route == "responses-native" else "demo"
        async with openai.AsyncOpenAI(base_url=ups.gw.base_url, api_key="client-key",
                                      max_retries=0, timeout=30.0) as o:
            with pytest.raises(openai.APIStatusError) as oinfo:
                await o.responses.create(model=model, input="hi", stream=stream)
        response = oinfo.value.response
        assert isinstance(response.json()["error"]["message"], str)
    assert 400 <= response.status_code < 600 and response.status_code != 500
    assert UPSTREAM_KEY not in response.text
    assert all(UPSTREAM_KEY not in str(v) for v in response.headers.values())


# --- a wait longer than the deadline: given up at once, in the wire's shape ---------------

# Lines 114 (Gemini Code Assist, retryDelay 40s), 121 and 131 (Azure, "retry after 60 /
# 86400 seconds"): transient, but the wait is beyond the 20s deadline, so the client gets the
# provider's own status at once instead of a request that hangs.
LONG_WAITS = [_case(n) for n in (114, 121, 131)]


@pytest.mark.parametrize("route", ROUTES)
@pytest.mark.parametrize("case", LONG_WAITS, ids=[f"L{c.line}-{c.provider}" for c in LONG_WAITS])
async def test_a_wait_beyond_the_deadline_is_given_up_in_the_wires_shape(
    ups: Upstreams, route: str, case: Case,
) -> None:
    script(ups, route, case)
    if route.startswith("messages"):
        async with anthropic.AsyncAnthropic(base_url=ups.gw.root, api_key="client-key",
                                            max_retries=0, timeout=30.0) as a:
            with pytest.raises(anthropic.APIStatusError) as info:
                await a.messages.create(model="claude" if route == "messages-native" else "demo",
                                        max_tokens=64, messages=messages_for(T))  # type: ignore[arg-type]
        response = info.value.response
        got = response.json()
        assert got["type"] == "error" and got["error"]["type"] in {"rate_limit_error",
                                                                   "api_error",
                                                                   "overloaded_error"}
    else:
        async with openai.AsyncOpenAI(base_url=ups.gw.base_url, api_key="client-key",
                                      max_retries=0, timeout=30.0) as o:
            with pytest.raises(openai.APIStatusError) as oinfo:
                await o.responses.create(model="resp" if route == "responses-native" else "demo",
                                         input="hi")
        response = oinfo.value.response
        got = response.json()
    assert response.status_code == case.status  # the provider's 429 / 503, not a 500
    assert "exceeds" in got["gateway"]["gave_up"]
    assert upstream_requests(ups, route) == 1
