"""Valid requests as real clients send them reach the upstream exactly as sent.

The corpus (tests/data/valid_clients/) holds request bodies in the shapes openai-python,
openai-node, LangChain, the OpenAI Agents SDK (chat mode), pydantic-ai, the Vercel AI SDK
and LiteLLM produce: ``content: ""`` or no content beside tool calls, ``refusal``, ``audio``,
``name`` fields, content-part arrays, empty tool output, unknown keys. The upstream is the
referee enforcing OpenAI's own rules, so every body is also proven valid on the wire.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest

from gateway.projection import project
from gateway.referee import Referee
from gateway.referee.rules import find_problem
from gateway.telemetry.repairs import REPAIRED_EVENT, REPAIRED_LOG
from tests.conftest import GatewayFactory, RunningGateway, model_entry

CORPUS = Path(__file__).resolve().parents[1] / "data" / "valid_clients"
UPSTREAM_MODEL = "referee-upstream"


def _load() -> list[tuple[str, dict[str, Any]]]:
    cases = []
    for path in sorted(CORPUS.glob("*.json")):
        for number, body in enumerate(json.loads(path.read_text())["requests"]):
            cases.append((f"{path.stem}-{number}", body))
    return cases


CASES = _load()


def canonical(body: Any) -> str:
    """JSON text with key order kept: equal exactly when fields, order and values are."""
    return json.dumps(body, ensure_ascii=False, separators=(",", ":"))


@pytest.fixture
async def referee() -> AsyncIterator[Referee]:
    async with Referee(rules="openai", style="openai") as ref:
        yield ref


@pytest.fixture
async def gw(gateway_factory: GatewayFactory, referee: Referee) -> RunningGateway:
    return await gateway_factory({
        "model_list": [model_entry(name, referee.base_url, model=f"openai/{UPSTREAM_MODEL}")
                       for name in {body["model"] for _, body in CASES}],
    })


def test_the_corpus_covers_every_client_and_is_valid_on_openai() -> None:
    assert {case.rsplit("-", 1)[0] for case, _ in CASES} == {
        "openai-python", "openai-node", "langchain", "openai-agents-chat", "pydantic-ai",
        "vercel-ai-sdk", "litellm-client"}
    for case, body in CASES:
        assert find_problem(body, "openai") is None, case


@pytest.mark.parametrize(("case", "body"), CASES, ids=[c for c, _ in CASES])
def test_project_returns_the_corpus_unchanged(case: str, body: dict[str, Any]) -> None:
    projection = project(body["messages"])
    assert projection.anomalies == ()
    assert canonical(projection.messages) == canonical(body["messages"])


@pytest.mark.parametrize("prefix", ["/v1", ""])
async def test_every_request_reaches_the_upstream_as_sent_with_nothing_reported(
    gw: RunningGateway, referee: Referee, prefix: str, caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    async with aiohttp.ClientSession() as http:
        for case, body in CASES:
            before = len(referee.requests)
            sent = orjson.dumps(body)  # compact JSON, as most SDKs send it
            async with http.post(f"{gw.root}{prefix}/chat/completions", data=sent,
                                 headers={"content-type": "application/json"}) as resp:
                await resp.read()
                assert resp.status == 200, case
                assert "x-gateway-repairs" not in resp.headers, case
                assert resp.headers.get("x-gateway-attempts") == "1", case
                assert "x-gateway-recovery" not in resp.headers, case
            received = referee.requests[before:]
            assert len(received) == 1, case
            expected = {**body, "model": UPSTREAM_MODEL}
            assert received[0].body == orjson.dumps(expected), case  # byte for byte

        # Nothing was reported anywhere: no metric, no log line, no span event.
        async with http.get(f"{gw.root}/metrics") as resp:
            metrics = await resp.text()
        dry = []
        for _, body in CASES:
            async with http.post(f"{gw.root}/v1/gateway/project", json=body) as resp:
                dry.append(await resp.json())
    assert "gateway_repairs_total{" not in metrics
    assert not [r for r in caplog.records if REPAIRED_LOG in r.getMessage()]
    events = [e.name for s in gw.spans.get_finished_spans() for e in s.events]
    assert REPAIRED_EVENT not in events
    for (case, body), answer in zip(CASES, dry, strict=True):
        assert answer["anomalies"] == [], case
        assert canonical(answer["messages"]) == canonical(body["messages"]), case
