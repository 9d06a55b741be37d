"""Learned context windows kept in the session store, so another replica or a restarted
gateway plans with the window a provider stated without paying a refusal of its own.

With Redis: one string key per route, ``gw:window:<route>``. With SQLite (one host): a
small JSON file beside the database, ``<data_dir>/windows.json``, replaced atomically.
Reads are throttled per route so the hot path looks at most once per ``LOOKUP_EVERY``
seconds (the first look is at once: a restart knows the window on its first request). A
store error only means the window is not shared: it is reported to ``on_error`` (the
service's outage tracker logs one line per outage) and each replica learns the window from
its own first refusal. A store that does not answer in time (``outage.call_limit``: the
request's deadline) is such an error.
"""

from __future__ import annotations

import asyncio
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import orjson

from gateway.compaction.outage import StoreTimeout, call_limit
from gateway.sessions.errors import store_errors

LOOKUP_EVERY = 30.0
_PREFIX = "gw:window:"
FILE_NAME = "windows.json"

OnError = Callable[[Exception], None]


def _ignore(error: Exception) -> None:
    return None


class SharedWindows:
    """Get and put learned windows: the throttling and error reporting of both stores."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._looked: dict[str, float] = {}
        self.on_error: OnError = _ignore

    def due(self, route: str) -> bool:
        """True when a look for ``route`` is due (none within ``LOOKUP_EVERY`` seconds)."""
        looked = self._looked.get(route)
        return looked is None or self._clock() - looked >= LOOKUP_EVERY

    async def lookup(self, route: str) -> int | None:
        """The window stored for ``route`` (throttled: None when no look is due)."""
        if not self.due(route):
            return None
        self._looked[route] = self._clock()
        limit = call_limit()
        try:
            try:
                async with asyncio.timeout(limit):
                    return await self._get(route)
            except TimeoutError:  # (this call's own limit: a store that hangs)
                raise StoreTimeout(f"no answer within {limit:.2g}s") from None
        except store_errors() as exc:
            self.on_error(exc)
            return None

    async def put(self, route: str, window: int) -> None:
        """Keep ``window`` as the learned window of ``route``."""
        limit = call_limit()
        try:
            try:
                async with asyncio.timeout(limit):
                    await self._put(route, window)
            except TimeoutError:
                raise StoreTimeout(f"no answer within {limit:.2g}s") from None
        except store_errors() as exc:
            self.on_error(exc)

    async def _get(self, route: str) -> int | None:
        raise NotImplementedError

    async def _put(self, route: str, window: int) -> None:
        raise NotImplementedError

    async def close(self) -> None:
        """Release connections."""


class RedisWindows(SharedWindows):
    """Learned windows in Redis (shared by every replica)."""

    def __init__(self, url: str, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__(clock)
        from gateway.sessions.redis_store import connect  # (Redis only when configured)

        self._client = connect(url)

    async def _get(self, route: str) -> int | None:
        raw = await self._client.get(_PREFIX + route)
        try:
            return int(raw) if raw is not None else None
        except ValueError:
            return None

    async def _put(self, route: str, window: int) -> None:
        await self._client.set(_PREFIX + route, str(window))

    async def close(self) -> None:
        """Close the connection pool."""
        from gateway.sessions.redis_store import aclose

        await aclose(self._client)


class FileWindows(SharedWindows):
    """Learned windows in ``<data_dir>/windows.json`` (the SQLite store's host)."""

    def __init__(self, data_dir: str | Path, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__(clock)
        self._path = Path(data_dir) / FILE_NAME

    def _read(self) -> dict[str, int]:
        try:
            data = orjson.loads(self._path.read_bytes())
        except FileNotFoundError:
            return {}
        except orjson.JSONDecodeError:
            return {}
        if not isinstance(data, dict):
            return {}
        return {k: v for k, v in data.items() if isinstance(k, str) and isinstance(v, int)}

    def _write(self, route: str, window: int) -> None:
        data = self._read()
        data[route] = window
        self._path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)  # owner only
        fd, tmp = tempfile.mkstemp(dir=self._path.parent, prefix=".windows-")
        try:
            with os.fdopen(fd, "wb") as out:
                out.write(orjson.dumps(data))
            os.replace(tmp, self._path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    async def _get(self, route: str) -> int | None:
        return (await asyncio.to_thread(self._read)).get(route)

    async def _put(self, route: str, window: int) -> None:
        await asyncio.to_thread(self._write, route, window)
