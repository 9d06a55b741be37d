"""``x-gateway-context``: how full the model's context is, as the client sees it."""

from __future__ import annotations

import math

from gateway.compaction.tokens import token_counter
from gateway.referee import Referee
from tests.compaction.conftest import (
    Session,
    agent_turn,
    compaction_header,
    wait_background_idle,
)
from tests.conftest import GatewayFactory, model_entry
from tests.factories import system

LEVELS = {"comfortable": 0.30, "warning": 0.68, "pressure": 0.80, "critical": 0.92}


def _one_model_per_level(ref: Referee, tokens: int, levels: dict[str, float]
                         ) -> dict[str, object]:
    """A config with one model per level, whose window puts ``tokens`` at that level's
    usage ratio (background compaction from 0.85, blocking from 0.99)."""
    return {
        "model_list": [model_entry(level, ref.base_url, model="openai/referee",
                                   max_input_tokens=math.ceil(tokens / ratio))
                       for level, ratio in levels.items()],
        "compaction": {"reserved_context_size": 0, "trigger_ratio": 0.85, "block_ratio": 0.99},
    }


async def test_context_level_header_follows_the_usage_ratio(
    gateway_factory: GatewayFactory,
) -> None:
    history = [system("You are terse."), *agent_turn(0), *agent_turn(1)]
    tokens = token_counter("referee")(history)
    async with Referee(rules="openai", style="openai") as ref:
        gw = await gateway_factory(_one_model_per_level(ref, tokens, LEVELS))
        for level in LEVELS:
            s = Session(gw, session_id=f"level-{level}", model=level, history=list(history))
            raw = await s.send()
            assert raw.headers["x-gateway-context"].split(";")[0] == level
            assert compaction_header(raw) is None  # none is at the block ratio
        await wait_background_idle(gw)  # "critical" started one in the background
        assert len(ref.requests) == len(LEVELS) + 1


async def test_reserved_context_counts_against_the_window(
    gateway_factory: GatewayFactory,
) -> None:
    history = [system("You are terse."), *agent_turn(0)]
    tokens = token_counter("referee")(history)
    async with Referee(rules="openai", style="openai") as ref:
        window = tokens * 5  # 20% used by the input alone
        gw = await gateway_factory({
            "model_list": [model_entry("demo", ref.base_url, model="openai/referee",
                                       max_input_tokens=window)],
            # Room kept for the output: its share of the window (50,000 / 128,000 of it).
            "compaction": {"reserved_context_size": 10 * window},
        })
        raw = await Session(gw, history=list(history)).send()
        # 20% + 39% is below 60%
        assert raw.headers["x-gateway-context"].split(";")[0] == "comfortable"


async def test_a_later_turn_reports_what_a_first_look_reports(
    gateway_factory: GatewayFactory,
) -> None:
    """A session's later turns skip the store (it had nothing for the session): the level
    they report is the one a request of the same history reports after looking."""
    first = [system("You are terse."), *agent_turn(0)]
    later = [*first, *agent_turn(1)]
    tokens = token_counter("referee")(later)
    async with Referee(rules="openai", style="openai") as ref:
        below_trigger = {level: r for level, r in LEVELS.items() if level != "critical"}
        gw = await gateway_factory(_one_model_per_level(ref, tokens, below_trigger))
        for level in below_trigger:
            turns = Session(gw, session_id=f"turns-{level}", model=level)
            looked = Session(gw, session_id=f"looked-{level}", model=level)
            turns.history, looked.history = list(first), list(later)
            await turns.send()  # the session's first request: the store is asked
            turns.history = list(later)
            assert (await turns.send()).headers["x-gateway-context"].split(";")[0] == level
            assert (await looked.send()).headers["x-gateway-context"].split(";")[0] == level
