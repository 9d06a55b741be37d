"""Held-out broken histories sent through litellm's provider translations: Gemini
(``gemini/...``) and Amazon Bedrock Converse (``bedrock/...``).

Each history is one OpenAI accepts but the translated provider refuses (its own words, from
the fakes in tests/fakes). Through the real ``openai`` SDK the agent still gets an answer:
either the default projection already repairs it, or the first attempt is refused as
structural and the strict rung resends a valid history; ``x-gateway-repairs`` names what
changed. A valid history reaches the provider untouched, in one attempt.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import openai
import pytest

from gateway.projection.asks import StrictAsks
from gateway.projection.project import project_strict
from gateway.providers.failure import UpstreamFailure
from gateway.recovery.classifier import call_parts_counted, classify
from tests.conftest import GatewayFactory, RunningGateway
from tests.factories import assistant, calls, system, tool, tool_call, user
from tests.fakes import bedrock_server as converse
from tests.fakes import gemini_server as generate
from tests.fakes.bedrock_server import FakeBedrock
from tests.fakes.gemini_server import FakeGemini
from tests.fakes.gemini_server import field as gemini_field
from tests.providers.e2e_litellm import (
    FAST_RECOVERY,
    GEMINI_MODEL,
    IGNORE_SCHEMA_WARNINGS,
    TOOLS,
    UPSTREAM_KEY,
    sdk,
    start_native_gateway,
)

pytestmark = IGNORE_SCHEMA_WARNINGS

BEDROCK_MODEL = "bedrock/us.anthropic.claude-sonnet-4-5-20250929-v1:0"
History = list[dict[str, Any]]


@pytest.fixture
async def gemini(gateway_factory: GatewayFactory) -> AsyncIterator[tuple[RunningGateway,
                                                                          FakeGemini]]:
    async with FakeGemini(api_key=UPSTREAM_KEY) as fake:
        gw = await start_native_gateway(gateway_factory, fake.base_url, GEMINI_MODEL,
                                        name="gem")
        yield gw, fake


@pytest.fixture
async def bedrock(gateway_factory: GatewayFactory) -> AsyncIterator[tuple[RunningGateway,
                                                                           FakeBedrock]]:
    async with FakeBedrock() as fake:
        entry = {"model_name": "rock", "litellm_params": {
            "model": BEDROCK_MODEL, "api_base": fake.base_url,
            "aws_access_key_id": "AKIATRANSLATED000001",
            "aws_secret_access_key": "translated-secret-4f1a", "aws_region_name": "us-west-2"}}
        gw = await gateway_factory({"model_list": [entry], "recovery": FAST_RECOVERY})
        yield gw, fake


async def ask(gw: RunningGateway, model: str, history: History) -> tuple[str, dict[str, str]]:
    """The answer's text and the response headers, through the real SDK."""
    async with sdk(gw) as client:
        raw = await client.chat.completions.with_raw_response.create(
            model=model, messages=history, tools=TOOLS)  # type: ignore[arg-type]
    return raw.parse().choices[0].message.content or "", dict(raw.headers)


TWO_CITIES = assistant(None, [tool_call("call_a", "weather", {"city": "Paris"}),
                              tool_call("call_b", "weather", {"city": "Oslo"})])

GEMINI_BROKEN = [
    pytest.param([user("read it"), calls("call_a"), tool("call_a", "one"),
                  tool("call_a", "one again"), user("go on")],
                 "duplicate_tool_result_dropped", id="duplicate-function-response"),
    pytest.param([user("read both"), TWO_CITIES, tool("call_a", "sunny"), user("go on")],
                 "tool_result_synthesized", id="parallel-call-half-answered"),
    # litellm's Gemini translation keeps one of two identical calls (same name and
    # arguments) and sends both results: "the number of function response parts..."
    pytest.param([user("read it twice"), calls("call_a", "call_b"), tool("call_a", "a"),
                  tool("call_b", "a"), user("go on")],
                 "identical_tool_calls_merged", id="identical-parallel-calls"),
    pytest.param([user("hi"), tool("call_ghost", "stale"), user("go on")],
                 "orphan_tool_result_dropped", id="function-response-without-call"),
    pytest.param([user("hi"), assistant("thinking..."), calls("call_a"), tool("call_a", "x"),
                  user("go on")],
                 None, id="call-turn-after-model-text"),
    pytest.param([user("hi"), assistant(""), user("go on")],
                 "empty_content_dropped", id="empty-model-turn"),
    pytest.param([user("hi"), assistant("hello"), system("Answer in French."), user("go on")],
                 None, id="system-in-the-middle"),
    pytest.param([calls("call_a"), tool("call_a", "ok"), assistant("done"), user("go on")],
                 "leading_non_user_dropped", id="history-opens-with-a-call"),
]

