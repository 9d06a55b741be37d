"""A single tool output larger than the window: the session still gets compacted."""

from __future__ import annotations

from gateway.compaction.reduce import FOLDED_PREFIX
from gateway.referee import Referee
from tests.compaction.conftest import Session, compaction_header, demo_config, summary_calls
from tests.conftest import GatewayFactory
from tests.factories import calls, tool, user


async def test_a_tool_output_larger_than_the_window_does_not_block_compaction(
    gateway_factory: GatewayFactory,
) -> None:
    async with Referee(rules="openai", context_window=9000) as ref:
        gw = await gateway_factory(demo_config(ref, window=200_000))
        s = Session(gw)
        huge = "\n".join(f"line {i}: " + "data " * 12 for i in range(900))  # ~60 KB
        raw = await s.send([user("read the log"), calls("call_log"), tool("call_log", huge),
                            user("what went wrong?")])
        header = compaction_header(raw)
        # The cheap reduction comes first: the old, long log is folded to a card
        # (its tool, arguments, size and first lines); no summary call was needed.
        assert header is not None and header[0] == "reduced", raw.headers
        assert summary_calls(ref) == []
        sent = [r for r in ref.requests if r.status == 200][-1].json()["messages"]
        card = next(m["content"] for m in sent if m["role"] == "tool")
        assert card.startswith(FOLDED_PREFIX) and "line 0: data" in card
        assert "line 899" not in card and f"{len(huge)} characters" in card
        assert sent[-1] == user("what went wrong?")


async def test_a_huge_tool_output_of_the_current_turn_is_summarized_from_a_clipped_copy(
    gateway_factory: GatewayFactory,
) -> None:
    async with Referee(rules="openai", context_window=9000) as ref:
        gw = await gateway_factory(demo_config(ref, window=200_000))
        s = Session(gw)
        huge = "\n".join(f"line {i}: " + "data " * 12 for i in range(900))  # ~60 KB
        # The log answers the current turn: the model is working with it, it is not folded.
        raw = await s.send([user("read the log"), calls("call_log"), tool("call_log", huge)])
        header = compaction_header(raw)
        assert header is not None and header[0] == "summarized", raw.headers
        # The summary request fitted the window: it carried a clipped copy of the log.
        accepted = [r for r in summary_calls(ref) if r.status == 200]
        assert accepted and "characters omitted" in accepted[-1].body.decode()
