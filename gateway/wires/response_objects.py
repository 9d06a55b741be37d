"""The Responses API's stored-response resource in the gateway's terms (pure, no I/O):
what ``GET /v1/responses/{id}``, its ``/input_items``, ``DELETE`` and ``/cancel`` answer
from a response the gateway kept, and their refusals in OpenAI's words.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from gateway.errors import ClientError
from gateway.sessions.response_records import KeptResponse

__all__ = ["MAX_ITEMS", "deleted", "input_items_page", "not_cancellable", "not_found",
           "retrieved", "shown_id"]

MAX_ITEMS = 100  # the API's bound on ``limit``
_DEFAULT_ITEMS = 20
# What a response id looks like (``resp_`` and letters, digits, ``_`` or ``-``): anything
# else is not repeated in a refusal (a client may paste a key where the id goes).
_RESPONSE_ID = re.compile(r"resp_[A-Za-z0-9_-]{1,200}")
_ROLES_OUT = frozenset({"assistant"})


def shown_id(response_id: str) -> str:
    """The id as a refusal may quote it: itself when it looks like a response id."""
    return response_id if _RESPONSE_ID.fullmatch(response_id) else "(not a response id)"


def not_found(response_id: str) -> ClientError:
    """The ``404`` for a response this client has none of (never kept, expired, deleted, or
    another key's: the same answer, so ids cannot be probed)."""
    return ClientError(404, f"Response with id '{shown_id(response_id)}' not found.",
                       type="invalid_request_error")  # (the API's own type for it)


def not_cancellable(response_id: str) -> ClientError:
    """The ``400`` for cancelling a response that is not a background one under way."""
    return ClientError(400, f"Cannot cancel response '{shown_id(response_id)}': only a "
                       "response created with background: true can be cancelled, while it "
                       "is queued or in progress.", param="response_id")


def retrieved(record: KeptResponse) -> dict[str, Any]:
    """The response object of a kept answer, as creating it answered (a record kept
    without its object: the id, status and output)."""
    if record.response is not None:
        return {**record.response, "output": record.output}
    return {"id": record.response_id, "object": "response", "created_at": int(
        record.created_at), "status": "completed", "output": record.output}


def deleted(response_id: str) -> dict[str, Any]:
    """The answer to deleting a response."""
    return {"id": response_id, "object": "response", "deleted": True}


def input_items_page(record: KeptResponse, query: Mapping[str, str]) -> dict[str, Any]:
    """One page of the kept response's input items (``limit``, ``order`` ``asc`` or
    ``desc``, ``after`` an item id), as the API lists them: every item a typed one with an
    id (an item sent without one is named by its position, ``item_<n>``)."""
    limit = _limit(query.get("limit"))
    order = query.get("order", "desc")
    if order not in ("asc", "desc"):
        raise ClientError(400, f"Invalid value: '{order[:40]}'. Supported values are: 'asc' "
                          "and 'desc'.", param="order", code="invalid_value")
    items = [_listed(item, n) for n, item in enumerate(record.input)]
    if order == "desc":
        items.reverse()
    after = query.get("after")
    if after is not None:
        at = next((i for i, item in enumerate(items) if item.get("id") == after), None)
        if at is None:
            raise ClientError(400, "Invalid 'after': no input item of this response has "
                              "that id.", param="after", code="invalid_value")
        items = items[at + 1:]
    page = items[:limit]
    return {"object": "list", "data": page,
            "first_id": page[0]["id"] if page else None,
            "last_id": page[-1]["id"] if page else None,
            "has_more": len(items) > limit}


def _limit(given: str | None) -> int:
    if given is None:
        return _DEFAULT_ITEMS
    try:
        limit = int(given)
    except ValueError:
        limit = 0
    if not 1 <= limit <= MAX_ITEMS:
        raise ClientError(400, f"Invalid 'limit': expected an integer between 1 and "
                          f"{MAX_ITEMS}.", param="limit", code="invalid_value")
    return limit


def _listed(item: Any, n: int) -> dict[str, Any]:
    """An input item as listed: typed (a bare ``{role, content}`` is a message, text content
    a list of one text part) and with an id."""
    if not isinstance(item, dict):
        return {"type": "message", "id": f"item_{n}", "role": "user",
                "content": [{"type": "input_text", "text": str(item)}]}
    out = dict(item)
    if "type" not in out and "role" in out:
        out["type"] = "message"
    if out.get("type") == "message" and isinstance(out.get("content"), str):
        kind = "output_text" if out.get("role") in _ROLES_OUT else "input_text"
        out["content"] = [{"type": kind, "text": out["content"]}]
    if not isinstance(out.get("id"), str) or not out["id"]:
        out["id"] = f"item_{n}"
    return out
