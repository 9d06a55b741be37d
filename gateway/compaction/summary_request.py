"""The request that asks a model to summarize a history (SPEC §4.4).

The history is rendered as a plain-text transcript inside one user message, so the
request is wire-valid for any provider whatever state the history is in (no tool-call
pairing to satisfy, no ``tools`` to send). Dynamic-tool context is stripped first: messages'
``tools`` fields and ``<tools_added>`` / ``<tools_removed>``-style blocks (a summary needs
no schemas). System / developer messages are not summarized: compaction keeps them as they
are.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from gateway.compaction.user_input import normalize_tag, remove_tagged_blocks
from gateway.projection.anomalies import Message

DEFAULT_INSTRUCTIONS = """\
You are summarizing a conversation between a user and an AI agent so that the agent can
continue the work after its earlier messages are removed from its context. You only write
the summary: do not call tools, do not continue the task, do not address the user.

Write a structured summary in Markdown with these sections:

## Task
What the user asked for, in their words where it matters, including later changes of
direction and constraints or preferences they stated.

## Key Decisions
Decisions made and why; approaches tried and rejected.

## Files and Code
Files read, created or changed, with what matters about each (paths, function names,
short essential snippets).

## Current State
What is done, what is in progress, errors met and how they were resolved, open problems.

## Next Steps
What the agent was about to do next, precisely enough to resume without asking.

