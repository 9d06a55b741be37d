"""Anomaly records: what a projection repaired, as small frozen values."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

Message = dict[str, Any]

# Stable anomaly kind names (SPEC §2). Logs, traces, metrics and headers report these.
ORPHAN_TOOL_RESULT_DROPPED = "orphan_tool_result_dropped"
TOOL_RESULT_REORDERED = "tool_result_reordered"
TOOL_RESULT_SYNTHESIZED = "tool_result_synthesized"
DUPLICATE_TOOL_RESULT_DROPPED = "duplicate_tool_result_dropped"
EMPTY_CONTENT_DROPPED = "empty_content_dropped"
USER_MESSAGES_MERGED = "user_messages_merged"
DUPLICATE_TOOL_CALL_DEDUPED = "duplicate_tool_call_deduped"
ASSISTANT_MESSAGES_MERGED = "assistant_messages_merged"
LEADING_NON_USER_DROPPED = "leading_non_user_dropped"
USER_PLACEHOLDER_INSERTED = "user_placeholder_inserted"
# Strict rung, for upstreams that refuse what OpenAI-style wires take: a legacy
# ``function_call`` and its ``function`` result turned into a tool call and a tool result;
# a message ``name`` outside OpenAI's pattern ``^[a-zA-Z0-9_-]+$`` rewritten into it.
FUNCTION_CALL_CONVERTED = "function_call_converted"
MESSAGE_NAME_REWRITTEN = "message_name_rewritten"
# Strict rung: a tool call without ``"type": "function"`` (langchain-azure-ai writes none;
# OpenAI: "Missing required parameter: 'messages[2].tool_calls[0].type'") gets it.
TOOL_CALL_TYPE_ADDED = "tool_call_type_added"
# Strict rung: an assistant turn whose only text is its ``refusal`` gets it as its content
# (upstreams without refusals read the turn as empty).
REFUSAL_MOVED_TO_CONTENT = "refusal_moved_to_content"
# Strict rung: Anthropic ``thinking`` / ``redacted_thinking`` parts kept in an assistant
# turn's content (a session begun on Claude through an OpenAI-compatible proxy) dropped
# (OpenAI: "Invalid value: 'thinking'. Supported values are: 'text' and 'refusal'.").
THINKING_PART_DROPPED = "thinking_part_dropped"
# Strict rung: images, audio or files a tool returned moved into a user message (OpenAI:
# "Image URLs are only allowed for messages with role 'user'").
TOOL_MEDIA_MOVED = "tool_media_moved"
# Strict rung: images, audio or files in an assistant turn, or a system or developer
# message, moved into the user message after it (OpenAI: "Invalid value: 'image_url'.
# Supported values are: 'text' and 'refusal'." / "... 'text'.").
MESSAGE_MEDIA_MOVED = "message_media_moved"
# Strict rung, when the refusal counts function calls against their responses (Gemini
# through litellm, whose translation keeps one of two identical calls of a turn): a call
# with the same name and arguments as an earlier call of its turn merged into it, its
# result's text joined to that call's result.
IDENTICAL_TOOL_CALLS_MERGED = "identical_tool_calls_merged"
# Strict rung, when the refusal named the role (DeepSeek, Volcengine, new-api relays, chat
# templates without it: "unknown variant `developer`", "invalid role 'developer'"): a
# ``developer`` message sent as a ``system`` message, the name every provider takes.
DEVELOPER_ROLE_CONVERTED = "developer_role_converted"
# Strict rung: a final assistant turn (a prefill) ending in whitespace trimmed (Anthropic:
# "messages: final assistant content cannot end with trailing whitespace"); the Messages
# wire reports the same repair under the same name.
TRAILING_WHITESPACE_TRIMMED = "trailing_whitespace_trimmed"
# Strict rung, when the refusal named the order (Mistral: "Unexpected role 'user' after role
# 'tool'", code 3230): an assistant turn put between a run of tool results and the user or
# system message after it.
ASSISTANT_TURN_INSERTED = "assistant_turn_inserted"
# Read: a ``\u`` escape of half a UTF-16 pair (an emoji cut in two by a client's string
# slice) written as U+FFFD; no JSON reader takes it, and every provider refuses it.
LONE_SURROGATE_REPLACED = "lone_surrogate_replaced"
# Strict rung, when the refusal said a call's arguments are not JSON (vLLM parsing every
# call of the history): arguments that are no JSON object sent inside one.
TOOL_ARGUMENTS_WRAPPED = "tool_arguments_wrapped"
# SPEC §2.3: a tool result was rendered (error prefix, empty-output text, model note).
TOOL_RESULT_RENDERED = "tool_result_rendered"
# A tool call without an id got one, and its result with it (call_ids.py).
CALL_ID_SYNTHESIZED = "call_id_synthesized"
# Up front (chat): a content part without its ``type`` whose one payload key says which it
# is (``{"text": ...}``), a bare string in a content list, or a lone part as the content:
# typed and listed, as every provider requires (wires/chat_values.py).
CONTENT_PART_TYPED = "content_part_typed"
# Strict rung: a tool call id in a form the upstream refuses (too long, characters outside
# ``[A-Za-z0-9_-]``, not the nine letters and digits Mistral's tokenizer demands) rewritten,
# and its result's ``tool_call_id`` with it (call_ids.py).
TOOL_CALL_ID_REWRITTEN = "tool_call_id_rewritten"


@dataclass(frozen=True, slots=True)
class Anomaly:
    """One repair made by a projection.

    ``index`` is the position of the affected message in the *input* list (None when the
    repair created something new with no input position); ``trailing`` marks a synthesized
    result for a call at the very end of the history (not an alert).
    """

    kind: str
    index: int | None = None
    tool_call_id: str | None = None
    trailing: bool = False

    def as_dict(self) -> dict[str, Any]:
        """The JSON shape used by the dry-run endpoint and the CLI."""
        return {
            "kind": self.kind,
            "index": self.index,
            "tool_call_id": self.tool_call_id,
            "trailing": self.trailing,
        }


@dataclass(frozen=True, slots=True)
class Projection:
    """The result of a projection: the new message list and what changed."""

    messages: list[Message]
    anomalies: tuple[Anomaly, ...] = field(default=())

    @property
    def repaired(self) -> bool:
        """True when anything was changed."""
        return bool(self.anomalies)

    def counts(self) -> dict[str, int]:
        """Anomaly kind -> count, in first-seen order."""
        if not self.anomalies:
            return {}
        return dict(Counter(a.kind for a in self.anomalies))
