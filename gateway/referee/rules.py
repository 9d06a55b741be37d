"""Wire rules, checked the way the providers check them (independent of the gateway's code).

``rules="openai"`` is what OpenAI itself enforces on Chat Completions: valid roles and
content types, and tool pairing (every tool message answers a call of the nearest preceding
assistant message with ``tool_calls`` and comes before any other message; every call is
answered by the tool messages right after it). ``rules="strict"`` adds what Anthropic,
Bedrock and Gemini enforce: the first non-system message is a user message, no two user or
two assistant messages are adjacent, no empty or whitespace-only text, tool call ids unique
in the whole request, exactly one result per call, no message without content or calls.

Each violation carries its situation letter from ``provider-errors.jsonl``: a (tool result
without a call), b (call without a result), c (result present but not right after its call),
d (empty content), e (roles do not alternate), f (does not start with a user message),
g (duplicate ids), h (unusable image), i (context overflow); "shape" for malformed requests.

Anthropic-style bodies name positions as Anthropic sees them: system messages leave the list
and each run of adjacent tool messages becomes one user message of ``tool_result`` blocks.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from gateway.referee.bodies import Style, render

Rules = Literal["openai", "strict"]
RULE_SETS: tuple[Rules, ...] = ("openai", "strict")

SYSTEM_ROLES = frozenset({"system", "developer"})
_ROLES = ("system", "assistant", "user", "function", "tool", "developer")
_PART_TYPES: dict[str, tuple[str, ...]] = {
    "user": ("text", "image_url", "input_audio", "file"),
    "assistant": ("text", "refusal"),
}
_NAME = re.compile(r"[a-zA-Z0-9_-]+")  # a message name (AutoGen, Semantic Kernel, Flowise)
_PAIRING_SITUATION = {"tool_result_without_call": "a", "duplicate_tool_result": "g"}


@dataclass(frozen=True, slots=True)
class Problem:
    """What is wrong, before it is worded: a template kind and the values it names."""

    kind: str
    situation: str
    index: int | None = None
    values: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Violation:
    """A refused request: its situation letter, HTTP status, message text and body bytes."""

    situation: str
    kind: str
    status: int
    message: str
    body: bytes
    index: int | None = None


def to_violation(problem: Problem, style: Style, request_id: str | None = None) -> Violation:
    """Word a problem in the given provider style."""
    status, message, body = render(problem.kind, style, dict(problem.values), request_id)
    return Violation(problem.situation, problem.kind, status, message, body, problem.index)


def check(
    body: Mapping[str, Any],
    rules: Rules,
    style: Style = "openai",
    *,
    request_id: str | None = None,
) -> Violation | None:
    """The first rule the request body breaks, worded as ``style``'s provider would; or None."""
    problem = find_problem(body, rules)
    return None if problem is None else to_violation(problem, style, request_id)


def find_problem(body: Mapping[str, Any], rules: Rules) -> Problem | None:
    """The first rule the request body breaks, or None. Checks run shape, pairing, strict."""
    model = body.get("model")
    if not isinstance(model, str) or not model:
        return Problem("missing_model", "shape")
    messages = body.get("messages")
    if messages is None:
        return Problem("missing_parameter", "shape", values={"path": "messages"})
    if not isinstance(messages, list):
        return _invalid_type("messages", "an array", messages)
    if not messages:
        return Problem("empty_array", "shape", values={"path": "messages"})
    layout = anthropic_layout([m if isinstance(m, dict) else {} for m in messages])
    for i, message in enumerate(messages):
        problem = _shape(i, message, layout[i][0])
        if problem is not None:
            return problem
    problem = _pairing(messages, layout, strict=rules == "strict")
    if problem is None and rules == "strict":
        problem = _strict_extras(messages, layout)
    return problem


def anthropic_layout(messages: Sequence[Mapping[str, Any]]) -> list[tuple[int, int]]:
    """Per message: (index in Anthropic's message list, block offset inside that message).

    System messages keep their own index (Anthropic moves them to the ``system`` field);
    adjacent tool messages share one index, each at its own block offset.
    """
    layout: list[tuple[int, int]] = []
    position, offset, in_tool_run = -1, 0, False
    for i, message in enumerate(messages):
        role = message.get("role")
        if role in SYSTEM_ROLES:
            layout.append((i, 0))
            continue
        if role == "tool" and in_tool_run:
            offset += 1
        else:
            position, offset = position + 1, 0
        in_tool_run = role == "tool"
        layout.append((position, offset))
    return layout


