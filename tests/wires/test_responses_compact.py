"""``POST /v1/responses/compact`` (Codex CLI's remote compaction, the SDK's
``responses.compact``): forwarded to a model served on the Responses API, as LiteLLM's proxy
does; a clear 400 for other models."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import openai
import pytest

from tests.conftest import GatewayFactory, RunningGateway, model_entry
from tests.fakes.native_base import Canned
from tests.fakes.responses_server import FakeResponses

HISTORY: list[Any] = [
    {"role": "user", "content": "fix the failing test"},
    {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "gAAAA-1"},
    {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "shell",
     "arguments": '{"command": ["pytest"]}'},
    {"type": "function_call_output", "call_id": "call_1", "output": "1 failed"},
    {"role": "user", "content": "and now?"},
]


@pytest.fixture
async def fake() -> AsyncIterator[FakeResponses]:
    async with FakeResponses(api_key="upstream-openai-key") as server:
        yield server


@pytest.fixture
async def gw(gateway_factory: GatewayFactory, fake: FakeResponses) -> RunningGateway:
    return await gateway_factory({
        "model_list": [
            {"model_name": "codex", "litellm_params": {
                "model": "openai/gpt-5-codex", "api_base": f"{fake.base_url}/v1",
                "api_key": "upstream-openai-key"}},
            # An OpenAI-compatible server without the Responses API (vLLM, say).
            model_entry("chat-only", "http://127.0.0.1:9/v1", model="openai/referee",
                        responses_api=False)],
        "gateway": {"api_keys": ["client-key"]},
    })


def client(gw: RunningGateway) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=gw.base_url, api_key="client-key", max_retries=0)


async def test_a_conversation_is_compacted_by_the_models_responses_endpoint(
        gw: RunningGateway, fake: FakeResponses) -> None:
    async with client(gw) as c:
        raw = await c.responses.with_raw_response.compact(
            model="codex", input=HISTORY, instructions="You are Codex.")
    compacted = raw.parse()
    assert compacted.object == "response.compaction"
    assert compacted.output[-1].type == "compaction"
    assert compacted.usage.input_tokens == 40 * len(HISTORY)
    assert raw.headers["x-request-id"]
    sent = fake.requests[-1]
    assert sent.path == "/v1/responses/compact"
    assert sent.headers["authorization"] == "Bearer upstream-openai-key"  # never the client's
    assert sent.body == {"model": "gpt-5-codex", "input": HISTORY,
                         "instructions": "You are Codex."}


async def test_a_model_not_served_on_the_responses_api_is_refused_clearly(
        gw: RunningGateway, fake: FakeResponses) -> None:
    async with client(gw) as c:
        with pytest.raises(openai.BadRequestError) as refused:
            await c.responses.compact(model="chat-only", input=HISTORY)
    assert "/responses/compact" in refused.value.message
    assert refused.value.body["param"] == "model"  # type: ignore[index]
    assert fake.requests == []


async def test_the_providers_refusal_reaches_the_client_as_it_said_it(
        gw: RunningGateway, fake: FakeResponses) -> None:
    fake.script(Canned(400, {"error": {
        "message": "Compaction is not supported for this model.",
        "type": "invalid_request_error", "param": "model", "code": "unsupported_model"}}))
    async with client(gw) as c:
        with pytest.raises(openai.BadRequestError) as refused:
            await c.responses.compact(model="codex", input=HISTORY)
    assert refused.value.code == "unsupported_model"
    assert "not supported" in refused.value.message