Be specific (names, paths, values, commands) and concise. Do not invent anything that is not
in the transcript."""

FINAL_ASK = (
    "Write the summary of the transcript above now, following the instructions. "
    "Reply with the summary only."
)

_DYNAMIC_TOOL_TAGS = frozenset(
    {"tools-added", "tools-removed", "tools-changed", "tools-updated", "available-deferred-tools"}
)
_SYSTEM_ROLES = ("system", "developer")


def _is_dynamic_tool_tag(name: str) -> bool:
    return normalize_tag(name) in _DYNAMIC_TOOL_TAGS


def _strip_tool_blocks(text: str) -> str:
    out = remove_tagged_blocks(text, _is_dynamic_tool_tag)
    return text if out is text else out.strip()


def _strip_message(message: Message) -> Message | None:
    changed = "tools" in message
    content = message.get("content")
    new_content: Any = content
    if isinstance(content, str):
        new_content = _strip_tool_blocks(content)
    elif isinstance(content, list):
        parts: list[Any] = []
        for part in content:
            if isinstance(part, dict) and part.get("type") == "text":
                text = part.get("text")
                stripped = _strip_tool_blocks(text) if isinstance(text, str) else text
                if stripped is text:
                    parts.append(part)
                elif stripped:
                    parts.append({**part, "text": stripped})
            else:
                parts.append(part)
        new_content = (
            parts
            if len(parts) != len(content)
            or any(a is not b for a, b in zip(parts, content, strict=False))
            else content
        )
    if new_content is content and not changed:
        return message
    had_content = bool(content.strip()) if isinstance(content, str) else bool(content)
    now_empty = not new_content or (isinstance(new_content, str) and not new_content.strip())
    if had_content and now_empty and not message.get("tool_calls"):
        return None  # it was only a tool announcement
    out = {k: v for k, v in message.items() if k != "tools"}
    out["content"] = new_content
    return out


def strip_dynamic_tool_context(messages: Sequence[Message]) -> list[Message]:
    """``messages`` without dynamic-tool context (new list; unchanged dicts are shared).

    Removes ``tools`` fields carried on messages and ``<tools_added>`` / ``<tools_removed>``
    (and ``tools_changed`` / ``tools_updated``) blocks; a message that held only such blocks
    is dropped.
    """
    out: list[Message] = []
    for message in messages:
        stripped = _strip_message(message)
        if stripped is not None:
            out.append(stripped)
    return out


def _render_content(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return json.dumps(content, ensure_ascii=False, default=str)
    pieces: list[str] = []
    for part in content:
        if isinstance(part, str):
            pieces.append(part)
            continue
        if not isinstance(part, dict):
            continue
        kind = part.get("type")
        if kind in ("text", "input_text", "output_text"):
            pieces.append(str(part.get("text") or ""))
        elif kind == "refusal":
            pieces.append(f"[refusal] {part.get('refusal') or ''}")
        elif kind in ("image_url", "input_image", "image"):
            pieces.append("[image]")
        elif kind == "input_audio":
            pieces.append("[audio]")
        elif kind in ("file", "input_file"):
            pieces.append("[file]")
        elif kind == "tool_result":
            pieces.append(f"[tool result]\n{_render_content(part.get('content'))}")
        else:
            pieces.append(f"[{kind or 'part'}]")
    return "\n".join(p for p in pieces if p)


def _render_tool_calls(calls: Any) -> list[str]:
    lines: list[str] = []
    for call in calls if isinstance(calls, list) else []:
        if not isinstance(call, dict):
            continue
        raw = call.get("function")
        function: dict[str, Any] = raw if isinstance(raw, dict) else {}
        arguments = function.get("arguments", "")
        if not isinstance(arguments, str):
            arguments = json.dumps(arguments, ensure_ascii=False, default=str)
        name = function.get("name") or "?"
        lines.append(f"[tool call {call.get('id') or '?'}] {name}({arguments})")
    return lines


# One message's text in the transcript is capped (about 6,000 tokens): a single huge tool
# output (a whole file, a long log) would otherwise make the summary request overflow however
# much older history the shrink steps leave out. Its start and end are kept. A small window
# caps it lower (``max_message_chars``), never below ``MIN_MESSAGE_CHARS``.
MAX_MESSAGE_CHARS = 24_000
MIN_MESSAGE_CHARS = 400


def _clip(text: str, limit: int = MAX_MESSAGE_CHARS) -> str:
    if len(text) <= limit:
        return text
    half = limit // 2
    omitted = len(text) - 2 * half
    return f"{text[:half]}\n[… {omitted} characters omitted …]\n{text[-half:]}"


def render_transcript(messages: Sequence[Message], *,
                      max_message_chars: int = MAX_MESSAGE_CHARS) -> str:
    """The history as text: one ``[role]`` block per message; tool calls and results
    inline, images as ``[image]``. System / developer messages are skipped. Each message's
    text is clipped to ``max_message_chars`` (its start and end kept)."""
    limit = max(MIN_MESSAGE_CHARS, min(max_message_chars, MAX_MESSAGE_CHARS))
    blocks: list[str] = []
    for message in messages:
        role = str(message.get("role") or "unknown")
        if role in _SYSTEM_ROLES:
            continue
        body = _clip(_render_content(message.get("content")), limit)
        if role == "tool":
            header = f"[tool result {message.get('tool_call_id') or '?'}]"
        elif message.get("name"):
            header = f"[{role} ({message['name']})]"
        else:
            header = f"[{role}]"
        lines = [header]
        if body:
            lines.append(body)
        lines.extend(_render_tool_calls(message.get("tool_calls")))
        if isinstance(message.get("function_call"), dict):
            lines.extend(_render_tool_calls([{"function": message["function_call"]}]))
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)


def build_summary_request(
    messages: Sequence[Message],
    *,
    model: str,
    instructions: str = DEFAULT_INSTRUCTIONS,
    max_tokens: int | None = None,
    max_message_chars: int = MAX_MESSAGE_CHARS,
) -> dict[str, Any]:
    """An OpenAI Chat Completions body asking ``model`` to summarize ``messages``.

    The body has a system message with ``instructions`` and one user message with the
    transcript between ``<transcript>`` tags, then a final ask. It carries no ``tools``
    and is not streamed. Each message's text is clipped to ``max_message_chars``.
    """
    transcript = render_transcript(strip_dynamic_tool_context(messages),
                                   max_message_chars=max_message_chars)
    body: dict[str, Any] = {
        "model": model,
        "messages": [
            {"role": "system", "content": instructions},
            {
                "role": "user",
                "content": f"<transcript>\n{transcript}\n</transcript>\n\n{FINAL_ASK}",
            },
        ],
        "stream": False,
    }
    if max_tokens is not None:
        body["max_tokens"] = max_tokens
    return body
