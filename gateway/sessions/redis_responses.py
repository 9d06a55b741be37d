"""Kept responses in Redis (imported only when a Redis URL is configured), shared by every
replica of the gateway::

    gw:r:{response_id}   str   owner, a newline, then encode_kept(record)
    gw:responses         zset  response_id -> time it was kept (retention)
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from gateway.sessions.redis_store import aclose, connect
from gateway.sessions.response_records import KeptResponse, decode_kept, encode_kept

RESPONSES_KEY = "gw:responses"
_PURGE_BATCH = 500


def response_key(response_id: str) -> str:
    """The Redis key of a kept response."""
    return f"gw:r:{response_id}"


class RedisResponseStore:
    """:class:`~gateway.sessions.responses_state.ResponseStore` on Redis."""

    def __init__(self, url: str) -> None:
        self._client = connect(url)

    async def put_response(self, record: KeptResponse) -> None:
        """Keep ``record`` (replacing any record of its id)."""
        await self.put_responses((record,))

    async def put_responses(self, records: Sequence[KeptResponse]) -> None:
        """Keep ``records`` in one transaction, in order (encoded off the event loop: a
        long conversation takes a millisecond to compress)."""
        blobs = await asyncio.to_thread(
            lambda: [r.owner.encode() + b"\n" + encode_kept(r) for r in records])
        async with self._client.pipeline(transaction=True) as pipe:
            for record, blob in zip(records, blobs, strict=True):
                pipe.set(response_key(record.response_id), blob)
                pipe.zadd(RESPONSES_KEY, {record.response_id: record.created_at})
            await pipe.execute()

    async def get_response(self, response_id: str) -> KeptResponse | None:
        """The record of ``response_id``, or ``None``."""
        async with self._client.pipeline(transaction=True) as pipe:
            pipe.get(response_key(response_id))
            pipe.zscore(RESPONSES_KEY, response_id)
            blob, when = await pipe.execute()
        if blob is None:
            return None
        owner, _, items = bytes(blob).partition(b"\n")
        return decode_kept(response_id, owner.decode(), items,
                           float(when) if when is not None else 0.0)

    async def delete_response(self, response_id: str) -> bool:
        """Remove the record of ``response_id``; whether there was one."""
        async with self._client.pipeline(transaction=True) as pipe:
            pipe.delete(response_key(response_id))
            pipe.zrem(RESPONSES_KEY, response_id)
            deleted, _ = await pipe.execute()
        return bool(deleted)

    async def purge_responses(self, before: float) -> int:
        """Remove the records kept before ``before``."""
        removed = 0
        while True:
            old: list[Any] = await self._client.zrangebyscore(
                RESPONSES_KEY, "-inf", f"({before}", start=0, num=_PURGE_BATCH)
            if not old:
                return removed
            ids = [i.decode() if isinstance(i, bytes) else str(i) for i in old]
            async with self._client.pipeline(transaction=True) as pipe:
                pipe.delete(*(response_key(i) for i in ids))
                pipe.zrem(RESPONSES_KEY, *ids)
                deleted, _ = await pipe.execute()
            removed += int(deleted)

    async def close(self) -> None:
        """Close the client's connections."""
        await aclose(self._client)