def json_kind(value: object) -> str:
    """How OpenAI names a JSON value's type in its errors ("an integer", "null", ...)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a decimal"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return "an object"


def _invalid_type(path: str, expected: str, value: object) -> Problem:
    values = {"path": path, "expected": expected, "got": json_kind(value)}
    return Problem("invalid_type", "shape", values=values)


def _missing(path: str, index: int) -> Problem:
    return Problem("missing_parameter", "shape", index, {"path": path})


def _supported(values: Sequence[str]) -> str:
    quoted = [f"'{v}'" for v in values]
    return quoted[0] if len(quoted) == 1 else ", ".join(quoted[:-1]) + ", and " + quoted[-1]


def _shape(i: int, message: object, ai: int) -> Problem | None:
    """OpenAI's request validation of one message: role, content types, required fields."""
    path = f"messages[{i}]"
    if not isinstance(message, dict):
        return _invalid_type(path, "an object", message)
    role = message.get("role")
    if role is None:
        return _missing(f"{path}.role", i)
    if role not in _ROLES:
        values = {"value": role, "path": f"{path}.role", "supported": _supported(_ROLES)}
        return Problem("invalid_value", "shape", i, values)
    content = message.get("content")
    if content is None:
        if role != "assistant":
            return Problem("null_content", "d", i, {"i": i, "ai": ai})
    elif isinstance(content, list):
        if not content:
            return Problem("empty_array", "d", i, {"path": f"{path}.content"})
        problem = _parts_shape(i, role, content)
        if problem is not None:
            return problem
    elif not isinstance(content, str):
        return _invalid_type(f"{path}.content", "one of a string or array of objects", content)
    name = message.get("name")
    if isinstance(name, str) and role != "tool" and not _NAME.fullmatch(name):
        return Problem("name_pattern", "shape", i, {"path": f"{path}.name"})
    if role == "tool" and not isinstance(message.get("tool_call_id"), str):
        return _missing(f"{path}.tool_call_id", i)
    if role == "assistant" and message.get("tool_calls") is not None:
        return _tool_calls_shape(i, message["tool_calls"])
    return None


def _parts_shape(i: int, role: str, parts: list[Any]) -> Problem | None:
    allowed = _PART_TYPES.get(role, ("text",))
    for k, part in enumerate(parts):
        path = f"messages[{i}].content[{k}]"
        if not isinstance(part, dict):
            return _invalid_type(path, "an object", part)
        kind = part.get("type")
        if kind is None:
            return _missing(f"{path}.type", i)
        if kind == "image_url" and role == "tool":
            return Problem("image_not_user", "shape", i, {"i": i, "role": role})
        if kind not in allowed:
            values = {"value": kind, "path": f"{path}.type", "supported": _supported(allowed)}
            return Problem("invalid_value", "shape", i, values)
        if kind == "text" and not isinstance(part.get("text"), str):
            return _missing(f"{path}.text", i)
        if kind == "refusal" and not isinstance(part.get("refusal"), str):
            return _missing(f"{path}.refusal", i)
        if kind == "image_url":
            image = part.get("image_url")
            if not isinstance(image, dict) or not isinstance(image.get("url"), str):
                return _missing(f"{path}.image_url.url", i)
    return None


def _tool_calls_shape(i: int, calls: object) -> Problem | None:
    path = f"messages[{i}].tool_calls"
    if not isinstance(calls, list):
        return _invalid_type(path, "an array", calls)
    if not calls:
        return Problem("empty_array", "shape", i, {"path": path})
    for k, call in enumerate(calls):
        where = f"{path}[{k}]"
        if not isinstance(call, dict):
            return _invalid_type(where, "an object", call)
        for key in ("id", "type"):
            if not isinstance(call.get(key), str):
                return _missing(f"{where}.{key}", i)
        function = call.get("function")
        if not isinstance(function, dict):
            return _missing(f"{where}.function", i)
        for key in ("name", "arguments"):
            if not isinstance(function.get(key), str):
                return _missing(f"{where}.function.{key}", i)
    return None


def _call_ids(message: Mapping[str, Any]) -> list[str]:
    calls = message.get("tool_calls") if message.get("role") == "assistant" else None
    return [call["id"] for call in calls] if calls else []


