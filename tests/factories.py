"""Builders for OpenAI chat histories, shared by every test suite.

Each builder returns a fresh plain dict, exactly the JSON a client would send. Extra keyword
arguments become extra message fields (``name=...``, unknown fields, gateway extensions
such as ``is_error=True``).
"""

from __future__ import annotations

import json
from typing import Any

Message = dict[str, Any]


def system(content: Any = "You are a helpful assistant.", **extra: Any) -> Message:
    """A system message."""
    return {"role": "system", "content": content, **extra}


def developer(content: Any = "Follow the house style.", **extra: Any) -> Message:
    """A developer message."""
    return {"role": "developer", "content": content, **extra}


def user(content: Any = "Hello", **extra: Any) -> Message:
    """A user message; ``content`` may be a string or a list of parts."""
    return {"role": "user", "content": content, **extra}


def tool_call(call_id: str, name: str = "lookup", args: dict[str, Any] | None = None) -> Message:
    """One entry of an assistant message's ``tool_calls``."""
    return {
        "id": call_id,
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(args or {})},
    }


def assistant(
    content: Any = None, tool_calls: list[Message] | None = None, **extra: Any
) -> Message:
    """An assistant message; ``tool_calls`` is left out when None."""
    message: Message = {"role": "assistant", "content": content}
    if tool_calls is not None:
        message["tool_calls"] = tool_calls
    message.update(extra)
    return message


def calls(*call_ids: str, content: Any = None, **extra: Any) -> Message:
    """An assistant message calling one tool per id (``calls("a", "b")``)."""
    return assistant(content, [tool_call(cid) for cid in call_ids], **extra)


def tool(call_id: str, content: Any = "ok", **extra: Any) -> Message:
    """A tool result answering ``call_id``."""
    return {"role": "tool", "tool_call_id": call_id, "content": content, **extra}


def exchange(*call_ids: str, content: Any = None) -> list[Message]:
    """An assistant message calling ``call_ids`` followed by one result per call, in order."""
    return [calls(*call_ids, content=content), *(tool(cid, f"result of {cid}") for cid in call_ids)]


def text_part(text: str, **extra: Any) -> Message:
    """A ``text`` content part."""
    return {"type": "text", "text": text, **extra}


def image_part(url: str = "https://example.com/cat.png", **extra: Any) -> Message:
    """An ``image_url`` content part."""
    return {"type": "image_url", "image_url": {"url": url}, **extra}
