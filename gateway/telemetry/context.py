"""What is in the window: a request's input tokens by source (issue 26), cheaply.

The breakdown is derived from sizes the request already has, never a second tokenization:
text is counted at four characters a token (the same estimate the budget level uses below
the trigger), images at the fixed estimates of ``gateway.compaction.tokens`` (base64 data
is never read), tool schemas from their serialized length. Sources:

``system``    system and developer messages (Responses ``instructions``, Anthropic ``system``)
``tools``     tool schemas (``tools`` / legacy ``functions``)
``history``   every earlier message (tool results, the summary and images within it too)
``tool_results`` / ``summary`` / ``images``  parts of ``history``
``turn``      the new turn: the messages after the last assistant message
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from gateway.projection.anomalies import Message

# The estimates of gateway.compaction.tokens (which telemetry must not import: compaction
# reports through telemetry).
MESSAGE_OVERHEAD = 3
TOOLS_OVERHEAD = 12
IMAGE_LOW_TOKENS = 85
UNKNOWN_IMAGE_TOKENS = 765
NON_TEXT_PART_TOKENS = 256
CHARS_PER_TOKEN = 4
SOURCES = ("system", "tools", "history", "tool_results", "summary", "images", "turn")
_SYSTEM_ROLES = frozenset({"system", "developer"})
_IMAGE_TYPES = frozenset({"image_url", "input_image", "image"})
_OTHER_MEDIA = frozenset({"input_audio", "file", "input_file", "document"})


@dataclass(frozen=True, slots=True)
class ContextBreakdown:
    """Estimated input tokens by source, the window used (ratio) and the budget level."""

    system: int = 0
    tools: int = 0
    history: int = 0
    tool_results: int = 0
    summary: int = 0
    images: int = 0
    turn: int = 0
    level: str | None = None
    used: float | None = None  # (input + reserve) / window, as the compaction trigger sees it

    @property
    def total(self) -> int:
        """The estimated input tokens (system + tools + history + turn)."""
        return self.system + self.tools + self.history + self.turn

    def tokens(self) -> dict[str, int]:
        """Source -> tokens (the histogram's ``source`` label values)."""
        return {source: getattr(self, source) for source in SOURCES}

    def header(self) -> str:
        """``x-gateway-context``: the level word first (as before), then the numbers."""
        parts = [self.level or "unknown"]
        if self.used is not None:
            parts.append(f"used={self.used:.2f}")
        parts += [f"{source}={n}" for source, n in self.tokens().items()]
        return "; ".join(parts)

    def as_dict(self) -> dict[str, Any]:
        """The inspector's and the access log's view."""
        return {"level": self.level, "used": None if self.used is None else round(self.used, 4),
                "total": self.total, **self.tokens()}


def _text_tokens(chars: int) -> int:
    return -(-chars // CHARS_PER_TOKEN)


def _content(content: Any) -> tuple[int, int]:
    """(text tokens, image tokens) of one message's content."""
    if content is None:
        return 0, 0
    if isinstance(content, str):
        return _text_tokens(len(content)), 0
    if not isinstance(content, list):
        return _text_tokens(len(orjson.dumps(content, default=str))), 0
    text = images = 0
    for part in content:
        if isinstance(part, str):
            text += len(part)
        elif not isinstance(part, Mapping):
            continue
        elif isinstance(part.get("text"), str):
            text += len(part["text"])
        elif part.get("type") in _IMAGE_TYPES:
            image = part.get("image_url")
            low = isinstance(image, Mapping) and image.get("detail") == "low"
            images += IMAGE_LOW_TOKENS if low else UNKNOWN_IMAGE_TOKENS
        elif part.get("type") in _OTHER_MEDIA:
            images += NON_TEXT_PART_TOKENS
        else:
            inner_text, inner_images = _content(part.get("content"))
            text += inner_text * CHARS_PER_TOKEN
            images += inner_images
    return _text_tokens(text), images


def _calls(message: Message) -> int:
    calls = message.get("tool_calls")
    if not isinstance(calls, list):
        return 0
    chars = 0
    for call in calls:
        function = call.get("function") if isinstance(call, Mapping) else None
        if isinstance(function, Mapping):
            arguments = function.get("arguments")
            chars += len(str(function.get("name") or "")) + (
                len(arguments) if isinstance(arguments, str) else 16)
    return _text_tokens(chars) + 3 * len(calls)


def _new_turn_start(messages: Sequence[Message]) -> int:
    for i in range(len(messages) - 1, -1, -1):
        if messages[i].get("role") == "assistant":
            return i + 1
    return 0


def context_breakdown(messages: Sequence[Message], body: Mapping[str, Any], *, frozen: int = 0,
                      level: str | None = None, used: float | None = None) -> ContextBreakdown:
    """The breakdown of the ``messages`` to send (the first ``frozen`` are a stored
    compaction: its non-system messages count as the summary) and ``body``'s tool schemas."""
    system = history = tool_results = summary = images = turn = 0
    turn_start = _new_turn_start(messages)
    for i, message in enumerate(messages):
        text, image = _content(message.get("content"))
        tokens = MESSAGE_OVERHEAD + text + image + _calls(message)
        role = message.get("role")
        if role in _SYSTEM_ROLES:
            system += tokens
        elif i >= turn_start:
            turn += tokens
        else:
            history += tokens
            images += image
            if i < frozen:
                summary += tokens
            elif role == "tool":
                tool_results += tokens
    for key in ("instructions", "system"):  # native Responses / Messages: not messages
        if body.get(key):
            system += MESSAGE_OVERHEAD + _content(body[key])[0]
    schemas = [body[key] for key in ("tools", "functions") if body.get(key)]
    tools = (TOOLS_OVERHEAD + _text_tokens(len(orjson.dumps(schemas, default=str)))
             if schemas else 0)
    return ContextBreakdown(system, tools, history, tool_results, summary, images, turn,
                            level, used)
