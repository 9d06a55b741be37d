"""Responses API ``input`` items <-> the neutral chat view (pure, no I/O).

Into the view: a ``message`` item (typed or the easy ``{"role", "content"}`` form) becomes
a chat message whose ``input_text`` / ``output_text`` parts become text parts; a run of
call items (``function_call``, ``custom_tool_call``, the built-in calls answered by an
output item of their own: ``responses_rules.CALL_OUTPUTS``) becomes one assistant message
with tool calls, with the text of an assistant ``message`` item among them (one model
turn: its outputs after the message still answer its calls); an output item becomes a tool
message. Every other item (``reasoning``,
``compaction``, ``item_reference``, types this gateway does not know) becomes an opaque
message of role :data:`OPAQUE_ROLE` that the projection leaves where it is; so does an
output answering no call of the input when the input holds an ``item_reference`` (it may
answer the stored call the reference stands for), and an assistant message without words
right after a reasoning item (the reasoning's required following item: agents replay a
reasoning-only turn so; dropped as empty, it would leave the reasoning refused).

Back to the wire: untouched messages are written as their items came; changed ones are
rebuilt from their items (text parts mapped back to the original part objects), new ones
are written as new items (a synthesized output of the call's own kind, in that kind's
shape: ``responses_rules.output_item``; a user message).
"""

from __future__ import annotations

from typing import Any

import orjson

from gateway.projection.exchanges import OPAQUE_ROLE
from gateway.wires.base import WIRE_KEY, WireView
from gateway.wires.responses_rules import CALL_OUTPUTS, OUTPUT_CALLS, item_type, output_item

_TEXT_PARTS = ("input_text", "output_text")
_NAMED_CALLS = ("function_call", "custom_tool_call")  # the calls that carry their name
_MESSAGE_ROLES = ("user", "assistant", "system", "developer")


def parse_input(items: list[Any]) -> WireView:
    """The neutral view of a Responses ``input`` item list."""
    view = WireView()
    # An item_reference may stand for a call the provider stored: an output no call of the
    # input made may answer it, so it stays where it is (a refusal says when it does not).
    referenced = any(item.__class__ is dict and item.get("type") == "item_reference"
                     for item in items)
    _parse_into(view, items, 0, referenced)
    return view


def extend_input(view: WireView, cut: int, items: list[Any]) -> WireView:
    """The view of ``items``, whose first ``cut`` are all those ``view`` was read from (the
    same objects, the last of them a message or an output: no run of calls open), and none
    of them an ``item_reference``. ``view`` is left as it is; the new view shares its
    neutral messages (nothing changes a view's messages in place)."""
    out = WireView(list(view.messages), list(view.sources), dict(view.calls), dict(view.parts))
    _parse_into(out, items, cut, False)
    return out


def _parse_into(view: WireView, items: list[Any], start: int, referenced: bool) -> None:
    run: list[Any] = []
    calls: list[dict[str, Any]] = []
    said: Any = None  # an assistant message item inside the run of calls
    made: set[Any] = set()  # the call ids of the input's call items so far

    def flush() -> None:
        nonlocal run, calls, said
        if run:
            content = _content_in(view, said.get("content")) if said is not None else None
            view.add({"role": "assistant", "content": content, "tool_calls": calls}, run)
            run, calls, said = [], [], None

    out, sources = view.messages, view.sources
    for n in range(start, len(items)):
        item = items[n]
        # (``item_type`` inlined: this loop reads every item of a body never seen)
        kind = item.get("type") if item.__class__ is dict else "?"
        if kind is None:
            kind = "message" if item.get("role") in _MESSAGE_ROLES else "?"
        elif kind.__class__ is not str:
            kind = "?"
        if kind in CALL_OUTPUTS:
            made.add(item.get("call_id"))
            arguments = item.get("arguments", item.get("input", ""))
            name = item.get("name")
            if kind not in _NAMED_CALLS and not name:
                # a built-in tool's call (shell, apply_patch, computer): named by its tool,
                # its action as the arguments (a chat model sees what was run)
                name = kind.removesuffix("_call")
                action = item.get("action", item.get("operation"))
                arguments = orjson.dumps(action).decode() if action is not None else ""
            call = {"id": item.get("call_id"), "type": "function",
                    "function": {"name": name,
                                 "arguments": arguments if isinstance(arguments, str) else ""}}
            view.calls[id(call)] = item
            run.append(item)
            calls.append(call)
            continue
        if kind == "message" and run and said is None and item.get("role") == "assistant":
            said = item
            run.append(item)
            continue
        if run:
            flush()
        if kind == "message" and n and items[n - 1].__class__ is dict \
                and items[n - 1].get("type") == "reasoning" and _blank_answer(item):
            # the reasoning's required following item ("provided without its required
            # following item"), as agents write a reasoning-only turn: it stays with it
            message: dict[str, Any] = {"role": OPAQUE_ROLE}
        elif kind == "message":
            role = item.get("role")
            content = item.get("content")
            if content.__class__ is list:
                content = _content_in(view, content)
            message = {"role": role if role in _MESSAGE_ROLES else "user", "content": content}
        elif kind in OUTPUT_CALLS and not (referenced and item.get("call_id") not in made):
            # (an apply_patch result may leave its output out: nothing to say, as sent)
            message = {"role": "tool", "tool_call_id": item.get("call_id"),
                       "content": item.get("output", "" if kind == "apply_patch_call_output"
                                           else None)}
        else:
            message = {"role": OPAQUE_ROLE}
        message[WIRE_KEY] = len(out)  # (``WireView.add`` inlined)
        out.append(message)
        sources.append([item])
    flush()