BEDROCK_BROKEN = [
    pytest.param([assistant("Welcome back!"), user("go on")],
                 "leading_non_user_dropped", id="starts-with-assistant"),
    pytest.param([user("read it"), calls("call_a"), tool("call_a", "one"),
                  tool("call_a", "one again"), user("go on")],
                 "duplicate_tool_result_dropped", id="duplicate-tool-result"),
    pytest.param([user("read both"), calls("call_a", "call_b"), tool("call_a", "a"),
                  user("go on")],
                 "tool_result_synthesized", id="parallel-call-half-answered"),
    pytest.param([user("read it"), calls("call_a"), tool("call_zzz", "wrong id"),
                  user("go on")],
                 "orphan_tool_result_dropped", id="tool-result-id-mismatch"),
    pytest.param([user("hi"), assistant("   "), user("go on")],
                 "empty_content_dropped", id="blank-assistant-text"),
    pytest.param([user("hi"), assistant("a"), assistant("b"), user("go on")],
                 None, id="consecutive-assistants"),
    pytest.param([user([{"type": "text", "text": " \n"}, {"type": "text", "text": "go on"}])],
                 "empty_content_dropped", id="blank-user-text-part"),
]


@pytest.mark.parametrize(("history", "repair"), GEMINI_BROKEN)
async def test_gemini_broken_history_gets_an_answer(
        gemini: tuple[RunningGateway, FakeGemini], history: History, repair: str | None) -> None:
    gw, fake = gemini
    text, headers = await ask(gw, "gem", history)
    assert "go on" in text
    if repair is not None:
        assert repair in headers.get("x-gateway-repairs", "")
    assert int(headers["x-gateway-attempts"]) <= 2
    assert gemini_field(fake.requests[-1].body, "contents")[-1]["role"] == "user"


@pytest.mark.parametrize(("history", "repair"), BEDROCK_BROKEN)
async def test_bedrock_broken_history_gets_an_answer(
        bedrock: tuple[RunningGateway, FakeBedrock], history: History, repair: str | None) -> None:
    gw, fake = bedrock
    text, headers = await ask(gw, "rock", history)
    assert text.endswith("go on")
    assert fake.requests[-1].body["messages"][0]["role"] == "user"
    if repair is not None:
        assert repair in headers.get("x-gateway-repairs", "")
    assert int(headers["x-gateway-attempts"]) <= 2


async def test_valid_tool_history_passes_untouched_to_both(
        gemini: tuple[RunningGateway, FakeGemini],
        bedrock: tuple[RunningGateway, FakeBedrock]) -> None:
    history = [system("Be brief."), user("read it"), calls("call_a"), tool("call_a", "42"),
               assistant("It is 42."), user("go on")]
    for (gw, fake), model in ((gemini, "gem"), (bedrock, "rock")):
        text, headers = await ask(gw, model, history)
        assert "go on" in text
        assert headers["x-gateway-attempts"] == "1" and "x-gateway-repairs" not in headers
        assert len(fake.requests) == 1


async def test_identical_calls_reach_gemini_as_one_call_with_both_results_joined(
        gemini: tuple[RunningGateway, FakeGemini]) -> None:
    gw, fake = gemini
    history = [user("read it twice"), calls("call_a", "call_b"), tool("call_a", "first"),
               tool("call_b", "second"), user("go on")]
    text, headers = await ask(gw, "gem", history)
    assert text.endswith("you said: go on")
    assert headers["x-gateway-recovery"] == "strict"
    contents = gemini_field(fake.requests[-1].body, "contents")
    parts = [next(iter(p)) for c in contents for p in c["parts"]]
    assert sum(k in ("functionCall", "function_call") for k in parts) == 1
    assert sum(k in ("functionResponse", "function_response") for k in parts) == 1
    assert b"first" in fake.requests[-1].raw and b"second" in fake.requests[-1].raw


