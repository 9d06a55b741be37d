"""A single tool output larger than the window: the session still gets compacted."""

from __future__ import annotations

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
        assert header is not None and header[0] == "summarized", raw.headers
        # The summary request fitted the window: it carried a clipped copy of the log.
        accepted = [r for r in summary_calls(ref) if r.status == 200]
        assert accepted and "characters omitted" in accepted[-1].body.decode()
