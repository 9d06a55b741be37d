"""Memory freed by finished requests goes back to the system (glibc's malloc_trim)."""

from __future__ import annotations

import asyncio
import os

from gateway.referee import Referee
from gateway.server.keys import STATE
from gateway.server.memory import MemoryTrimmer, glibc_trim, start_memory_trim
from tests.conftest import GatewayFactory, model_entry

_PAGE = os.sysconf("SC_PAGE_SIZE")


def _rss_mb() -> float:
    with open(f"/proc/{os.getpid()}/statm") as f:
        return int(f.read().split()[1]) * _PAGE / 2**20


def _fragment() -> list[list[str]]:
    """About 120 MB of long strings (each past pymalloc, so glibc's), every other batch
    freed: the freed pages sit between live ones, where glibc keeps them."""
    batches = [[("x" * 2000) + str(i * 1000 + j) for j in range(300)] for i in range(200)]
    del batches[::2]
    return batches


async def test_trimming_returns_freed_memory_to_the_system() -> None:
    trim = glibc_trim()
    assert trim is not None, "this Debian machine runs glibc"
    kept = _fragment()
    before = _rss_mb()
    trimmer = MemoryTrimmer(3600.0, trim)  # only the explicit trim below runs
    try:
        await trimmer.trim_now()
    finally:
        await trimmer.close()
    assert trimmer.runs == 1
    assert before - _rss_mb() > 20  # tens of MB freed by the batches deleted
    assert len(kept) == 100  # (the live half stays)


async def test_off_when_configured_zero() -> None:
    assert start_memory_trim(0) is None


async def test_the_gateway_trims_on_its_interval(gateway_factory: GatewayFactory) -> None:
    async with Referee(rules="openai") as ref:
        gw = await gateway_factory({
            "model_list": [model_entry("demo", ref.base_url)],
            "gateway": {"memory_trim_seconds": 0.01},
        })
        trimmer = gw.app[STATE].trimmer
        assert trimmer is not None

        async def two_runs() -> None:
            while trimmer.runs < 2:
                await asyncio.sleep(0.01)

        await asyncio.wait_for(two_runs(), 10)
        off = await gateway_factory({"model_list": [model_entry("demo", ref.base_url)],
                                     "gateway": {"memory_trim_seconds": 0}})
        assert off.app[STATE].trimmer is None