def _blank_answer(item: dict[str, Any]) -> bool:
    """An assistant message item without words: ``""`` or only blank ``output_text``."""
    if item.get("role") != "assistant":
        return False
    content = item.get("content")
    if isinstance(content, str):
        return not content.strip()
    return isinstance(content, list) and bool(content) and all(
        type(p) is dict and p.get("type") == "output_text" and isinstance(p.get("text"), str)
        and not p["text"].strip() for p in content)


def _content_in(view: WireView, content: Any) -> Any:
    if not isinstance(content, list):
        return content
    parts: list[Any] = []
    for part in content:
        if type(part) is dict and part.get("type") in _TEXT_PARTS:
            text_part = {"type": "text", "text": part.get("text")}
            view.parts[id(text_part)] = part
            parts.append(text_part)
        else:
            parts.append(part)
    return parts


def render_input(view: WireView, projected: list[Any], original: Any) -> Any:
    """The Responses ``input`` for a projected neutral history (``original``, the input as
    sent, when nothing changed)."""
    if view.unchanged(projected):
        return original
    out: list[Any] = []
    made: dict[Any, str] = {}  # call id -> the output type of the nearest call before
    for message in projected:
        items = _items(view, message, made)
        turn: dict[Any, str] = {}
        for item in items:
            if item_type(item) in CALL_OUTPUTS:
                turn.setdefault(item.get("call_id"), CALL_OUTPUTS[item_type(item)])
        made.update(turn)
        out.extend(items)
    return out


def _items(view: WireView, message: Any, made: dict[Any, str]) -> list[Any]:
    k, untouched = view.origin(message)
    if untouched and k is not None:
        return list(view.sources[k])
    role = message.get("role")
    source = view.sources[k][0] if k is not None else None
    if role == "assistant" and k is not None:  # the message item of a run of calls
        source = next((s for s in view.sources[k] if item_type(s) == "message"), source)
    if role == "tool":
        if source is not None:
            return [{**source, "output": message.get("content")}]
        call_id = message.get("tool_call_id")
        kind = made.get(call_id) or _output_type(view, call_id)
        return [output_item(kind, call_id, message.get("content"))]
    if role == OPAQUE_ROLE:
        return [source] if source is not None else []
    out: list[Any] = []
    item: Any
    content = message.get("content")
    calls = message.get("tool_calls") or []
    if content is not None and content != []:
        wire_content = _content_out(view, content, role)
        if source is not None and item_type(source) == "message":
            item = {key: v for key, v in source.items() if key not in ("content", WIRE_KEY)}
            item["content"] = wire_content
        else:
            item = {"type": "message", "role": role, "content": wire_content}
        out.append(item)
    for call in calls:
        item = view.calls.get(id(call))
        if item is None:
            function = call.get("function") or {}
            item = {"type": "function_call", "call_id": call.get("id"),
                    "name": function.get("name"), "arguments": function.get("arguments", "")}
        out.append(item)
    return out


def _output_type(view: WireView, call_id: Any) -> str:
    """The output item type that answers the call ``call_id`` (``function_call_output``,
    ``custom_tool_call_output``, ...)."""
    for item in view.calls.values():
        if type(item) is dict and item.get("call_id") == call_id:
            return CALL_OUTPUTS.get(item_type(item), "function_call_output")
    return "function_call_output"


def _content_out(view: WireView, content: Any, role: Any) -> Any:
    if not isinstance(content, list):
        return content
    kind = "output_text" if role == "assistant" else "input_text"
    parts: list[Any] = []
    for part in content:
        original = view.parts.get(id(part))
        if original is not None:
            parts.append(original)
        elif type(part) is dict and part.get("type") == "text":
            parts.append({"type": kind, "text": part.get("text")})
        else:
            parts.append(part)
    return parts
