"""Edge checks of the wire bodies: the fields the gateway reads have the types its code
assumes (the typed models of :mod:`gateway.wires.shapes`), each refusal naming the field in
the path style of the wire (``messages.3.content.1`` / ``input[3].content``).

The history's own blocks and items are checked apart (``shapes.check_messages_blocks``,
``shapes.check_responses_items``): a reader calls them unless it proved the history plain
(``anthropic_plain``, ``responses_plain``), whose every block or item already has the
types they check, so they would pass (``tests/fuzz/test_plain_reads.py``)."""

from __future__ import annotations

from typing import Any

from gateway.errors import ClientError
from gateway.wires.shapes import check_messages_fields, check_responses_fields


def validate_messages_fields(body: dict[str, Any]) -> list[dict[str, Any]]:
    """An Anthropic Messages body's ``messages`` (each an object), once every field the
    gateway reads besides the blocks of the messages and of the system prompt has its type
    (a ``system`` turn is accepted: it is lifted into ``system``)."""
    return check_messages_fields(body)


def validate_responses_fields(body: dict[str, Any]) -> list[Any]:
    """A Responses body's ``input`` as an item list (a string is one user message; each
    item an object), once every field the gateway reads besides the items' own has its
    type. A body continuing both a stored response and a conversation is refused as the API
    refuses it: the two name different histories."""
    if body.get("previous_response_id") is not None and body.get("conversation") is not None:
        raise ClientError(400, "Mutually exclusive parameters: Ensure you are only providing "
                          "one of: 'previous_response_id' or 'conversation'.",
                          code="mutually_exclusive_parameters")
    check_responses_fields(body)
    return input_items(body)


def input_items(body: dict[str, Any]) -> list[Any]:
    """The ``input`` of a Responses body already validated (:func:`validate_responses_fields`)
    as an item list, without checking it again: a string is one user message."""
    items = body.get("input")
    if items is None:
        return []
    return [{"role": "user", "content": items}] if isinstance(items, str) else items
