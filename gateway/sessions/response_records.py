"""Kept Responses API answers as records (pure): what :mod:`gateway.sessions.responses_state`
stores, and the blob both backends store it as."""

from __future__ import annotations

import time
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import orjson

__all__ = ["KeptResponse", "decode_items", "encode_items"]


@dataclass(frozen=True, slots=True)
class KeptResponse:
    """One answer as kept: ``owner`` is the client's owner id (``""`` without client auth).

    Treat ``input`` and ``output`` as read-only: records are shared between callers."""

    response_id: str
    owner: str
    input: list[Any]
    output: list[Any]
    created_at: float

    @classmethod
    def create(cls, response_id: str, owner: str | None, input: Sequence[Any],
               output: Sequence[Any]) -> KeptResponse:
        """A record made now."""
        return cls(response_id, owner or "", list(input), list(output), time.time())

    def conversation(self) -> list[Any]:
        """Every item of the conversation up to and including this answer."""
        return [*self.input, *self.output]


def encode_items(record: KeptResponse) -> bytes:
    """The stored blob of a record's items (zlib-compressed orjson)."""
    return zlib.compress(orjson.dumps({"input": record.input, "output": record.output}), 1)


def decode_items(blob: bytes) -> tuple[list[Any], list[Any]]:
    """``(input, output)`` from :func:`encode_items` bytes."""
    data = orjson.loads(zlib.decompress(blob))
    return data["input"], data["output"]
