"""Reading a ``/metrics`` page the way Prometheus does."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import aiohttp
from prometheus_client.parser import text_string_to_metric_families


class Scrape:
    """Parsed samples of one scrape."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.samples: list[tuple[str, dict[str, str], float]] = []
        self.types: dict[str, str] = {}
        for family in text_string_to_metric_families(text):
            self.types[family.name] = family.type
            for s in family.samples:
                self.samples.append((s.name, dict(s.labels), s.value))

    def names(self) -> set[str]:
        """Every sample name (``*_bucket``, ``*_count``, ``*_sum`` included)."""
        return {name for name, _, _ in self.samples}

    def total(self, name: str, **labels: str) -> float:
        """The sum of the samples of ``name`` whose labels include ``labels``."""
        return sum(v for n, lab, v in self.samples
                   if n == name and all(lab.get(k) == want for k, want in labels.items()))

    def series(self, name: str) -> list[dict[str, str]]:
        """The label sets of ``name``'s samples."""
        return [lab for n, lab, _ in self.samples if n == name]


async def scrape(root: str) -> Scrape:
    """GET ``{root}/metrics`` and parse it."""
    async with aiohttp.ClientSession() as s, s.get(root + "/metrics") as r:
        assert r.status == 200
        assert r.headers["Content-Type"].startswith("text/plain; version=")
        return Scrape(await r.text())


async def fresh_scrape(root: str) -> Scrape:
    """A scrape on a new connection (so that scrapes land on any of the workers)."""
    connector = aiohttp.TCPConnector(force_close=True)
    async with aiohttp.ClientSession(connector=connector) as s, s.get(root + "/metrics") as r:
        assert r.status == 200
        return Scrape(await r.text())


async def settled_scrape(root: str, settled: Callable[[Scrape], bool],
                         within: float = 10.0) -> Scrape:
    """A fresh scrape once ``settled`` holds of it, or the last one after ``within`` seconds.

    A worker records a request right after its answer is on its way, so a scrape sent as
    soon as the answer arrives may be served by another worker a moment before that record
    is written; the scrape is repeated until it shows what was sent (the caller asserts)."""
    deadline = time.monotonic() + within
    while True:
        scraped = await fresh_scrape(root)
        if settled(scraped) or time.monotonic() > deadline:
            return scraped
        await asyncio.sleep(0.02)
