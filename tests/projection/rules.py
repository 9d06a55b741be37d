"""Independent checkers of the wire rules projections must establish.

Written from the provider rules, not from the projection code: each returns a list of
human-readable violations (empty when the history obeys the rule).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

Message = dict[str, Any]


def _call_ids(message: Message) -> list[str]:
    tool_calls = message.get("tool_calls")
    if not isinstance(tool_calls, list):
        return []
    return [c["id"] for c in tool_calls if isinstance(c, dict) and isinstance(c.get("id"), str)]


def _is_blank(text: str) -> bool:
    return text.strip() == ""


def texts(message: Message) -> Iterator[str]:
    """Every text string of a message: string content and text parts."""
    content = message.get("content")
    if isinstance(content, str):
        yield content
    elif isinstance(content, list):
        for part in content:
            if isinstance(part, dict) and part.get("type") == "text":
                text = part.get("text")
                if isinstance(text, str):
                    yield text


def user_texts(messages: list[Message]) -> list[str]:
    """The non-blank text strings of all user messages."""
    return [t for m in messages if m.get("role") == "user" for t in texts(m) if not _is_blank(t)]


def pairing_violations(messages: list[Message], *, guard: bool = True) -> list[str]:
    """OpenAI tool-call pairing: each call answered once, right after its message, in order.

    With ``guard``, a history holding no assistant message is not checked (SPEC sizing
    guard: such a slice keeps its tool messages).
    """
    problems: list[str] = []
    if guard and not any(m.get("role") == "assistant" for m in messages):
        return problems
    i = 0
    while i < len(messages):
        message = messages[i]
        role = message.get("role")
        if role == "tool":
            problems.append(f"[{i}] tool message not answering the assistant message before it")
            i += 1
            continue
        i += 1
        if role != "assistant":
            continue
        owed = _call_ids(message)
        answered = []
        while i < len(messages) and messages[i].get("role") == "tool" and len(answered) < len(owed):
            answered.append(messages[i].get("tool_call_id"))
            i += 1
        if sorted(answered, key=str) != sorted(owed, key=str):  # a block, in any order
            problems.append(f"[{i}] calls {owed} answered by {answered}")
    return problems


def _blank_allowed(message: Message) -> bool:
    """A blank string content valid as sent on OpenAI wires: a tool output, or beside an
    assistant's tool calls (refusal, audio, function call)."""
    if not isinstance(message.get("content"), str):
        return False
    if message.get("role") == "tool":
        return True
    payload = ("tool_calls", "function_call", "audio")
    return message.get("role") == "assistant" and (
        any(message.get(f) for f in payload)
        or (isinstance(message.get("refusal"), str) and not _is_blank(message["refusal"])))


def empty_violations(messages: list[Message], *, strict: bool = False) -> list[str]:
    """No blank text anywhere, no message without content (bar a tool-calling assistant).

    Without ``strict``, blank string content that OpenAI accepts stays (``_blank_allowed``).
    """
    problems: list[str] = []
    for i, message in enumerate(messages):
        if not strict and _blank_allowed(message):
            continue
        for text in texts(message):
            if _is_blank(text):
                problems.append(f"[{i}] blank text {text!r}")
        content = message.get("content")
        if content is None or content == []:
            calling = message.get("role") == "assistant" and message.get("tool_calls")
            if not calling:
                problems.append(f"[{i}] {message.get('role')} message without content")
    return problems


def is_plain_user(message: Message) -> bool:
    """A user message with nothing but role and content."""
    return message.get("role") == "user" and set(message) == {"role", "content"}


def adjacent_plain_user_violations(messages: list[Message]) -> list[str]:
    """Two plain user messages in a row."""
    return [
        f"[{i}] plain user message after a plain user message"
        for i in range(1, len(messages))
        if is_plain_user(messages[i]) and is_plain_user(messages[i - 1])
    ]


def project_violations(messages: list[Message]) -> list[str]:
    """Everything project() output must satisfy (adjacent user messages are valid on
    OpenAI-style wires: only strict output alternates)."""
    return pairing_violations(messages, guard=False) + empty_violations(messages)


def strict_violations(messages: list[Message]) -> list[str]:
    """Everything project_strict() output must satisfy."""
    problems = pairing_violations(messages, guard=False) + empty_violations(messages, strict=True)
    problems += adjacent_plain_user_violations(messages)
    first = next((m for m in messages if m.get("role") not in ("system", "developer")), None)
    if first is not None and first.get("role") != "user":
        problems.append(f"first message after the preamble is {first.get('role')}")
    for i in range(1, len(messages)):
        if messages[i].get("role") == "assistant" and messages[i - 1].get("role") == "assistant":
            problems.append(f"[{i}] two assistant messages in a row")
    seen: set[str] = set()
    for i, message in enumerate(messages):
        if message.get("role") != "assistant":
            continue
        for cid in _call_ids(message):
            if cid in seen:
                problems.append(f"[{i}] tool call id {cid!r} used twice")
            seen.add(cid)
    # Anthropic: "final assistant content cannot end with trailing whitespace" (a prefill).
    last = messages[-1] if messages else {}
    content = last.get("content")
    final = content if isinstance(content, str) else (
        content[-1].get("text") if isinstance(content, list) and content
        and isinstance(content[-1], dict) and content[-1].get("type") == "text" else None)
    if (last.get("role") == "assistant" and not last.get("tool_calls")
            and isinstance(final, str) and final != final.rstrip()):
        problems.append("the final assistant message ends in whitespace")
    return problems
