"""Kept Responses API answers as records (pure): what :mod:`gateway.sessions.responses_state`
stores, and the blob both backends store it as."""

from __future__ import annotations

import time
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import orjson

__all__ = ["FINISHED", "KeptResponse", "decode_kept", "encode_kept"]

# The statuses of an answer whose output is final and continuable.
FINISHED = ("completed", "incomplete")


@dataclass(frozen=True, slots=True)
class KeptResponse:
    """One answer as kept: ``owner`` is the client's owner id (``""`` without client auth).

    ``response``: the response object as answered, without its ``output`` (what retrieving
    it shows; None for records kept before it was). ``origin``: ``(model name, deployment
    id)`` of the Responses upstream that holds the answer too (None when a chat-only model
    answered it). A record that is not
    :attr:`finished` is a background response under way upstream: its output is empty.

    Treat ``input``, ``output`` and ``response`` as read-only: records are shared between
    callers."""

    response_id: str
    owner: str
    input: list[Any]
    output: list[Any]
    created_at: float
    response: dict[str, Any] | None = None
    origin: tuple[str, str] | None = None

    @classmethod
    def create(cls, response_id: str, owner: str | None, input: Sequence[Any],
               output: Sequence[Any], response: dict[str, Any] | None = None,
               origin: tuple[str, str] | None = None) -> KeptResponse:
        """A record made now (``response``: the whole object; its output is left out)."""
        return cls(response_id, owner or "", list(input), list(output), time.time(),
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

    def conversation(self) -> list[Any]:
        """Every item of the conversation up to and including this answer."""
        return [*self.input, *self.output]


def _without_output(response: Mapping[str, Any]) -> dict[str, Any]:
    """A response object as kept: its output is kept apart (the record's ``output``)."""
    return {k: v for k, v in response.items() if k != "output"}


def encode_kept(record: KeptResponse) -> bytes:
    """The stored blob of a record (zlib-compressed orjson of its items, response object and
    origin)."""
    data: dict[str, Any] = {"input": record.input, "output": record.output}
    if record.response is not None:
        data["response"] = record.response
    if record.origin is not None:
        data["origin"] = list(record.origin)
    return zlib.compress(orjson.dumps(data), 1)


def decode_kept(response_id: str, owner: str, blob: bytes,
                created_at: float) -> KeptResponse:
    """The record stored as ``blob`` (:func:`encode_kept`) for ``response_id``."""
    data = orjson.loads(zlib.decompress(blob))
    origin = data.get("origin")
    return KeptResponse(response_id, owner, data["input"], data["output"], created_at,
                        data.get("response"),
                        (str(origin[0]), str(origin[1])) if isinstance(origin, list)
                        and len(origin) == 2 else None)
