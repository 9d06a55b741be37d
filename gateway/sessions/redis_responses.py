"""Kept responses in Redis (imported only when a Redis URL is configured), shared by every
replica of the gateway::

    gw:r:{response_id}    str   owner, a newline, then encode_kept(record)
    gw:responses          zset  response_id -> its retention clock (when it was kept, or
                                when the newest record stored over it was)
    gw:rb:{response_id}   str   the record it is stored over (its base), if any
    gw:rd:{response_id}   set   the records stored over it
    gw:rh:{response_id}   str   set when it was deleted while others are stored over it
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from redis.exceptions import WatchError

from gateway.sessions.redis_store import aclose, connect
from gateway.sessions.response_records import (
    KeptResponse,
    decode_kept,
    encode_kept,
    resolved,
    stored_owner,
)

RESPONSES_KEY = "gw:responses"
_PURGE_BATCH = 500
# Writes tried again when a record they are stored over changed while they were prepared.
_PUT_ATTEMPTS = 3

# Hide the record, then remove each hidden record no other is stored over (the record, then
# its base, and so on), atomically: no record is stored over one while it goes.
_DELETE = """
local id = ARGV[1]
if redis.call('EXISTS', 'gw:r:' .. id) == 0 or redis.call('EXISTS', 'gw:rh:' .. id) == 1 then
  return 0
end
redis.call('SET', 'gw:rh:' .. id, '1')
while id and redis.call('SCARD', 'gw:rd:' .. id) == 0
    and redis.call('EXISTS', 'gw:rh:' .. id) == 1 do
  local base = redis.call('GET', 'gw:rb:' .. id)
  redis.call('DEL', 'gw:r:' .. id, 'gw:rb:' .. id, 'gw:rd:' .. id, 'gw:rh:' .. id)
  redis.call('ZREM', KEYS[1], id)
  if base then redis.call('SREM', 'gw:rd:' .. base, id) end
  id = base
end
return 1
"""


def response_key(response_id: str) -> str:
    """The Redis key of a kept response."""
    return f"gw:r:{response_id}"


def _base_key(response_id: str) -> str:
    return f"gw:rb:{response_id}"


def _over_key(response_id: str) -> str:
    return f"gw:rd:{response_id}"


def _hidden_key(response_id: str) -> str:
    return f"gw:rh:{response_id}"


class RedisResponseStore:
    """:class:`~gateway.sessions.responses_state.ResponseStore` on Redis."""

    def __init__(self, url: str) -> None:
        self._client = connect(url)
        self._delete = self._client.register_script(_DELETE)

    async def put_response(self, record: KeptResponse) -> None:
        """Keep ``record`` (replacing any record of its id)."""
        await self.put_responses((record,))

    async def put_responses(self, records: Sequence[KeptResponse]) -> None:
        """Keep ``records`` in one transaction, in order (encoded off the event loop: a
        long conversation takes a millisecond to compress); the records one is stored
        over count from its time on for retention. One whose chain is no longer all there
        (deleted, purged meanwhile) is stored whole."""
        records = list(records)
        blobs = await asyncio.to_thread(_encoded, records)
        for attempt in range(_PUT_ATTEMPTS):
            async with self._client.pipeline(transaction=True) as pipe:
                ahead = {r.response_id for r in records}
                links = sorted({link for r in records for link in r.chain} - ahead)
                if links:  # (the transaction fails if one of them changes meanwhile)
                    keys = [response_key(link) for link in links]
                    await pipe.watch(*keys)
                    gone: set[str] = set()
                    if await pipe.exists(*keys) < len(keys):  # (which: rarely asked)
                        gone = {link for link, key in zip(links, keys, strict=True)
                                if not await pipe.exists(key)}
                    lost = [i for i, r in enumerate(records) if gone.intersection(r.chain)]
                    if lost:
                        for i in lost:
                            records[i] = records[i].stored_whole()
                        whole = await asyncio.to_thread(_encoded, [records[i] for i in lost])
                        for i, blob in zip(lost, whole, strict=True):
                            blobs[i] = blob
                    pipe.multi()
                for record, blob in zip(records, blobs, strict=True):
                    _queue_put(pipe, record, blob)
                try:
                    await pipe.execute()
                    return
                except WatchError:
                    if attempt == _PUT_ATTEMPTS - 1:
                        raise

    async def get_response(self, response_id: str) -> KeptResponse | None:
        """The record of ``response_id`` (its whole input), or ``None``."""
        async with self._client.pipeline(transaction=True) as pipe:
            pipe.get(response_key(response_id))
            pipe.zscore(RESPONSES_KEY, response_id)
            pipe.exists(_hidden_key(response_id))
            blob, when, hidden = await pipe.execute()
        if blob is None or hidden:
            return None
        record = _decoded(response_id, blob, when)
        if not record.chain:
            return record
        blobs = await self._client.mget([response_key(link) for link in record.chain])
        links = {link: _decoded(link, found, 0.0)
                 for link, found in zip(record.chain, blobs, strict=True) if found is not None}
        return resolved(record, links)

    async def delete_response(self, response_id: str) -> bool:
        """Remove the record of ``response_id``; whether there was one. One that others are
        stored over is hidden until the last of them goes."""
        return bool(await self._delete(keys=[RESPONSES_KEY], args=[response_id]))

    async def purge_responses(self, before: float) -> int:
        """Remove the records kept before ``before``."""
        removed = 0
        while True:
            old: list[Any] = await self._client.zrangebyscore(
                RESPONSES_KEY, "-inf", f"({before}", start=0, num=_PURGE_BATCH)
            if not old:
                return removed
            ids = [i.decode() if isinstance(i, bytes) else str(i) for i in old]
            bases: list[Any] = await self._client.mget([_base_key(i) for i in ids])
            async with self._client.pipeline(transaction=True) as pipe:
                pipe.delete(*(response_key(i) for i in ids))
                pipe.delete(*(key(i) for i in ids for key in (_base_key, _over_key,
                                                                 _hidden_key)))
                pipe.zrem(RESPONSES_KEY, *ids)
                for rid, base in zip(ids, bases, strict=True):
                    if base is not None:  # (its base may have been kept longer)
                        pipe.srem(_over_key(bytes(base).decode()), rid)
                deleted, *_ = await pipe.execute()
            removed += int(deleted)

    async def close(self) -> None:
        """Close the client's connections."""
        await aclose(self._client)


def _encoded(records: Sequence[KeptResponse]) -> list[bytes]:
    return [stored_owner(r).encode() + b"\n" + encode_kept(r) for r in records]


def _queue_put(pipe: Any, record: KeptResponse, blob: bytes) -> None:
    rid = record.response_id
    pipe.set(response_key(rid), blob)
    pipe.delete(_hidden_key(rid))
    pipe.zadd(RESPONSES_KEY, {rid: record.created_at})
    if record.chain:
        pipe.set(_base_key(rid), record.chain[-1])
        pipe.sadd(_over_key(record.chain[-1]), rid)
        pipe.zadd(RESPONSES_KEY, dict.fromkeys(record.chain, record.created_at), xx=True,
                  gt=True)
    else:
        pipe.delete(_base_key(rid))


def _decoded(response_id: str, value: Any, when: Any) -> KeptResponse:
    owner, _, items = bytes(value).partition(b"\n")
    return decode_kept(response_id, owner.decode(), items,
                       float(when) if when is not None else 0.0)
