"""``/v1/responses`` to an ``openai/`` model whose server has no ``/responses`` endpoint (an
older vLLM, llama.cpp, most hosted OpenAI-compatible APIs): the first request's 404 there
sends it translated to Chat Completions, and the model's later Responses requests go
translated at once. A model declared to speak the API (``model_info.responses_api: true``)
keeps its upstream's 404. Real gateway, the real ``openai`` SDK, a chat-only upstream."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import Any

import openai
import pytest

from tests.conftest import GatewayFactory, RunningGateway, model_entry
from tests.fakes.faulty_upstream import FaultyUpstream, answer, ok_json
from tests.fakes.openai_fleet import FleetUpstream


@pytest.fixture
async def local() -> AsyncIterator[FleetUpstream]:
    async with FleetUpstream("local") as server:
        yield server


def client(gw: RunningGateway) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=gw.base_url, api_key="k", max_retries=0)


async def test_a_chat_only_server_answers_responses_clients_translated(
    gateway_factory: GatewayFactory, local: FleetUpstream, caplog: pytest.LogCaptureFixture,
) -> None:
    gw = await gateway_factory({"model_list": [
        model_entry("coder", local.v1, model="openai/qwen3-coder")]})
    caplog.set_level(logging.WARNING, logger="gateway.server")
    async with client(gw) as api:
        first = await api.responses.create(model="coder", input="hi")
        assert first.output_text
        assert local.hits == 1  # (its /responses answered 404 first)
        events: list[Any] = [e async for e in await api.responses.create(
            model="coder", input="and again", stream=True)]
    assert events[-1].type == "response.completed"
    assert local.hits == 2  # straight to chat: no second 404
    warned = [r.getMessage() for r in caplog.records if "/responses endpoint" in r.getMessage()]
    assert len(warned) == 1 and "model_info.responses_api: false" in warned[0]


async def test_a_model_declared_to_speak_responses_keeps_its_404(
    gateway_factory: GatewayFactory, local: FleetUpstream,
) -> None:
    gw = await gateway_factory({"model_list": [
        model_entry("coder", local.v1, model="openai/qwen3-coder", responses_api=True)]})
    async with client(gw) as api:
        with pytest.raises(openai.NotFoundError):
            await api.responses.create(model="coder", input="hi")
    assert local.hits == 0


@pytest.mark.parametrize("missing", [
    (b'{"detail":"Not Found"}', "application/json"),  # vLLM, SGLang (FastAPI)
    (b'{"error":{"code":404,"message":"File Not Found","type":"not_found_error"}}',
     "application/json"),  # llama.cpp server
    (b"404 page not found", "text/plain"),  # Ollama
], ids=["vllm", "llama_cpp", "ollama"])
async def test_each_servers_missing_route_404_is_told_apart_from_a_missing_model(
    gateway_factory: GatewayFactory, missing: tuple[bytes, str],
) -> None:
    body, kind = missing
    async with FaultyUpstream() as up:
        up.then(answer(404, body, {"Content-Type": kind}), ok_json())
        gw = await gateway_factory({"model_list": [
            model_entry("coder", up.base_url, model="openai/qwen3-coder")]})
        async with client(gw) as api:
            got = await api.responses.create(model="coder", input="hi")
    assert got.output_text == "fine"
    assert [r.path for r in up.received] == ["/v1/responses", "/v1/chat/completions"]


async def test_a_conversation_cannot_be_continued_through_chat_and_says_so(
    gateway_factory: GatewayFactory, local: FleetUpstream,
) -> None:
    # The Conversations API keeps the history at the provider; a chat-only model has none
    # of it: a clear 400, not an answer to the last message alone.
    gw = await gateway_factory({"model_list": [
        model_entry("flat", local.v1, model="openai/qwen3-coder", responses_api=False)]})
    async with client(gw) as api:
        with pytest.raises(openai.BadRequestError) as info:
            await api.responses.create(model="flat", input="and then?",
                                       conversation="conv_123")
    assert info.value.body["param"] == "conversation"  # type: ignore[index]
    assert "input" in info.value.message
    assert local.hits == 0
