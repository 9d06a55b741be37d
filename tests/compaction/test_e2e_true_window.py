"""The provider's window wins (issue 22): a deployment configured with a 100,000-token window
whose provider refuses at 8,000. The refusal's own statement replaces the configuration (one
warning), the summary request is sized from it, /v1/models shows it with its source, and a
growing session keeps getting answers with a handful of summary calls."""

from __future__ import annotations

from collections.abc import AsyncIterator

import aiohttp
import pytest

from gateway.referee import Referee
from tests.compaction.conftest import (
    Session,
    accepted,
    agent_turn,
    chat_calls,
    compaction_header,
    demo_config,
    summary_calls,
)
from tests.conftest import GatewayFactory

PROVIDER_WINDOW = 8_000


@pytest.fixture
async def ref() -> AsyncIterator[Referee]:
    async with Referee(rules="openai", style="openai", context_window=PROVIDER_WINDOW) as r:
        yield r


async def model_card(root: str) -> dict[str, object]:
    async with aiohttp.ClientSession() as http, http.get(root + "/v1/models") as r:
        cards = {m["id"]: m for m in (await r.json())["data"]}
    return cards["demo"]


async def test_a_configured_window_the_provider_contradicts_gives_way(
    gateway_factory: GatewayFactory, ref: Referee, caplog: pytest.LogCaptureFixture,
) -> None:
    gw = await gateway_factory(demo_config(ref, window=100_000))
    assert (await model_card(gw.root))["context_window"] == 100_000
    s = Session(gw, session_id="true-window")
    hows = []
    for i in range(14):  # each turn reads a file of about 900 tokens
        raw = await s.send(agent_turn(i, lines=80))  # (asserts an answer came)
        header = compaction_header(raw)
        hows.append(header[0] if header else None)
    assert len(accepted(chat_calls(ref))) == 14, "every turn answered, each by one request"
    # Only the first compaction needed a refusal: after it the gateway plans with 8,000.
    refusals = [r for r in ref.requests if r.status != 200]
    assert len(refusals) == 1 and refusals[0].situation == "i"  # the referee's overflow
    assert "summarized" in hows and "trimmed" not in hows
    sums = summary_calls(ref)
    assert 1 <= len(sums) <= 4, hows  # a handful, not one per turn
    for call in sums:  # sized from the provider's window: accepted as they were sent
        assert call.status == 200
        assert call.json()["max_tokens"] <= PROVIDER_WINDOW // 8
    card = await model_card(gw.root)
    assert card["context_window"] == PROVIDER_WINDOW
    assert card["context_window_source"] == "learned"
    assert card["context_window_configured"] == 100_000
    warned = [r for r in caplog.records if "states a context window" in r.getMessage()]
    assert len(warned) == 1 and warned[0].levelname == "WARNING"
    assert "max_input_tokens of 100000" in warned[0].getMessage()


async def test_a_restarted_gateway_knows_the_learned_window_at_once(
    gateway_factory: GatewayFactory, ref: Referee, tmp_path: object,
) -> None:
    raw = demo_config(ref, window=100_000, sessions={"data_dir": str(tmp_path)})
    first = await gateway_factory(raw)
    s = Session(first, session_id="restart-window")
    for i in range(12):
        await s.send(agent_turn(i, lines=80))
    assert (await model_card(first.root))["context_window"] == PROVIDER_WINDOW
    # Another gateway on the same store (a restart, another worker) shows it at once and
    # compacts before sending instead of paying a refusal of its own.
    second = await gateway_factory(raw)
    assert (await model_card(second.root))["context_window"] == PROVIDER_WINDOW
    mark = len(ref.requests)
    other = Session(second, session_id="restart-window-2")
    other.history.extend(turn for i in range(12) for turn in agent_turn(100 + i, lines=80))
    raw_reply = await other.send()
    assert compaction_header(raw_reply) is not None
    assert "x-gateway-recovery" not in raw_reply.headers
    assert all(r.status == 200 for r in ref.requests[mark:])
