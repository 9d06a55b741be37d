"""Tool-result rendering (SPEC §2.3): error prefix, empty output, model-only side note.

Clients mark a failed tool with the gateway extension field ``is_error: true`` and may add a
``model_note`` string. Both fields are consumed: the rendered message no longer carries
them, so the request stays wire-valid and rendering again changes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gateway.projection.anomalies import EMPTY_CONTENT_DROPPED, TOOL_RESULT_RENDERED, Anomaly
from gateway.projection.content import is_blank, strip_blank_parts, text_part

TOOL_ERROR_PREFIX = "<system>ERROR: Tool execution failed.</system>"
EMPTY_TOOL_OUTPUT_TEXT = "<system>Tool output is empty.</system>"

IS_ERROR_FIELD = "is_error"
MODEL_NOTE_FIELD = "model_note"


@dataclass(frozen=True, slots=True)
class Rendered:
    """The outcome of rendering one tool message."""

    message: Any
    rendered: bool = False  # prefix / empty placeholder / note applied or fields consumed
    parts_dropped: bool = False  # whitespace-only text parts were removed


def tool_result_is_clean(message: dict[str, Any], *, strict: bool = False) -> bool:
    """True when rendering would leave this tool message unchanged.

    An empty or blank string output is valid on OpenAI-style wires (tools return empty
    output all the time): it stays as sent unless ``strict`` (SPEC §2.3).
    """
    if IS_ERROR_FIELD in message or MODEL_NOTE_FIELD in message:
        return False
    content = message.get("content")
    if isinstance(content, str):
        return not strict or not is_blank(content)
    if isinstance(content, list):
        return bool(content) and strip_blank_parts(content) is None
    return content is not None


def render_tool_result(message: dict[str, Any], *, strict: bool = False) -> Rendered:
    """Render one tool message; returns the same object when nothing applies.

    Without ``strict`` a blank string output is left as it is (see tool_result_is_clean);
    with the error marker or a note it is rendered like any output.
    """
    if tool_result_is_clean(message, strict=strict):
        return Rendered(message)
    content = message.get("content")
    parts_dropped = False
    if isinstance(content, list):
        stripped = strip_blank_parts(content)
        if stripped is not None:
            content, parts_dropped = stripped, True
        empty = not content
    elif isinstance(content, str):
        empty = is_blank(content) and (strict or IS_ERROR_FIELD in message
                                       or MODEL_NOTE_FIELD in message)
    else:
        empty = content is None
    rendered = empty or IS_ERROR_FIELD in message or MODEL_NOTE_FIELD in message
    if empty:
        content = EMPTY_TOOL_OUTPUT_TEXT
    if message.get(IS_ERROR_FIELD) is True and not _has_error_prefix(content):
        content = _prefix(content)
    note = message.get(MODEL_NOTE_FIELD)
    if isinstance(note, str) and not is_blank(note):
        content = _append_note(content, note)
    new = {k: v for k, v in message.items() if k != IS_ERROR_FIELD and k != MODEL_NOTE_FIELD}
    new["content"] = content
    return Rendered(new, rendered=rendered, parts_dropped=parts_dropped)


def render_reporting(
    index: int, message: dict[str, Any], found: list[Anomaly], *, strict: bool = False
) -> Any:
    """Render one tool message from the input at ``index``, reporting what changed."""
    result = render_tool_result(message, strict=strict)
    if result.message is not message:
        tid = message.get("tool_call_id")
        tid = tid if isinstance(tid, str) else None
        if result.parts_dropped:
            found.append(Anomaly(EMPTY_CONTENT_DROPPED, index, tid))
        if result.rendered:
            found.append(Anomaly(TOOL_RESULT_RENDERED, index, tid))
    return result.message


def _has_error_prefix(content: Any) -> bool:
    if isinstance(content, str):
        return content.startswith(TOOL_ERROR_PREFIX)
    if isinstance(content, list) and content:
        first = content[0]
        return (
            type(first) is dict
            and first.get("type") == "text"
            and isinstance(first.get("text"), str)
            and first["text"].startswith(TOOL_ERROR_PREFIX)
        )
    return False


def _prefix(content: Any) -> Any:
    if isinstance(content, str):
        return f"{TOOL_ERROR_PREFIX}\n{content}"
    if isinstance(content, list):
        return [text_part(TOOL_ERROR_PREFIX), *content]
    return content  # unknown shape: nothing sensible to prefix


def _append_note(content: Any, note: str) -> Any:
    if isinstance(content, str):
        return f"{content}\n{note}"
    if isinstance(content, list):
        return [*content, text_part(note)]
    return content
