"""Kept Responses API answers as records (pure): what :mod:`gateway.sessions.responses_state`
stores, and the blob both backends store it as.

An agent's answers repeat each other: each one's input is the conversation so far. A record
may be stored *over* an earlier one (:func:`stored_over`): its blob holds only the items its
input adds to that record's conversation, and the ids of the records it is read over
(``chain``, at most ``MAX_CHAIN``, the oldest stored whole). A store reads those with it and
puts the input together again (:func:`resolved`)."""

from __future__ import annotations

import operator
import sys
import threading
import time
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import orjson

if sys.version_info >= (3, 14):
    from compression import zstd
else:  # (the standard library's module, backported)
    from backports import zstd

from gateway.projection.lazy_messages import LazyMessages

__all__ = [
    "FINISHED",
    "MAX_CHAIN",
    "KeptResponse",
    "decode_kept",
    "encode_kept",
    "resolved",
    "stored_over",
    "stored_owner",
]

# Blobs are zstd frames at level 1 (~6x faster than zlib's fastest level on a 330 KB input,
# a third of its size), after an empty record in zlib (``_EARLIER``): a gateway from before
# (zlib only: a rolling upgrade, a rollback) reads that one (zlib ignores what follows its
# stream) under a marked owner (``_ZSTD_OWNER``), takes it for another owner's and answers
# previous_response_not_found instead of failing. A blob that does not open with it is a
# zlib record an earlier gateway wrote.
_ZSTD_LEVEL = 1
_EARLIER = zlib.compress(b'{"input":[],"output":[]}', 9)
# One compressor per thread, reused: setting one up costs more than compressing a few KB.
_compressors = threading.local()
# The statuses of an answer whose output is final and continuable.
FINISHED = ("completed", "incomplete")
# How many records one is read over at most (a lookup reads them all): the next is whole.
MAX_CHAIN = 16
# A record is stored over another only when it repeats at least this share of its input.
_LEAST_SHARED = 0.5
# Before the owner a record stored over others is kept under: a gateway from before such
# records (a rolling upgrade, a rollback) takes it for another owner's, never shown or
# continued, instead of reading its added items as the whole conversation. (Owner ids are
# hex digests, or empty without client auth: none starts so.)
_OVER_OWNER = "over:"
# Before the owner of a record in zstd (outside ``_OVER_OWNER``; see ``_EARLIER``).
_ZSTD_OWNER = "zstd:"


@dataclass(frozen=True, slots=True)
class KeptResponse:
    """One answer as kept: ``owner`` is the client's owner id (``""`` without client auth).

    ``response``: the response object as answered, without its ``output`` (what retrieving
    it shows; None for records kept before it was). ``origin``: ``(model name, deployment
    id)`` of the Responses upstream that holds the answer too (None when a chat-only model
    answered it). A record that is not
    :attr:`finished` is a background response under way upstream: its output is empty.

    ``chain`` and ``take``: how it is stored. Its input's first ``take`` items are the
    conversation of the last record of ``chain`` (its base), itself stored over the ones
    before it; ``chain`` is empty for a record stored whole. A record read from a store
    has its whole input (:func:`resolved`).

    Treat ``input``, ``output`` and ``response`` as read-only: records are shared between
    callers."""

    response_id: str
    owner: str
    input: list[Any]
    output: list[Any]
    created_at: float
    response: dict[str, Any] | None = None
    origin: tuple[str, str] | None = None
    chain: tuple[str, ...] = ()
    take: int = 0

    @classmethod
    def create(cls, response_id: str, owner: str | None, input: Sequence[Any],
               output: Sequence[Any], response: dict[str, Any] | None = None,
               origin: tuple[str, str] | None = None) -> KeptResponse:
        """A record made now (``response``: the whole object; its output is left out)."""
        # (an input still unparsed is kept so: written as its JSON, parsed when read)
        items = input if isinstance(input, LazyMessages) else list(input)
        return cls(response_id, owner or "", items, list(output), time.time(),
                   None if response is None else _without_output(response), origin)

    @property
    def finished(self) -> bool:
        """Whether the answer is final (its output can be continued)."""
        return self.response is None or self.response.get("status") in FINISHED

    def answered(self, response: Mapping[str, Any]) -> KeptResponse:
        """This record with what its upstream answered of it later (a background
        response's progress): the object, and its output once it is finished."""
        output = response.get("output") if response.get("status") in FINISHED else []
        return replace(self, output=list(output) if isinstance(output, list) else [],
                       response=_without_output(response))

    def stored_whole(self) -> KeptResponse:
        """This record stored whole (over no other)."""
        return replace(self, chain=(), take=0) if self.chain else self

    def conversation(self) -> list[Any]:
        """Every item of the conversation up to and including this answer."""
        return [*self.input, *self.output]


