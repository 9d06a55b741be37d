"""The one HTTP client helper for tests that post a JSON body and read the whole answer.

``post`` answers a :class:`Reply` (status, headers, raw bytes, with ``.json`` parsed on demand);
``post_json`` answers ``(status, headers, parsed JSON)`` for the suites that only read JSON.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, NamedTuple

import aiohttp
import orjson
from multidict import CIMultiDictProxy

JSON_HEADERS = {"content-type": "application/json"}


class Reply(NamedTuple):
    """A whole HTTP answer: status, headers and the body as received."""

    status: int
    headers: CIMultiDictProxy[str]
    raw: bytes

    @property
    def json(self) -> Any:
        """The body parsed as JSON; None when it is empty."""
        return orjson.loads(self.raw) if self.raw else None


async def post(
    url: str,
    body: Any = None,
    headers: dict[str, str] | None = None,
    *,
    data: bytes | None = None,
    session: aiohttp.ClientSession | None = None,
    timeout: float = 60,
) -> Reply:
    """POST ``body`` as JSON (or ``data`` as given) to ``url`` and read the whole answer.

    ``headers`` add to a JSON content type; with ``data`` they replace it when given. A
    ``session`` is reused when passed, otherwise one is opened for this request.
    """
    if data is None:
        data, headers = orjson.dumps(body), {**JSON_HEADERS, **(headers or {})}
    elif headers is None:
        headers = JSON_HEADERS
    if session is None:
        async with aiohttp.ClientSession() as own:
            return await post(url, data=data, headers=headers, session=own, timeout=timeout)
    async with session.post(
        url, data=data, headers=headers, timeout=aiohttp.ClientTimeout(total=timeout)
    ) as response:
        return Reply(response.status, response.headers, await response.read())


async def post_json(
    url: str, body: Any = None, headers: dict[str, str] | None = None, **options: Any
) -> tuple[int, Any, Any]:
    """``post`` and answer ``(status, headers, parsed JSON body)``."""
    reply = await post(url, body, headers, **options)
    return reply.status, reply.headers, reply.json


async def wait_until_serving(root: str, exited: Callable[[], str | None],
                             tries: int = 600) -> None:
    """Poll ``root``/healthz until it answers 200 (``tries`` times 50 ms at most), for a
    gateway started in another process; ``exited`` says why that process is gone (its exit
    code, its log's tail), None while it runs: then the wait fails at once with that."""
    async with aiohttp.ClientSession() as http:
        for _ in range(tries):
            gone = exited()
            if gone is not None:
                raise AssertionError(f"the gateway exited before serving: {gone}")
            try:
                async with http.get(root + "/healthz") as ready:
                    if ready.status == 200:
                        return
            except aiohttp.ClientConnectionError:
                pass
            await asyncio.sleep(0.05)  # polling for start-up, not timing an assertion
    raise AssertionError(f"the gateway never answered {root}/healthz")
