"""A deployment's rpm counted in this process (Redis unreachable) holds across a turning
minute: requests that waited on Redis while the minute turned are counted in the minute
they were checked in, so the check of the next one sees them."""

from __future__ import annotations

import asyncio
from typing import Any

from gateway.config import parse_config
from gateway.providers.openai_compat import HttpPool
from gateway.router.fleet import Fleet


class DownRedis:
    """Shared counters that cannot be reached, answering after the clock moved on."""

    def __init__(self, clock: list[float], later: float) -> None:
        self.clock, self.later = clock, later

    async def read(self, ids: list[str], now: float) -> None:
        return None

    async def reserve(self, *_: Any) -> None:
        await asyncio.sleep(0)
        self.clock[0] = self.later  # the minute turned while it waited
        return None

    def seconds_left(self) -> float:
        return 1.0


async def test_the_rpm_counted_here_holds_across_a_turning_minute() -> None:
    config = parse_config({"model_list": [{"model_name": "m", "litellm_params": {
        "model": "openai/m", "api_base": "http://127.0.0.1:9/v1", "rpm": 1}}]})
    clock = [59.9]  # a second before the process clock's minute turns
    fleet = Fleet(config, HttpPool(), clock=lambda: clock[0])
    fleet.shared = DownRedis(clock, 60.1)  # type: ignore[assignment]
    route = fleet.groups["m"][0]
    first = await fleet.pick(route, tokens=10)
    second = await fleet.pick(route, tokens=10)
    assert first is route
    assert not isinstance(second, type(route))  # refused: the minute's one request is used
    assert second.status == 429  # type: ignore[union-attr]
