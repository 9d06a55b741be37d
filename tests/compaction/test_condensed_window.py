"""With ``repair.tool_outputs: condense`` the window is measured on the history as it will be
sent: a session whose tool results only fit once condensed (the same file read again and
again, a log of progress lines) is not summarized, where the same session without condensing
is. Real gateway, the real ``openai`` SDK, the referee upstream."""

from __future__ import annotations

import math
from typing import Any

from gateway.compaction.tokens import token_counter
from gateway.projection.condense import SAME_OUTPUT, ToolOutputCondenser
from gateway.referee import Referee
from tests.compaction.conftest import Session, compaction_header, summary_calls
from tests.conftest import GatewayFactory, model_entry
from tests.factories import assistant, system, tool, tool_call, user

KEYS = {"team-lean": "key-lean", "team-plain": "key-plain", "team-report": "key-report"}
SOURCE = "".join(f"def handler_{n}(request):\n    return route(request, {n})\n\n"
                 for n in range(60))
PROGRESS = "building ... ok\n" * 300


def session() -> list[Any]:
    """An agent that reads one big file five times and runs a noisy build twice."""
    history: list[Any] = [system("You are a careful coding agent."), user("fix the router")]
    outputs = [SOURCE, PROGRESS, SOURCE, SOURCE, PROGRESS, SOURCE, SOURCE]
    for n, output in enumerate(outputs):
        history += [assistant(None, [tool_call(f"call_{n}", "run", {"n": n})]),
                    tool(f"call_{n}", output)]
    return [*history, user("what did you find?")]


async def test_a_history_that_fits_once_condensed_is_not_summarized(
        gateway_factory: GatewayFactory) -> None:
    history = session()
    count = token_counter("referee")
    whole = count(history)
    condensed = count(ToolOutputCondenser().condense(history).messages)
    assert condensed * 3 < whole  # (the session is what the test says it is)
    # A window the whole history fills past the blocking ratio, half empty once condensed.
    window = math.ceil(whole / 0.995)
    async with Referee(rules="openai", style="openai") as ref:
        gw = await gateway_factory({
            "model_list": [model_entry("demo", ref.base_url, model="openai/referee",
                                       max_input_tokens=window)],
            "gateway": {"api_keys": [{"key": k, "owner": o} for o, k in KEYS.items()]},
            "repair": {"owners": {"team-lean": {"tool_outputs": "condense"},
                                  "team-report": {"tool_outputs": "condense",
                                                  "policy": "report"}}},
            "compaction": {"reserved_context_size": 0, "trigger_ratio": 0.85,
                           "block_ratio": 0.99},
        })
        lean = Session(gw, session_id="lean", key=KEYS["team-lean"], history=list(history))
        raw = await lean.send()
        assert compaction_header(raw) is None
        assert raw.headers["x-gateway-context"].split(";")[0] == "comfortable"
        sent = ref.requests[-1].json()["messages"]
        assert sent[7]["content"] == SAME_OUTPUT.format(call_id="call_0")
        assert summary_calls(ref) == []

        # Without condensing (and under the report policy, which sends it as written) the
        # same history is over the blocking ratio: compacted before it is sent.
        for owner in ("team-plain", "team-report"):
            plain = Session(gw, session_id=owner, key=KEYS[owner], history=list(history))
            raw = await plain.send()
            got = compaction_header(raw)
            assert got is not None and got[1] > window * 0.99, raw.headers
