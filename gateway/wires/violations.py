"""What is wrong with a history, item by item: the ``reject`` policy's 400, the ``report``
policy's would-repairs, the dry run's list (pure, no I/O).

Every repair the gateway makes is a violation of a wire rule, named by its anomaly kind.
A violation names the rule, where it is (``message``: an index in the client's
``messages``; ``item``: an index in a Responses ``input``), the tool call id when one is
involved, a one-line explanation and the repair the gateway would make. What the gateway
does on its own account (rendering its ``is_error`` extension, expanding a
``previous_response_id``, stripping invisible characters, which have their own setting)
is not a violation.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from gateway.projection import anomalies as k
from gateway.projection.anomalies import Anomaly
from gateway.projection.invisible import INVISIBLE_CHARS_STRIPPED
from gateway.wires import anthropic_rules as a
from gateway.wires import responses_rules as r
from gateway.wires.anthropic_view import AnthropicView
from gateway.wires.base import WireView
from gateway.wires.response_chain import PREVIOUS_RESPONSE_EXPANDED

NOT_VIOLATIONS = frozenset({k.TOOL_RESULT_RENDERED, PREVIOUS_RESPONSE_EXPANDED,
                            INVISIBLE_CHARS_STRIPPED})

# kind -> (what is wrong, what the gateway would do)
EXPLAINED: dict[str, tuple[str, str]] = {
    k.ORPHAN_TOOL_RESULT_DROPPED: (
        "a tool result answers no tool call of an earlier assistant message",
        "drop the tool result"),
    k.TOOL_RESULT_REORDERED: (
        "a tool result is not right after the assistant message that made its call",
        "move the result next to its call"),
    k.TOOL_RESULT_SYNTHESIZED: (
        "a tool call has no result before the next turn",
        "add a result saying the tool produced none"),
    k.DUPLICATE_TOOL_RESULT_DROPPED: (
        "a tool call is answered more than once", "keep the last result, drop the others"),
    k.EMPTY_CONTENT_DROPPED: (
        "a message or content part is empty or blank", "drop the blank content"),
    k.USER_MESSAGES_MERGED: (
        "user messages follow each other (refused by strict providers)", "merge them"),
    k.DUPLICATE_TOOL_CALL_DEDUPED: (
        "two tool calls share one id", "keep the first call with that id"),
    k.IDENTICAL_TOOL_CALLS_MERGED: (
        "a turn calls the same tool twice with the same arguments (refused by Gemini)",
        "keep one call, join the results"),
    k.ASSISTANT_MESSAGES_MERGED: (
        "assistant messages follow each other", "merge them into one"),
    k.LEADING_NON_USER_DROPPED: (
        "the history does not start with a user message after the system prompt",
        "drop the messages before the first user message"),
    k.USER_PLACEHOLDER_INSERTED: (
        "the history has no user message", "insert a placeholder user message"),
    k.FUNCTION_CALL_CONVERTED: (
        "a legacy function_call (and its function result) where this upstream pairs tool "
        "calls", "turn them into a tool call and its tool result"),
    k.TOOL_CALL_TYPE_ADDED: (
        "a tool call has no type", "give it the type function"),
    k.REFUSAL_MOVED_TO_CONTENT: (
        "an assistant turn holds only a refusal (read as empty by this upstream)",
        "send the refusal as its text"),
    k.TOOL_MEDIA_MOVED: (
        "a tool result holds images, audio or files (this upstream takes only text there)",
        "move them to the next user turn"),
    k.MESSAGE_MEDIA_MOVED: (
        "an assistant, system or developer message holds images, audio or files (this "
        "upstream takes only text there)", "move them to the next user turn"),
    k.THINKING_PART_DROPPED: (
        "an assistant turn carries Anthropic thinking parts, a part type this upstream "
        "refuses", "drop the thinking parts"),
    k.TOOL_CALL_ID_REWRITTEN: (
        "a tool call id in a form this upstream refuses (too long, other characters)",
        "rewrite it, and its results' tool_call_id, into the form the upstream takes"),
    k.DEVELOPER_ROLE_CONVERTED: (
        "a developer message, a role this upstream refuses", "send it as a system message"),
    k.ASSISTANT_TURN_INSERTED: (
        "a user or system message right after tool results (refused by Mistral)",
        "put an assistant turn between them"),
    k.TRAILING_WHITESPACE_TRIMMED: (
        "the final assistant turn ends in whitespace (refused by Anthropic)",
        "trim the trailing whitespace"),
    k.TOOL_ARGUMENTS_WRAPPED: (
        "a tool call's arguments are not a JSON object (refused by servers that parse them)",
        "send them inside one, as unparsed_arguments"),
    k.LONE_SURROGATE_REPLACED: (
        "half of a UTF-16 pair (an emoji cut in two), which no JSON reader takes",
        "write it as the replacement character U+FFFD"),
    k.MESSAGE_NAME_REWRITTEN: (
        "a message name does not match the pattern ^[a-zA-Z0-9_-]+$",
        "rewrite the name into the pattern"),
    a.SYSTEM_MESSAGE_LIFTED: (
        "a message has the role system (the Messages API takes it in the top-level "
        "system)", "move it to the top-level system"),
    a.THINKING_BLOCK_DROPPED: (
        "a thinking block is unsigned, in a user turn or ends an assistant turn",
        "drop the thinking block"),
    a.THINKING_BLOCK_MOVED: (
        "a thinking block follows text or a tool call in its turn",
        "move it to the front of the turn"),
    a.THINKING_DISABLED: (
        "thinking is on but the turn with the pending tool calls, or the prefill, starts "
        "without thinking", "turn thinking off for this request"),
    a.SERVER_TOOL_USE_DROPPED: (
        "a server tool call (web search, ...) has no result after it in its assistant "
        "message, and a later turn follows", "drop the call (the tool never ran)"),
    a.TOOL_ID_REWRITTEN: (
        "a tool id has characters outside [a-zA-Z0-9_-]",
        "rewrite the id alike in tool_use and tool_result"),
    a.TOOLS_DECLARED: (
        "the history uses tools but the request declares none",
        "declare the tools used, with tool_choice none"),
    a.CACHE_BREAKPOINT_MOVED: (
        "cache_control is on an empty text block or a thinking block",
        "move the breakpoint to the neighbouring block"),
    a.CACHE_BREAKPOINT_REMOVED: (
        "more than four cache breakpoints", "keep the first and the last three"),
    a.CACHE_TTL_ADJUSTED: (
        "a one-hour cache breakpoint follows a five-minute one",
        "make it five minutes"),
    a.TRAILING_WHITESPACE_TRIMMED: (
        "the final assistant turn ends in whitespace", "trim the whitespace"),
    a.PREFILL_DROPPED: (
        "the history ends with an assistant turn this model will not continue",
        "drop the trailing assistant turn"),
    r.DUPLICATE_ITEM_DROPPED: (
        "an input item repeats the id of an earlier item", "keep the first, drop the copy"),
    k.CALL_ID_SYNTHESIZED: (
        "a call or its output has an empty or missing call id", "give the pair a call id"),
    r.REASONING_SUMMARY_ADDED: (
        "a reasoning item has no summary", "add an empty summary"),
    r.ASSISTANT_CONTENT_RETYPED: (
        "a message's text parts have the other role's type (input_text / output_text), or "
        "a reasoning summary's parts are not summary_text", "retype the parts"),
    r.ITEM_ID_REMOVED: (
        "an item id cannot be valid here (empty, another backend's, or tied to dropped "
        "reasoning)", "remove the id"),
    r.ITEM_REFERENCE_DROPPED: (
        "an item_reference cannot resolve under store: false", "drop the reference"),
    r.REASONING_ITEM_DROPPED: (
        "a reasoning item is not followed by its output item, or cannot resolve",
        "drop the reasoning item"),
    r.ENCRYPTED_ITEM_DROPPED: (
        "encrypted content this provider cannot verify", "drop the encrypted item"),
    r.CALL_ID_SHORTENED: (
        "a call_id is longer than the API's 64 characters",
        "give the call and its output one shorter id"),
    r.TOOL_VALUE_SERIALIZED: (
        "a call's arguments or an output is a JSON object, a number or a boolean where the "
        "API takes text (or a single part where it takes a list)",
        "send its JSON text (the part as a list)"),
    r.TOOL_MESSAGE_CONVERTED: (
        "a Chat Completions tool message (role tool), or assistant tool_calls, in a "
        "Responses input",
        "send it as the output item of the call it names (the calls as function_call items)"),
    k.CONTENT_PART_TYPED: (
        "a content part has no type, or another wire's (chat's text, image_url or file "
        "parts, an image_url object, in a Responses input)",
        "give the part the type (and shape) of this wire"),
    r.REASONING_CONTENT_DROPPED: (
        "a reasoning item carries reasoning text another backend took (content)",
        "send the encrypted reasoning without the text"),
    r.CALL_ID_RELINKED: (
        "an output names its call by the call's item id instead of its call_id",
        "give the output the call's call_id"),
    r.TOOL_OUTPUT_RETYPED: (
        "an output is of another kind than the call it answers",
        "send it as the output kind of its call"),
    r.COMPUTER_CALL_DROPPED: (
        "a computer call has no screenshot as its output (the only output the API takes)",
        "drop the call and its output"),
}


def violation(anomaly: Anomaly, where: str = "message",
              index: int | None = None) -> dict[str, Any]:
    """One violation: rule, position (``where``: ``message`` or ``item``), tool call id,
    explanation and repair."""
    what, repair = EXPLAINED.get(anomaly.kind, (anomaly.kind.replace("_", " "),
                                                anomaly.kind.replace("_", " ")))
    out: dict[str, Any] = {"rule": anomaly.kind, where: index}
    if anomaly.tool_call_id is not None:
        out["tool_call_id"] = anomaly.tool_call_id
    out["explanation"] = what
    out["repair"] = repair
    return out


def wanted(anomalies: Iterable[Anomaly]) -> list[Anomaly]:
    """The anomalies that are violations (see :data:`NOT_VIOLATIONS`)."""
    return [x for x in anomalies if x.kind not in NOT_VIOLATIONS]


def chat_violations(anomalies: Iterable[Anomaly]) -> list[dict[str, Any]]:
    """Violations of a chat history (indexes are positions in ``messages``)."""
    return [violation(x, "message", x.index) for x in wanted(anomalies)]


def translated_violations(anomalies: Iterable[Anomaly], positions: Sequence[int | None],
                          items: bool) -> list[dict[str, Any]]:
    """Violations of a history translated to chat, at the client's positions: ``positions``
    maps each chat message to the client's message (or, with ``items``, its Responses input
    item) it came from."""
    out = []
    for x in wanted(anomalies):
        index = x.index
        if index is not None:
            index = positions[index] if 0 <= index < len(positions) else None
        out.append(violation(x, "item" if items else "message", index))
    return out


def anthropic_violations(view: AnthropicView, read: Sequence[Anomaly],
                         exchange: Sequence[Anomaly], finished: Sequence[Anomaly],
                         ) -> list[dict[str, Any]]:
    """Violations of a Messages history: the wire rules' (``read`` before the view was
    built, ``finished`` on the body to send) name wire messages; the exchange rules' name
    neutral messages, mapped back to the wire message they came from."""
    out = [violation(x, "message", x.index) for x in wanted(read)]
    for x in wanted(exchange):
        index = x.index
        if index is not None and 0 <= index < len(view.groups):
            index = view.groups[index]
        out.append(violation(x, "message", index))
    out += [violation(x, "message", x.index) for x in wanted(finished)]
    return out


def responses_violations(view: WireView, items: Any, read: Sequence[Anomaly],
                         exchange: Sequence[Anomaly], finished: Sequence[Anomaly],
                         ) -> list[dict[str, Any]]:
    """Violations of a Responses ``input`` (``items``, as read): item indexes; the
    exchange rules' neutral messages mapped back to their first input item."""
    position = ({id(item): i for i, item in enumerate(items)}
                if isinstance(items, list) else {})
    out = [violation(x, "item", x.index) for x in wanted(read)]
    for x in wanted(exchange):
        index = x.index
        if index is not None and 0 <= index < len(view.sources) and view.sources[index]:
            index = position.get(id(view.sources[index][0]), index)
        out.append(violation(x, "item", index))
    out += [violation(x, "item", x.index) for x in wanted(finished)]
    return out


def summary_line(violations: Sequence[dict[str, Any]], limit: int = 10) -> str:
    """The error message: every violation on one line each (the first ``limit``)."""
    lines = []
    for v in violations[:limit]:
        where = ("" if v.get("message", v.get("item")) is None
                 else f"{'input' if 'item' in v else 'messages'}"
                      f"[{v.get('message', v.get('item'))}] ")
        call = f" (tool call {v['tool_call_id']})" if v.get("tool_call_id") else ""
        lines.append(f"{where}{v['rule']}{call}: {v['explanation']}; the gateway would "
                     f"{v['repair']}")
    more = f"; and {len(violations) - limit} more" if len(violations) > limit else ""
    return ("The history is not valid on this wire and the repair policy for this client "
            f"is reject ({len(violations)} violation{'s' if len(violations) != 1 else ''}, "
            "listed in gateway.violations): " + "; ".join(lines) + more)
