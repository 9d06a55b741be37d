"""Edge checks of the wire bodies: only what the gateway must read, each refusal naming the
field, in the path style of the wire (``messages.3.content.1`` / ``input[3]``)."""

from __future__ import annotations

from typing import Any

from gateway.errors import ClientError

_ROLES = ("user", "assistant")


def _stream(body: dict[str, Any]) -> None:
    stream = body.get("stream")
    if stream is not None and not isinstance(stream, bool):
        raise ClientError(400, "stream: Input should be a valid boolean", param="stream")


def validate_messages_body(body: dict[str, Any]) -> list[dict[str, Any]]:
    """An Anthropic Messages body's ``messages`` (blocks checked for a string ``type``)."""
    _stream(body)
    messages = body.get("messages")
    if messages is None:
        raise ClientError(400, "messages: Field required", param="messages")
    if not isinstance(messages, list):
        raise ClientError(400, "messages: Input should be a valid list", param="messages")
    for i, message in enumerate(messages):
        where = f"messages.{i}"
        if not isinstance(message, dict):
            raise ClientError(400, f"{where}: Input should be a valid dictionary", param=where)
        if message.get("role") not in _ROLES:
            raise ClientError(400, f"{where}.role: Input should be 'user' or 'assistant'",
                              param=f"{where}.role")
        content = message.get("content")
        if isinstance(content, str):
            continue
        if not isinstance(content, list):
            raise ClientError(400, f"{where}.content: Input should be a valid string or a "
                              "list of content blocks", param=f"{where}.content")
        for j, block in enumerate(content):
            if not isinstance(block, dict) or not isinstance(block.get("type"), str):
                raise ClientError(400, f"{where}.content.{j}: Input should be an object with "
                                  "a string 'type'", param=f"{where}.content.{j}")
            if block["type"] == "tool_result" and not isinstance(block.get("tool_use_id"), str):
                raise ClientError(400, f"{where}.content.{j}.tool_use_id: Field required",
                                  param=f"{where}.content.{j}.tool_use_id")
            if block["type"] == "tool_use" and not isinstance(block.get("id"), str):
                raise ClientError(400, f"{where}.content.{j}.id: Field required",
                                  param=f"{where}.content.{j}.id")
    return messages


def validate_responses_body(body: dict[str, Any]) -> list[Any]:
    """A Responses body's ``input`` as an item list (a string is one user message)."""
    _stream(body)
    items = body.get("input")
    if items is None:
        return []
    if isinstance(items, str):
        return [{"role": "user", "content": items}]
    if not isinstance(items, list):
        raise ClientError(400, "Invalid type for 'input': expected a string or an array of "
                          "input items.", param="input", code="invalid_type")
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            raise ClientError(400, f"Invalid type for 'input[{i}]': expected an object.",
                              param=f"input[{i}]", code="invalid_type")
        kind = item.get("type")
        if kind in ("function_call", "function_call_output"):
            call_id = item.get("call_id")
            if not isinstance(call_id, str) or not call_id:
                raise ClientError(400, f"Invalid 'input[{i}].call_id': expected a non-empty "
                                  "string.", param=f"input[{i}].call_id")
        content = item.get("content")
        if kind in (None, "message") and not isinstance(content, str | list):
            raise ClientError(400, f"Invalid type for 'input[{i}].content': expected a "
                              "string or an array of content parts.",
                              param=f"input[{i}].content", code="invalid_type")
    return items