def test_strict_merge_keeps_distinct_calls_and_joins_only_different_results() -> None:
    cities = assistant(None, [tool_call("call_c", "weather", {"city": "Paris"}),
                              tool_call("call_d", "weather", {"city": "Oslo"})])
    history = [user("go"), calls("call_a", "call_b"), tool("call_a", "same"),
               tool("call_b", "same"), user("next"), cities, tool("call_c", "sunny"),
               tool("call_d", "snow")]
    merged = project_strict(history, asks=StrictAsks(merge_identical=True))
    assert merged.messages[1]["tool_calls"] == [history[1]["tool_calls"][0]]
    assert merged.messages[2] == {"role": "tool", "tool_call_id": "call_a", "content": "same"}
    assert merged.messages[3:] == history[4:]
    assert [a.kind for a in merged.anomalies] == ["identical_tool_calls_merged"]
    assert project_strict(history).messages == history  # only when the refusal counted calls


@pytest.mark.parametrize("words", [
    converse.START_WITH_USER, converse.ALTERNATE, converse.BLANK_TEXT.format(i=2, j=0),
    converse.TOO_MANY_RESULTS.format(i=2),
    converse.MISSING_RESULTS.format(i=2, ids="tooluse_bRX9ftpYK3xO5tev2x4qtc"),
    generate.CALL_AFTER_USER, generate.RESPONSE_AFTER_CALL, generate.PART_COUNT,
])
def test_every_provider_refusal_of_a_history_is_structural(words: str) -> None:
    failure = UpstreamFailure(status=400, provider="translated", message=words)
    assert classify(failure) == "structural"
    # Only Gemini's count of call parts merges identical calls on the strict rung.
    assert call_parts_counted(words) is (words == generate.PART_COUNT)


async def test_a_client_cannot_choose_where_the_operators_signed_request_goes(
        bedrock: tuple[RunningGateway, FakeBedrock]) -> None:
    """Provider settings litellm takes beside the request (an endpoint, a region, a
    project, credentials) are the config's: a client that sends them in the body neither
    redirects the signed request (a readable SSRF with the operator's key) nor signs in as
    it says. Sampling fields the config sets as defaults stay the client's to choose."""
    gw, fake = bedrock
    async with FakeBedrock() as elsewhere:
        async with sdk(gw) as client:
            answer = await client.chat.completions.create(
                model="rock", messages=[user("hi")], temperature=0.5, extra_body={
                    "aws_bedrock_runtime_endpoint": elsewhere.base_url,
                    "aws_region_name": "eu-west-1", "aws_access_key_id": "AKIACLIENT0000001",
                    "aws_session_token": "client-token", "vertex_project": "client-project",
                    "azure_ad_token": "client-ad-token", "api_base": elsewhere.base_url})
        assert answer.choices[0].message.content
        assert not elsewhere.requests
    sent = fake.requests[-1]
    signed = sent.headers["authorization"]
    assert "Credential=AKIATRANSLATED000001/" in signed and "/us-west-2/bedrock/" in signed
    assert "x-amz-security-token" not in sent.headers
    assert sent.body["inferenceConfig"]["temperature"] == 0.5


async def test_a_bedrock_answer_that_is_no_converse_answer_is_a_502(
        gateway_factory: GatewayFactory) -> None:
    """A 200 the Converse reader cannot use (no ``output``): the request was sent, so the
    client hears the upstream's answer was unusable (a 502 naming the model), not that the
    request was never sent."""
    async with FakeBedrock(mode="garbled") as fake:
        gw = await gateway_factory({"model_list": [{"model_name": "rock", "litellm_params": {
            "model": BEDROCK_MODEL, "api_base": fake.base_url,
            "aws_access_key_id": "AKIATRANSLATED000001",
            "aws_secret_access_key": "translated-secret-4f1a",
            "aws_region_name": "us-west-2"}}], "recovery": {**FAST_RECOVERY,
                                                             "max_transient_retries": 0}})
        async with sdk(gw) as client:
            with pytest.raises(openai.APIStatusError) as failed:
                await client.chat.completions.create(model="rock", messages=[user("hi")])
        assert fake.requests
    assert failed.value.status_code == 502
    assert "the upstream of model 'rock' sent an answer the gateway cannot use" in \
        failed.value.message