def _text_blocks(content: object) -> int:
    """How many text blocks precede the tool_use blocks of an assistant message."""
    if isinstance(content, str):
        return 1 if content else 0
    if isinstance(content, list):
        return sum(1 for part in content if part.get("type") == "text" and part.get("text"))
    return 0


def _pairing(
    messages: list[dict[str, Any]], layout: list[tuple[int, int]], *, strict: bool
) -> Problem | None:
    """Tool pairing: OpenAI's rules, plus strict's unique call ids and single results."""
    block: dict[str, int | None] = {}  # call id -> index of the tool message answering it
    block_at = -1
    seen: set[str] = set()
    for i, message in enumerate(messages):
        role = message["role"]
        if role == "tool":
            call_id = message["tool_call_id"]
            ai, ci = layout[i]
            values = {"i": i, "ai": ai, "ci": ci, "id": call_id}
            if call_id not in block:
                return Problem("tool_result_without_call", "a", i, values)
            first = block[call_id]
            if first is not None:
                if strict:
                    return Problem("duplicate_tool_result", "g", i, {**values, "first": first})
                continue
            block[call_id] = i
            continue
        if block_at >= 0:
            problem = _unanswered(messages, layout, block, block_at, i)
            if problem is not None:
                return problem
            block, block_at = {}, -1
        ids = _call_ids(message)
        if not ids:
            continue
        for k, call_id in enumerate(ids):
            if strict and call_id in seen:
                ai = layout[i][0]
                values = {"ai": ai, "ci": _text_blocks(message.get("content")) + k}
                return Problem("duplicate_tool_call_id", "g", i, values)
            seen.add(call_id)
        block = dict.fromkeys(ids)
        block_at = i
    if block_at >= 0:
        return _unanswered(messages, layout, block, block_at, None)
    return None


def _unanswered(
    messages: list[dict[str, Any]],
    layout: list[tuple[int, int]],
    block: dict[str, int | None],
    block_at: int,
    at: int | None,
) -> Problem | None:
    """Calls of the block at ``block_at`` still unanswered when message ``at`` (or the end)
    arrives. Situation c when the missing results exist further on, else b."""
    missing = [call_id for call_id, answer in block.items() if answer is None]
    if not missing:
        return None
    later = {m.get("tool_call_id") for m in messages[block_at:] if m["role"] == "tool"}
    situation = "c" if any(call_id in later for call_id in missing) else "b"
    values = {
        "ids": ", ".join(missing),
        "param": "messages" if at is None else f"messages.[{at}].role",
        "ai": layout[block_at][0],
    }
    return Problem("tool_call_without_result", situation, block_at if at is None else at, values)


_BLANK = re.compile(r"\s*")


def _strict_extras(
    messages: list[dict[str, Any]], layout: list[tuple[int, int]]
) -> Problem | None:
    """Anthropic/Bedrock/Gemini rules, in message order: start, emptiness, alternation."""
    first_turn = next((i for i, m in enumerate(messages) if m["role"] not in SYSTEM_ROLES), None)
    if first_turn is None:
        return Problem("first_not_user", "f")
    for i, message in enumerate(messages):
        role = message["role"]
        if i == first_turn and role != "user":
            return Problem("first_not_user", "f", i)
        problem = _emptiness(i, message, layout[i][0])
        if problem is not None:
            return problem
        if i > 0 and role in ("user", "assistant") and messages[i - 1]["role"] == role:
            return Problem("consecutive_roles", "e", i, {"role": role})
    return None


def _emptiness(i: int, message: Mapping[str, Any], ai: int) -> Problem | None:
    content = message.get("content")
    has_calls = bool(_call_ids(message))
    if content is None:  # (an empty list was refused by the shape rules already)
        return None if has_calls else Problem("empty_message", "d", i, {"ai": ai})
    texts = [content] if isinstance(content, str) else [
        part["text"] for part in content if part.get("type") == "text"
    ]
    for text in texts:
        if text == "":
            if isinstance(content, str) and not has_calls and message["role"] != "tool":
                return Problem("empty_message", "d", i, {"ai": ai})
            return Problem("empty_text", "d", i)
        if _BLANK.fullmatch(text):
            return Problem("whitespace_text", "d", i)
    return None
