"""The message archive in Redis: a list per session, shared by all replicas (imported only
when a Redis URL is configured)."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from gateway.sessions.archive import clamp_range, decode_line
from gateway.sessions.redis_store import TOUCHED_KEY, aclose, connect, session_key


class RedisArchive:
    """A Redis list per session (``gw:s:{sid}:archive``), shared by all replicas."""

    def __init__(self, url: str) -> None:
        self._client = connect(url)

    async def append(
        self, session_id: str, messages: Sequence[Mapping[str, Any]]
    ) -> tuple[int, int]:
        """Append ``messages`` (RPUSH: atomic, numbering shared across replicas)."""
        key = session_key(session_id, "archive")
        if not messages:
            count = int(await self._client.llen(key))
            return count + 1, count
        total = int(await self._client.rpush(key, *(orjson.dumps(m) for m in messages)))
        await self._client.zadd(TOUCHED_KEY, {session_id: time.time()})
        return total - len(messages) + 1, total

    async def read(self, session_id: str, from_line: int, to_line: int) -> list[dict[str, Any]]:
        """Return lines ``from_line..to_line`` (clamped to >= 1 and 1000 lines)."""
        bounds = clamp_range(from_line, to_line)
        if bounds is None:
            return []
        key = session_key(session_id, "archive")
        items = await self._client.lrange(key, bounds[0] - 1, bounds[1] - 1)
        return [decode_line(item) for item in items]

    async def line_count(self, session_id: str) -> int:
        """Return the length of the session's list."""
        return int(await self._client.llen(session_key(session_id, "archive")))

    async def delete(self, session_id: str) -> bool:
        """Remove the session's archive list."""
        return int(await self._client.delete(session_key(session_id, "archive"))) > 0

    async def last_write(self, session_id: str) -> float | None:
        """Not tracked per list: the store's ``gw:touched`` covers archive appends."""
        return None

    async def close(self) -> None:
        """Close the client's connections."""
        await aclose(self._client)
