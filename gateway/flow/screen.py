"""Before a request is prepared: its invisible characters and its repair policy.

The driver calls :func:`screen` first. Invisible characters (``repair.invisible_chars``)
are reported, stripped from the request (the Flow then sends the stripped history), or
the request is refused. Then the repair policy: ``reject`` refuses a history that needs
repair with the list of its violations; ``report`` notes what repair would change, and
the driver sends the history as the client wrote it (:func:`as_sent`).
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any

import orjson

from gateway.flow.flow import ChatRequest, Flow, Refusal
from gateway.projection import project
from gateway.projection.anomalies import Anomaly, Projection
from gateway.projection.invisible import (
    INVISIBLE_CHARS_STRIPPED,
    WIRE_ROOTS,
    MessageScans,
    Scan,
    may_hold,
    scan,
    strip,
)
from gateway.projection.render import IS_ERROR_FIELD, MODEL_NOTE_FIELD, render_reporting
from gateway.providers.splice import client_bytes, exact_integers
from gateway.wires.base import WireView
from gateway.wires.codecs import AnthropicCodec, ResponsesCodec
from gateway.wires.reading import read_messages, read_responses
from gateway.wires.violations import (
    anthropic_violations,
    chat_violations,
    responses_violations,
    summary_line,
    translated_violations,
    wanted,
)

__all__ = ["as_sent_messages", "as_sent_native", "needed_repairs", "screen"]

_INDEX = re.compile(r"^(?:messages|input)\[(\d+)\]")


def wire_of(req: ChatRequest) -> str:
    """The wire whose body the Flow holds: ``anthropic`` or ``responses`` for a native
    codec, else ``chat`` (a translated request holds its Chat Completions translation)."""
    if isinstance(req.wire, AnthropicCodec):
        return "anthropic"
    if isinstance(req.wire, ResponsesCodec):
        return "responses"
    return "chat"


def _target(req: ChatRequest) -> dict[str, Any]:
    """The body a native codec holds (as read, repaired up front)."""
    body: dict[str, Any] = req.wire.body  # type: ignore[union-attr]
    return body


def _stripped(req: ChatRequest, new: dict[str, Any], found: Scan) -> None:
    """Make ``req`` the request with ``new`` (its stripped fields) in place."""
    anomalies = tuple(Anomaly(INVISIBLE_CHARS_STRIPPED, _message_index(f.path))
                      for f in found.findings)
    req.read_anomalies = (*req.read_anomalies, *anomalies)  # (values repaired up front)
    if req.known is not None:  # what was learned while reading is of other messages
        req.known = replace(req.known, clean=False, layouts=None, counted=None)
    codec = req.wire
    if codec is None:
        req.messages = new["messages"]
        req.body = {**req.body, **new}
        return
    view: WireView
    if isinstance(codec, AnthropicCodec):
        # (thinking already where it belongs: re-reading must not move it again)
        body, view = read_messages(new, interleaved=True)
        codec = replace(codec, plain=False)  # (what was plain is the body as sent)
    else:
        body, view = read_responses(new)
    view.anomalies[:0] = [*codec.view.anomalies, *anomalies]
    req.wire = replace(codec, body=body, view=view)  # type: ignore[type-var]
    req.body = body
    if req.messages:  # (a stateful Responses request's history is upstream: none here)
        req.messages = view.messages


def _message_index(path: str) -> int | None:
    found = _INDEX.match(path)
    return int(found.group(1)) if found else None


def _invisible(flow: Flow, mode: str, memo: MessageScans) -> bool:
    """Find (and per ``mode`` strip or refuse) invisible characters. False: refused."""
    req = flow.request
    known = req.known
    if not (known.invisible if known is not None else may_hold(req.raw)):
        return True
    if req.wire is None:  # chat messages: each scanned once over an agent's turns
        new, found = memo.chat(req.messages, req.body.get("tools"), mode == "strip",
                               len(req.raw) // max(1, len(req.messages)))
        if mode == "strip" and found.findings:
            _stripped(req, new, found)
    elif mode == "strip":
        roots = WIRE_ROOTS[wire_of(req)]
        new, found = strip(_target(req), roots)
        if found.findings:
            _stripped(req, new, found)
    else:
        found = scan(_target(req), WIRE_ROOTS[wire_of(req)])
    if not found.findings:
        return True
    flow.invisible = found
    if mode != "reject":
        return True
    first = found.findings[0]
    hidden = found.hidden_text()
    decoded = f"; hidden text: {hidden[0]['text'][:200]!r}" if hidden else ""
    flow.rejected = True
    flow.refusal = Refusal(
        400, f"The request holds {found.total} invisible character"
        f"{'s' if found.total != 1 else ''} (Unicode {', '.join(sorted(found.counts))}) "
        f"and invisible characters are refused for this client: first at {first.path}, "
        f"offset {first.offset}{decoded}. Every one is listed in gateway.violations.",
        code="invisible_characters", param=first.path,
        violations=tuple({"rule": "invisible_characters", **f.as_dict()}
                         for f in found.findings))
    return False


def needed_repairs(req: ChatRequest) -> tuple[tuple[Anomaly, ...], list[dict[str, Any]]]:
    """What repair would change in the request (the anomalies, and the violations as the
    client reads them: rule, position, tool call id, explanation, repair)."""
    messages = req.messages
    if req.known is not None and req.known.clean:
        projection = Projection(messages)
    else:
        projection = project(messages)
    codec = req.wire
    if codec is None:
        found = wanted(projection.anomalies)
        if req.positions is not None:  # translated: the client's own positions
            return tuple(found), translated_violations(found, req.positions,
                                                       req.client_wire == "responses")
        return tuple(found), chat_violations(found)
    _body, finished = codec.upstream_body(projection.messages)
    read = codec.view.anomalies
    if isinstance(codec, AnthropicCodec):
        listed = anthropic_violations(codec.view, read, projection.anomalies, finished)
    else:
        items = codec.body.get("input")  # type: ignore[attr-defined]
        listed = responses_violations(codec.view, items, read, projection.anomalies, finished)
    return tuple(wanted((*read, *projection.anomalies, *finished))), listed


def screen(flow: Flow, memo: MessageScans) -> bool:
    """Invisible characters (``flow.invisible_mode``), then the repair policy, before the
    request is prepared. False when it is refused (``flow.refusal`` says why). ``memo``:
    the chat messages scanned before (an agent's earlier turns)."""
    req = flow.request
    mode = flow.invisible_mode
    if mode != "off" and not _invisible(flow, mode, memo):
        return False
    if req.policy == "repair":
        return True
    found, listed = needed_repairs(req)
    if not found:
        return True
    if req.policy == "report":
        flow.would_repair = found
        return True
    flow.rejected = True
    wire = req.client_wire if req.positions is not None else wire_of(req)
    flow.refusal = Refusal(400, summary_line(listed), code="invalid_history",
                           param="input" if wire == "responses" else "messages",
                           violations=tuple(listed))
    return False


def _render_extensions(messages: list[Any]) -> Projection:
    """The messages with only the gateway's own tool-result extensions (``is_error``,
    ``model_note``) rendered: no provider takes those fields."""
    found: list[Anomaly] = []
    out: list[Any] | None = None
    for index, message in enumerate(messages):
        if type(message) is dict and message.get("role") == "tool" and (
                IS_ERROR_FIELD in message or MODEL_NOTE_FIELD in message):
            if out is None:
                out = list(messages)
            out[index] = render_reporting(index, message, found)
    return Projection(messages if out is None else out, tuple(found))


def as_sent_messages(req: ChatRequest) -> Projection:
    """The ``report`` policy's chat history: as the client wrote it, but for invisible
    characters stripped by their own setting and the gateway's own extensions rendered
    (the projection lists only those)."""
    rendered = _render_extensions(req.messages)
    return Projection(rendered.messages, (*req.read_anomalies, *rendered.anomalies))


def as_sent_native(req: ChatRequest) -> tuple[Projection, dict[str, Any], bytes]:
    """The ``report`` policy's request on a native wire: the client's body with the
    upstream model (its own bytes when the name can be spliced in), invisible characters
    stripped when their setting says so."""
    codec = req.wire
    assert codec is not None
    original = orjson.loads(req.raw)
    stripped = bool(req.read_anomalies)
    if stripped:
        original, _found = strip(original, WIRE_ROOTS[wire_of(req)])
    out = {**original, "model": codec.upstream_model}
    raw = None if stripped else client_bytes(req.raw, original, out, original.get("messages"))
    return (Projection(req.messages, req.read_anomalies), out,
            raw if raw is not None else exact_integers(req.raw, orjson.dumps(out)))
