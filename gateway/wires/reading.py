"""Reading a wire body: checked at the edge, repaired by the wire's own rules where it can
never be valid, then read into the neutral view the exchange rules run on (pure)."""

from __future__ import annotations

from typing import Any

from gateway.wires.anthropic_rules import repair_request
from gateway.wires.anthropic_view import AnthropicView, parse_messages
from gateway.wires.base import WireView
from gateway.wires.responses_rules import repair_input
from gateway.wires.responses_view import parse_input
from gateway.wires.validation import validate_messages_body, validate_responses_body


def interleaved_thinking(beta: str | None) -> bool:
    """True when an ``anthropic-beta`` header asks for interleaved thinking."""
    return bool(beta) and "interleaved-thinking" in str(beta)


def read_messages(body: dict[str, Any], *, interleaved: bool = False,
                  ) -> tuple[dict[str, Any], AnthropicView]:
    """A Messages body as repaired up front (the same object when nothing needed it) and
    the neutral view of its history; the up-front repairs are the view's anomalies."""
    validate_messages_body(body)
    repaired, anomalies = repair_request(body, interleaved=interleaved)
    view = parse_messages(repaired["messages"])
    view.anomalies[:0] = anomalies
    return repaired, view


def read_responses(body: dict[str, Any]) -> tuple[dict[str, Any], WireView]:
    """A Responses body as repaired up front (the same object when nothing needed it) and
    the neutral view of its ``input``; the up-front repairs are the view's anomalies."""
    items = validate_responses_body(body)
    repaired, anomalies = repair_input(items, store=body.get("store") is not False)
    view = parse_input(repaired)
    if not anomalies:
        return body, view
    view.anomalies[:0] = anomalies
    return {**body, "input": repaired}, view
