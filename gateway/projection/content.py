"""Content helpers shared by the projection passes: blank text, part cleanup, joining.

OpenAI message ``content`` is a string, None, or a list of parts (``{"type": "text",
"text": ...}``, ``image_url``, ``input_audio``, ``file``, ...). Anything else is left alone.
"""

from __future__ import annotations

from typing import Any

Message = dict[str, Any]

# Assistant fields that carry a turn on their own, without content or tool calls.
_ASSISTANT_PAYLOAD_FIELDS = ("function_call", "audio")


def is_blank(text: str) -> bool:
    """True for an empty or whitespace-only string (``isspace`` stops at the first non-space)."""
    return not text or text.isspace()


def is_blank_text_part(part: Any) -> bool:
    """True for a ``{"type": "text"}`` part whose text is an empty/whitespace-only string."""
    if type(part) is not dict or part.get("type") != "text":
        return False
    text = part.get("text")
    return isinstance(text, str) and is_blank(text)


def parts_are_clean(parts: list[Any]) -> bool:
    """True when a part list is non-empty and holds no blank text part.

    The fast path's version of :func:`is_blank_text_part` over a list, inlined: it runs for
    every list-content message of every request.
    """
    if not parts:
        return False
    for part in parts:
        if type(part) is dict and part.get("type") == "text":
            text = part.get("text")
            if isinstance(text, str) and (not text or text.isspace()):
                return False
    return True


def strip_blank_parts(parts: list[Any]) -> list[Any] | None:
    """A new list without blank text parts, or None when there is nothing to remove."""
    if not any(is_blank_text_part(p) for p in parts):
        return None
    return [p for p in parts if not is_blank_text_part(p)]


def text_part(text: str) -> dict[str, Any]:
    """A ``{"type": "text"}`` content part."""
    return {"type": "text", "text": text}


def is_joinable(content: Any) -> bool:
    """True for the content shapes :func:`join_contents` understands (str, list, None)."""
    return content is None or isinstance(content, str | list)


def join_contents(first: Any, second: Any) -> Any:
    """Join two contents: strings with a blank line between, otherwise as parts in order.

    None stands for "no content" and yields the other side unchanged.
    """
    if first is None:
        return second
    if second is None:
        return first
    if isinstance(first, str) and isinstance(second, str):
        return f"{first}\n\n{second}"
    return _as_parts(first) + _as_parts(second)


def _as_parts(content: str | list[Any]) -> list[Any]:
    return [text_part(content)] if isinstance(content, str) else list(content)


def has_empty_tool_calls(message: Message) -> bool:
    """True for an assistant message carrying ``tool_calls: []``."""
    calls = message.get("tool_calls")
    return calls.__class__ is list and not calls


def assistant_has_payload(message: Message) -> bool:
    """True when an assistant message says something besides its content.

    Tool calls (a non-empty list), a legacy ``function_call``, an ``audio`` reference or a
    non-blank ``refusal`` make the message meaningful even with no content.
    """
    calls = message.get("tool_calls")
    if isinstance(calls, list) and calls:
        return True
    if any(message.get(f) is not None for f in _ASSISTANT_PAYLOAD_FIELDS):
        return True
    refusal = message.get("refusal")
    return isinstance(refusal, str) and not is_blank(refusal)


_CLEANED_ROLES = ("user", "assistant", "system", "developer")


def clean_message(message: Any, *, strict: bool = False) -> Any:
    """Remove blank text from a non-tool message.

    Returns the message itself when nothing needs fixing, a new dict when blank text parts
    were removed (or, with ``strict``, an assistant's blank content became None), or None
    when the message is left with nothing to say and must be dropped. Tool messages,
    unknown roles and unknown content shapes are returned untouched (tool results are
    handled by rendering).

    An assistant message that carries tool calls (or a refusal, audio, a function call)
    with ``content: ""`` or ``null`` is valid on OpenAI-style wires and what many clients
    send: it stays exactly as sent unless ``strict`` (a provider refused the request as
    structurally invalid), where blank content becomes None.
    """
    if type(message) is not dict:
        return message
    role = message.get("role")
    if role not in _CLEANED_ROLES:  # tuple membership: safe for unhashable roles
        return message
    if role == "assistant" and has_empty_tool_calls(message):
        # `tool_calls: []` (SDKs that default the field) is refused by OpenAI ("empty
        # array"): an empty list of calls says nothing, so it goes like blank text.
        return clean_message({k: v for k, v in message.items() if k != "tool_calls"},
                             strict=strict)
    content = message.get("content")
    if isinstance(content, str):
        if not is_blank(content):
            return message
        if not strict and role == "assistant" and assistant_has_payload(message):
            return message
    elif isinstance(content, list):
        stripped = strip_blank_parts(content)
        if stripped is None and content:
            return message
        if stripped:
            return {**message, "content": stripped}
    elif content is not None:
        return message  # a shape we do not understand: leave it
    # No content left.
    if role == "assistant" and assistant_has_payload(message):
        if content is None:
            return message
        return {**message, "content": None}
    return None


def merge_assistant_messages(first: Message, second: Message) -> Message:
    """Merge two assistant messages: text joined, tool calls concatenated in order.

    Non-blank ``reasoning_content`` is joined too; any other field takes the second's value.
    """
    merged = {**first, **second}
    if "content" in first or "content" in second:
        merged["content"] = join_contents(first.get("content"), second.get("content"))
    calls: list[Any] = []
    reasoning: list[str] = []
    for m in (first, second):
        if isinstance(tool_calls := m.get("tool_calls"), list):
            calls.extend(tool_calls)
        if isinstance(text := m.get("reasoning_content"), str) and not is_blank(text):
            reasoning.append(text)
    if calls:
        merged["tool_calls"] = calls
    if reasoning:
        merged["reasoning_content"] = "\n\n".join(reasoning)
    return merged
