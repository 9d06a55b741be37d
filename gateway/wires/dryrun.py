"""The dry run of every wire: which shape a body is, and what projection would send."""

from __future__ import annotations

from typing import Any

from gateway.errors import ClientError
from gateway.projection import project, project_strict
from gateway.projection.anomalies import Projection
from gateway.wires.anthropic_view import parse_messages, render_messages
from gateway.wires.base import WIRE_KEY
from gateway.wires.chat_validation import validate_chat_body
from gateway.wires.responses_view import parse_input, render_input
from gateway.wires.validation import validate_messages_body, validate_responses_body

WIRES = ("chat", "responses", "anthropic")
_ANTHROPIC_BLOCKS = frozenset({"tool_use", "tool_result", "thinking", "redacted_thinking"})
_CHAT_ROLES = frozenset({"system", "developer", "tool", "function"})


def detect_wire(body: dict[str, Any]) -> str:
    """``responses`` for an ``input`` body, ``anthropic`` for Messages-only shapes (a
    top-level ``system``, Anthropic blocks), else ``chat``."""
    if "input" in body and "messages" not in body:
        return "responses"
    messages = body.get("messages")
    if not isinstance(messages, list):
        return "chat"
    if any(isinstance(m, dict) and m.get("role") in _CHAT_ROLES for m in messages):
        return "chat"
    if "system" in body:
        return "anthropic"
    for message in messages:
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, list) and any(
            isinstance(b, dict) and b.get("type") in _ANTHROPIC_BLOCKS for b in content
        ):
            return "anthropic"
    return "chat"


def choose_wire(asked: str | None, body: dict[str, Any]) -> str:
    """The wire named by ``?wire=`` (checked), else the detected one."""
    if asked:
        if asked not in WIRES:
            raise ClientError(400, f"wire must be one of {', '.join(WIRES)}, got {asked!r}",
                              param="wire")
        return asked
    return detect_wire(body)


def _run(messages: list[Any], strict: bool) -> Projection:
    return project_strict(messages) if strict else project(messages)


def dry_run(body: dict[str, Any], wire: str, strict: bool) -> dict[str, Any]:
    """The projection of a body in its own wire: the history it would send and the
    anomalies (indexes are positions in the neutral chat view)."""
    if wire == "anthropic":
        view = parse_messages(validate_messages_body(body))
        projection = _run(view.messages, strict)
        history: dict[str, Any] = {"messages": render_messages(view, projection.messages)}
    elif wire == "responses":
        rview = parse_input(validate_responses_body(body))
        projection = _run(rview.messages, strict)
        if rview.anomalies:  # items the Responses wire itself refuses twice
            projection = Projection(projection.messages,
                                    (*rview.anomalies, *projection.anomalies))
        history = {"input": render_input(rview, projection.messages, body.get("input"))}
    else:
        projection = _run(validate_chat_body(body), strict)
        history = {"messages": [
            {k: v for k, v in m.items() if k != WIRE_KEY} if isinstance(m, dict) else m
            for m in projection.messages]}
    return {"wire": wire, **history, "repaired": projection.repaired,
            "counts": projection.counts(),
            "anomalies": [a.as_dict() for a in projection.anomalies], "strict": strict}