def _without_output(response: Mapping[str, Any]) -> dict[str, Any]:
    """A response object as kept: its output is kept apart (the record's ``output``)."""
    return {k: v for k, v in response.items() if k != "output"}


def stored_over(record: KeptResponse, base: KeptResponse) -> KeptResponse:
    """``record`` stored over ``base`` when its input starts with ``base``'s conversation's
    very objects (as an agent's next turn, read over the body of the turn before, or a
    continued ``previous_response_id``, does), for at least half of it; else ``record``
    as it is (stored whole)."""
    if (base.response_id == record.response_id or base.owner != record.owner
            or len(base.chain) >= MAX_CHAIN - 1):
        return record
    # A continued answer repeats the whole conversation; an agent's next turn its input (the
    # output comes back as new objects). A response under way is kept again once
    # answered: only its input is final.
    for shared in (base.conversation() if base.finished else None, base.input):
        if shared is None or len(shared) > len(record.input):
            continue
        take = len(shared)
        if take < 2 or take < len(record.input) * _LEAST_SHARED:
            return record
        if all(map(operator.is_, shared, record.input)):  # (in C: a turn repeats hundreds)
            return replace(record, chain=(*base.chain, base.response_id), take=take)
    return record


def stored_owner(record: KeptResponse) -> str:
    """The owner ``record`` is stored under, marked (its blob is zstd; it is stored over
    others): an earlier gateway never takes it for its client's."""
    return _ZSTD_OWNER + (_OVER_OWNER + record.owner if record.chain else record.owner)


def encode_kept(record: KeptResponse) -> bytes:
    """The stored blob of a record (zstd-compressed orjson of its items, response object,
    origin and creation time; of a record stored over others, only the items its input
    adds, and their ids), after the empty record an earlier gateway reads (``_EARLIER``)."""
    items = record.input[record.take:] if record.chain else record.input
    written = items.unparsed_json() if isinstance(items, LazyMessages) else None
    data: dict[str, Any] = {"input": items if written is None else orjson.Fragment(written),
                            "output": record.output, "at": record.created_at}
    if record.response is not None:
        data["response"] = record.response
    if record.origin is not None:
        data["origin"] = list(record.origin)
    if record.chain:
        data["chain"], data["take"] = record.chain, record.take
    written = orjson.dumps(data)
    compressor = getattr(_compressors, "zstd", None)
    if compressor is None:
        compressor = _compressors.zstd = zstd.ZstdCompressor(level=_ZSTD_LEVEL)
    try:
        return _EARLIER + compressor.compress(written, mode=zstd.ZstdCompressor.FLUSH_FRAME)
    except BaseException:
        _compressors.zstd = None  # (a frame left half made: the next record starts afresh)
        raise


def decode_kept(response_id: str, owner: str, blob: bytes,
                created_at: float) -> KeptResponse:
    """The record stored as ``blob`` (:func:`encode_kept`) for ``response_id`` under
    ``owner`` (:func:`stored_owner`); of one stored over others, only the items its input
    adds (:func:`resolved` adds the rest). ``created_at``: the store's time of it, for
    records kept before the blob held it."""
    owner = owner.removeprefix(_ZSTD_OWNER).removeprefix(_OVER_OWNER)
    data = orjson.loads(zstd.decompress(memoryview(blob)[len(_EARLIER):])
                        if blob.startswith(_EARLIER) else zlib.decompress(blob))
    origin = data.get("origin")
    chain, take = data.get("chain"), data.get("take")
    return KeptResponse(response_id, owner, data["input"], data["output"],
                        float(data.get("at", created_at)), data.get("response"),
                        (str(origin[0]), str(origin[1])) if isinstance(origin, list)
                        and len(origin) == 2 else None,
                        tuple(str(c) for c in chain) if isinstance(chain, list) else (),
                        take if isinstance(take, int) else 0)


def resolved(record: KeptResponse, links: Mapping[str, KeptResponse]) -> KeptResponse | None:
    """``record`` (decoded) with its whole input, from the decoded records of its chain
    (``links``, by id); None when one of them is gone, is another owner's, or no longer
    holds what ``record`` was stored over."""
    if not record.chain:
        return record
    conversation: list[Any] = []
    for at, link_id in enumerate((*record.chain, record.response_id)):
        link = record if link_id == record.response_id else links.get(link_id)
        if link is None or link.owner != record.owner or link.chain != record.chain[:at] or (
                link.chain and link.take > len(conversation)):
            return None
        head = [*conversation[:link.take], *link.input] if link.chain else link.input
        if link is record:
            return replace(record, input=head)
        conversation = [*head, *link.output]
    return None
