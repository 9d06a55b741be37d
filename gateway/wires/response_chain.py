"""``previous_response_id`` in the gateway's own terms (pure, no I/O).

A kept response continues as its conversation (input, then output) followed by the new
input items: that is the full input a chat-only upstream is translated from, and what a
Responses upstream that forgot the id is sent again without the id. Also here: knowing a
refusal that says the upstream does not know the id, the gateway's own answer when nobody
knows it, and :class:`CapturedAnswer`, which reads the finished response object out of a
native answer while it is relayed (whole or streamed), so it can be kept.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Any

import orjson

from gateway.errors import ClientError
from gateway.providers.base import UpstreamResponse
from gateway.providers.failure import UpstreamFailure

__all__ = ["PREVIOUS_RESPONSE_EXPANDED", "CapturedAnswer", "expanded_body", "finished",
           "forgot_previous", "previous_not_found", "under_way", "unique_items"]

# The repair reported when a Responses upstream did not know the previous response and the
# request was sent again with the conversation the gateway kept.
PREVIOUS_RESPONSE_EXPANDED = "previous_response_expanded"
_FINAL_EVENTS = (b"response.completed", b"response.incomplete")


def unique_items(items: Sequence[Any]) -> list[Any]:
    """``items`` without the later copies of an item whose ``id`` came before (what the
    upstream was sent: the Responses API refuses an input with two items of one id)."""
    seen: set[str] = set()
    out: list[Any] = []
    for item in items:
        item_id = item.get("id") if type(item) is dict else None
        if isinstance(item_id, str):
            if item_id in seen:
                continue
            seen.add(item_id)
        out.append(item)
    return out


def expanded_body(body: dict[str, Any], items: list[Any]) -> dict[str, Any]:
    """The client's body with the full conversation as ``input`` and no
    ``previous_response_id``."""
    out = {k: v for k, v in body.items() if k != "previous_response_id"}
    out["input"] = items
    return out


def forgot_previous(failure: UpstreamFailure) -> bool:
    """True for a refusal saying the upstream does not know the ``previous_response_id``
    (expired, made under ``store: false``, or by another backend)."""
    if failure.status not in (400, 404):
        return False
    if failure.code == "previous_response_not_found" or failure.param == "previous_response_id":
        return True
    text = failure.message.lower()
    return "previous_response" in text or "previous response" in text


def previous_not_found(response_id: str, *, upstream: bool = False) -> ClientError:
    """The gateway's 400 for a ``previous_response_id`` nobody knows, saying what to send."""
    where = "neither the upstream nor the gateway keeps it" if upstream else (
        "the gateway keeps no response of that id for this client key")
    return ClientError(
        400, f"Previous response with id '{response_id}' not found: {where} (expired, made "
        "with store: false, or by another key). Send the full conversation in 'input' "
        "instead: every earlier item, without previous_response_id.",
        param="previous_response_id", code="previous_response_not_found")


def held_upstream_overflow(param: str, held_id: str) -> ClientError:
    """The gateway's 400 for a request whose history, held upstream (``param``:
    ``previous_response_id`` or ``conversation``, naming ``held_id``), overflowed the model's
    window while the gateway keeps no copy of it to compact: what happened and what to send
    instead."""
    if param == "conversation":
        where, why, anew = (f"conversation '{held_id}'", "the Conversations API keeps it",
                            "conversation")
    else:
        where, why, anew = (f"previous_response_id '{held_id}'", "made with store: false, "
                            "by another key, or expired here", "response chain")
    return ClientError(
        400, f"The conversation continued from {where} is held by the upstream and exceeds "
        f"the model's context window; the gateway keeps no copy of it to compact ({why}). "
        f"Send the conversation in 'input' instead (every earlier item, without {param}) for "
        f"the gateway to compact it, or start a new {anew}.",
        param=param, code="context_length_exceeded")


def finished(response: Any) -> tuple[str, list[Any]] | None:
    """``(id, output items)`` of a finished Responses ``response`` object (completed or
    incomplete), else None (failed, cancelled, in progress, not a response)."""
    if not isinstance(response, dict) or response.get("status") not in ("completed",
                                                                         "incomplete"):
        return None
    response_id, output = response.get("id"), response.get("output")
    if not isinstance(response_id, str) or not response_id or not isinstance(output, list):
        return None
    return response_id, output


def under_way(response: Any) -> str | None:
    """The id of a background Responses ``response`` object still queued or in progress
    (polled later at the upstream that runs it), else None."""
    if not isinstance(response, dict) or response.get("background") is not True \
            or response.get("status") not in ("queued", "in_progress"):
        return None
    response_id = response.get("id")
    return response_id if isinstance(response_id, str) and response_id else None


class CapturedAnswer:
    """A native Responses answer relayed as it comes, whose finished ``response`` object
    is read on the way (``final``: from the ``response.completed`` / ``.incomplete`` event
    of a stream, or the whole JSON body). Chunks pass through unchanged; a stream's chunk
    is read before it is handed on (the relay stops at the wire's terminal event)."""

    def __init__(self, upstream: UpstreamResponse) -> None:
        self._upstream = upstream
        self.status = upstream.status
        self.content_type = upstream.content_type
        self.relay_headers = upstream.relay_headers
        self.final: dict[str, Any] | None = None
        # The response object the stream opened with (a background one that is cut off
        # before it finishes is kept from it, to be polled).
        self.opened: dict[str, Any] | None = None

    async def chunks(self) -> AsyncIterator[bytes]:
        """The upstream's chunks, as they arrive."""
        if not self.content_type.startswith("text/event-stream"):
            parts: list[bytes] = []
            async for chunk in self._upstream.chunks():
                parts.append(chunk)
                yield chunk
            self.read_body(b"".join(parts))
            return
        pending = bytearray()
        async for chunk in self._upstream.chunks():
            pending += chunk
            start = 0
            while (end := pending.find(b"\n\n", start)) >= 0:
                self._read_event(pending[start:end])
                start = end + 2
            del pending[:start]
            yield chunk
        self._read_event(pending)

    def read_body(self, body: bytes) -> None:
        """Read a whole answer's body."""
        try:
            data = orjson.loads(body)
        except orjson.JSONDecodeError:
            return
        if isinstance(data, dict) and data.get("object") == "response":
            self.final = data

    def _read_event(self, block: bytes | bytearray) -> None:
        if self.opened is None and b"response.created" in block:
            self._read_opening(block)
        if not any(name in block for name in _FINAL_EVENTS):
            return
        for line in bytes(block).splitlines():
            if not line.startswith(b"data:"):
                continue
            try:
                data = orjson.loads(line[5:])
            except orjson.JSONDecodeError:
                return
            if isinstance(data, dict) and isinstance(data.get("response"), dict) and \
                    data.get("type") in ("response.completed", "response.incomplete"):
                self.final = data["response"]

    def _read_opening(self, block: bytes | bytearray) -> None:
        for line in bytes(block).splitlines():
            if line.startswith(b"data:"):
                try:
                    data = orjson.loads(line[5:])
                except orjson.JSONDecodeError:
                    return
                if isinstance(data, dict) and data.get("type") == "response.created" \
                        and isinstance(data.get("response"), dict):
                    self.opened = data["response"]
                return

    async def aclose(self) -> None:
        """Release the upstream connection."""
        await self._upstream.aclose()
