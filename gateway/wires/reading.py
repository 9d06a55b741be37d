"""Reading a wire body: checked at the edge, repaired by the wire's own rules where it can
never be valid, then read into the neutral view the exchange rules run on (pure)."""

from __future__ import annotations

from collections import Counter
from typing import Any

from gateway.errors import ClientError
from gateway.projection import project
from gateway.projection.anomalies import Projection
from gateway.wires.anthropic_deferred import DeferredAnthropicView
from gateway.wires.anthropic_plain import Plain, plain_body
from gateway.wires.anthropic_rules import repair_request
from gateway.wires.anthropic_view import AnthropicView, parse_messages
from gateway.wires.base import WireView
from gateway.wires.responses_deferred import DeferredResponsesView
from gateway.wires.responses_plain import PlainInput, plain_input
from gateway.wires.responses_rules import item_type, repair_input
from gateway.wires.responses_view import parse_input
from gateway.wires.shapes import check_messages_blocks, check_responses_items
from gateway.wires.validation import validate_messages_fields, validate_responses_fields


def interleaved_thinking(beta: str | None) -> bool:
    """True when an ``anthropic-beta`` header asks for interleaved thinking."""
    return bool(beta) and "interleaved-thinking" in str(beta)


def read_messages(body: dict[str, Any], *, interleaved: bool = False,
                  ) -> tuple[dict[str, Any], AnthropicView]:
    """A Messages body as repaired up front (the same object when nothing needed it) and
    the neutral view of its history; the up-front repairs are the view's anomalies."""
    repaired, view, _plain = read_plain_messages(body, interleaved=interleaved)
    return repaired, view


def read_plain_messages(body: dict[str, Any], *, interleaved: bool = False,
                        ) -> tuple[dict[str, Any], AnthropicView, Plain | None]:
    """:func:`read_messages`, and what a plain body's later turns are checked against
    (:mod:`gateway.wires.anthropic_plain`; None when it is not plain). A plain body has
    nothing the up-front rules repair: they do not run."""
    validate_messages_fields(body)
    plain = plain_body(body)
    if plain is not None:  # (every plain block has the types the block checks want)
        return body, DeferredAnthropicView(body["messages"]), plain
    check_messages_blocks(body)
    repaired, anomalies = repair_request(body, interleaved=interleaved)
    view = parse_messages(repaired["messages"])
    view.anomalies[:0] = anomalies
    return repaired, view, None


def read_responses(body: dict[str, Any]) -> tuple[dict[str, Any], WireView]:
    """A Responses body as repaired up front (the same object when nothing needed it) and
    the neutral view of its ``input``; the up-front repairs are the view's anomalies."""
    repaired, view, _plain = read_plain_responses(body)
    return repaired, view


def read_plain_responses(body: dict[str, Any],
                         ) -> tuple[dict[str, Any], WireView, PlainInput | None]:
    """:func:`read_responses`, and what a plain input's later turns are checked against
    (:mod:`gateway.wires.responses_plain`; None when it is not plain). A plain input has
    nothing the up-front rules repair: they do not run."""
    items = validate_responses_fields(body)
    plain = plain_input(body) if items is body.get("input") else None
    if plain is not None:  # (every plain item has the types the item checks want)
        return body, DeferredResponsesView(items), plain
    check_responses_items(body)
    repaired, anomalies = repair_input(items, store=body.get("store") is not False)
    view = parse_input(repaired)
    if not anomalies:
        return body, view, None
    view.anomalies[:0] = anomalies
    return {**body, "input": repaired}, view, None


def nothing_left(given: Any, body: dict[str, Any], view: WireView) -> ClientError | None:
    """The refusal of a stateless Responses request whose ``input`` (``given``, as the
    client sent it) held items, none of which can be sent (a lone output whose call was
    trimmed, a lone reasoning item): the provider would only say "empty array", which the
    client never sent. None when something is left (or the history lives upstream)."""
    if not (isinstance(given, list) and given) or body.get("previous_response_id") \
            is not None or body.get("conversation") is not None:
        return None
    items = body.get("input")
    if isinstance(items, list) and any(_has_words(i) for i in items):
        return None  # (projection never drops a message that says something)
    projected = project(view.messages)
    if projected.messages:
        return None
    return ClientError(400, f"Invalid 'input': none of its {len(given)} item(s) can be sent "
                       f"to a model ({_repairs_named(view, projected)}): an output needs "
                       "the call it answers, a reasoning item the item it was made with. "
                       "Send the conversation with at least one message.", param="input",
                       code="invalid_value")


def no_message_left(given: Any, view: WireView) -> ClientError | None:
    """The refusal of a Messages request whose ``messages`` (``given``, as the client sent
    them) held messages, none of which can be sent (a lone result whose call was trimmed,
    only blank turns): the provider would only say "at least one message is required",
    which the client never sent (a ``system`` role message alone: lifted into the top-level
    ``system``, it leaves none). None when something is left."""
    if not (isinstance(given, list) and given) or any(
            _says_something(m) for m in given
            if not (type(m) is dict and m.get("role") in ("system", "developer"))):
        return None  # (projection never drops a message that says something)
    projected = project(view.messages)
    if any(m.get("role") not in ("system", "developer") for m in projected.messages):
        return None
    return ClientError(400, f"messages: none of its {len(given)} message(s) can be sent to "
                       f"a model ({_repairs_named(view, projected)}): a tool_result needs "
                       "the tool_use it answers, blank text says nothing, and a system "
                       "message goes in the top-level system. Send at least one user "
                       "message with content.", param="messages")


def _repairs_named(view: WireView, projected: Projection) -> str:
    """What reading and projecting left out, by kind (``kind=n, ...``)."""
    repairs = Counter(a.kind for a in (*view.anomalies, *projected.anomalies))
    return ", ".join(f"{kind}={n}" for kind, n in repairs.items())


def _says_something(message: Any) -> bool:
    """A Messages message holding non-blank text or a block other than text, tool result
    and thinking (an image, a document, a call)."""
    content = message.get("content") if type(message) is dict else None
    if isinstance(content, str):
        return bool(content.strip())
    return isinstance(content, list) and any(
        type(b) is dict and (b.get("type") not in ("text", "tool_result", "thinking",
                                                   "redacted_thinking")
                             or (b.get("type") == "text" and isinstance(b.get("text"), str)
                                 and bool(b["text"].strip())))
        for b in content)


def _has_words(item: Any) -> bool:
    """A message item whose content is not blank."""
    if item_type(item) != "message":
        return False
    content = item.get("content")
    if isinstance(content, str):
        return bool(content.strip())
    return isinstance(content, list) and any(
        not (type(p) is dict and isinstance(p.get("text"), str) and not p["text"].strip())
        for p in content)
