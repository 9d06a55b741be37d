"""A strict upstream that refuses the compacted shape's consecutive user messages."""

from __future__ import annotations

from itertools import pairwise

from gateway.referee import Referee
from tests.compaction.conftest import Session, agent_turn, compaction_header, demo_config
from tests.conftest import GatewayFactory

REFEREE_WINDOW = 1500


async def test_strict_upstream_pays_the_refusal_once_per_route(
    gateway_factory: GatewayFactory,
) -> None:
    async with Referee(rules="strict", context_window=REFEREE_WINDOW) as ref:
        gw = await gateway_factory(demo_config(ref))
        s = Session(gw)
        reused: list[str] = []
        for i in range(8):
            raw = await s.send(agent_turn(i))
            header = compaction_header(raw)
            if header and header[0] == "reused":
                reused.append(raw.headers["x-gateway-attempts"])
        # Every reused turn still gets an answer; after the first strict resend the route
        # goes strict at once for compacted histories: one attempt per turn.
        assert reused, "the session should have reused a compaction"
        assert reused[-1] == "1", reused
        merged = ref.requests[-1].json()["messages"]
        roles = [m["role"] for m in merged]
        assert all(a != b for a, b in pairwise(roles) if a in ("user", "assistant"))
