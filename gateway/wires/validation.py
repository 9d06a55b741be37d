"""Edge checks of the wire bodies: the fields the gateway reads have the types its code
assumes (the typed models of :mod:`gateway.wires.shapes`), each refusal naming the field in
the path style of the wire (``messages.3.content.1`` / ``input[3].content``)."""

from __future__ import annotations

from typing import Any

from gateway.errors import ClientError
from gateway.wires.shapes import (
    check_messages_body,
    check_responses_fields,
    check_responses_items,
)


def validate_messages_body(body: dict[str, Any]) -> list[dict[str, Any]]:
    """An Anthropic Messages body's ``messages``, once every field the gateway reads has its
    type (a ``system`` turn is accepted: it is lifted into ``system``)."""
    return check_messages_body(body)


def validate_responses_body(body: dict[str, Any]) -> list[Any]:
    """A Responses body's ``input`` as an item list (a string is one user message), once
    every field the gateway reads has its type (an empty or missing ``call_id`` is
    accepted: it is repaired). A body continuing both a stored response and a conversation
    is refused as the API refuses it: the two name different histories."""
    items = validate_responses_fields(body)
    check_responses_items(body)
    return items


def validate_responses_fields(body: dict[str, Any]) -> list[Any]:
    """:func:`validate_responses_body` but for the items' own fields: the caller checks
    them (``check_responses_items``) unless it proved them in their common shapes another
    way (``responses_plain``, whose every plain item has the types checked there)."""
    if body.get("previous_response_id") is not None and body.get("conversation") is not None:
        raise ClientError(400, "Mutually exclusive parameters: Ensure you are only providing "
                          "one of: 'previous_response_id' or 'conversation'.",
                          code="mutually_exclusive_parameters")
    check_responses_fields(body)
    return input_items(body)


def input_items(body: dict[str, Any]) -> list[Any]:
    """The ``input`` of a Responses body already validated (:func:`validate_responses_body`)
    as an item list, without checking it again: a string is one user message."""
    items = body.get("input")
    if items is None:
        return []
    return [{"role": "user", "content": items}] if isinstance(items, str) else items
