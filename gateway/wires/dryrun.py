"""The dry run of every wire: which shape a body is, and what projection would send."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from gateway.errors import ClientError
from gateway.projection import project, project_strict
from gateway.projection.anomalies import Anomaly, Projection
from gateway.projection.invisible import WIRE_ROOTS, scan
from gateway.wires.base import WIRE_KEY
from gateway.wires.chat_validation import validate_chat_body
from gateway.wires.codecs import anthropic_body, responses_body
from gateway.wires.reading import read_messages, read_responses
from gateway.wires.violations import (
    anthropic_violations,
    chat_violations,
    responses_violations,
)

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
    # Any shape may come here (the wire's own validation follows): only strings are looked up.
    if any(isinstance(m, dict) and _named(m.get("role"), _CHAT_ROLES) for m in messages):
        return "chat"
    if "system" in body:
        return "anthropic"
    for message in messages:
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, list) and any(
            isinstance(b, dict) and _named(b.get("type"), _ANTHROPIC_BLOCKS) for b in content
        ):
            return "anthropic"
    return "chat"


def _named(value: Any, names: frozenset[str]) -> bool:
    return isinstance(value, str) and value in names


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
    anomalies (indexes are positions in the neutral chat view; the wire's own repairs
    count their items or messages), the violations as the ``reject`` policy lists them
    (wire positions), and the invisible characters the model would read. ``strict``
    shows the strict rung, with every wire rule that a refusal could call for."""
    refusal = _ANY_REFUSAL if strict else None
    if wire == "anthropic":
        repaired, view = read_messages(body)
        exchange = _run(view.messages, strict)
        sent, finished = anthropic_body(repaired, view, exchange.messages, refusal)
        violations = anthropic_violations(view, view.anomalies, exchange.anomalies, finished)
        projection = _with(_with(exchange, view.anomalies), finished)
        history: dict[str, Any] = {"messages": sent["messages"]}
        for field in ("system", "tools", "tool_choice", "thinking"):
            if field in sent or field in body:
                history[field] = sent.get(field)
    elif wire == "responses":
        repaired, rview = read_responses(body)
        exchange = _run(rview.messages, strict)
        sent, finished = responses_body(repaired, rview, exchange.messages, refusal)
        violations = responses_violations(rview, repaired.get("input"), rview.anomalies,
                                          exchange.anomalies, finished)
        projection = _with(_with(exchange, rview.anomalies), finished)
        history = {"input": sent.get("input")}
    else:
        projection = _run(validate_chat_body(body), strict)
        violations = chat_violations(projection.anomalies)
        history = {"messages": [
            {k: v for k, v in m.items() if k != WIRE_KEY} if isinstance(m, dict) else m
            for m in projection.messages]}
    invisible = scan(body, WIRE_ROOTS[wire])
    return {"wire": wire, **history, "repaired": projection.repaired,
            "counts": projection.counts(),
            "anomalies": [a.as_dict() for a in projection.anomalies], "strict": strict,
            "violations": violations,
            "invisible": {"total": invisible.total, "counts": invisible.counts,
                          "findings": [f.as_dict() for f in invisible.findings],
                          "hidden_text": invisible.hidden_text()}}


def _with(projection: Projection, anomalies: Sequence[Anomaly]) -> Projection:
    if not anomalies:
        return projection
    return Projection(projection.messages, (*anomalies, *projection.anomalies))


# What the strict rung of the dry run reads as the provider's refusal: every wire rule that
# a refusal can call for (thinking it will not verify, encrypted or reasoning items it
# cannot resolve, a prefill it will not continue).
_ANY_REFUSAL = "thinking signature | encrypted reasoning | assistant prefill"
