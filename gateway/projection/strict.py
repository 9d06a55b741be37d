"""The passes project_strict() adds to project() (SPEC §2.2).

Each pass takes and returns entries (input index, message) and never mutates a message:
a changed message is a new dict, an untouched one is passed along as the same object.
Consecutive assistant messages merge during the layout walk (exchanges.lay_out); the
placeholder goes into the final messages.
"""

from __future__ import annotations

import json
import re
import unicodedata
from typing import Any

from gateway.projection.anomalies import (
    ASSISTANT_TURN_INSERTED,
    DEVELOPER_ROLE_CONVERTED,
    DUPLICATE_TOOL_CALL_DEDUPED,
    EMPTY_CONTENT_DROPPED,
    FUNCTION_CALL_CONVERTED,
    IDENTICAL_TOOL_CALLS_MERGED,
    LEADING_NON_USER_DROPPED,
    MESSAGE_MEDIA_MOVED,
    MESSAGE_NAME_REWRITTEN,
    REFUSAL_MOVED_TO_CONTENT,
    THINKING_PART_DROPPED,
    TOOL_ARGUMENTS_WRAPPED,
    TOOL_CALL_TYPE_ADDED,
    TOOL_MEDIA_MOVED,
    TRAILING_WHITESPACE_TRIMMED,
    USER_PLACEHOLDER_INSERTED,
    Anomaly,
)
from gateway.projection.content import clean_message, is_blank, text_part
from gateway.projection.exchanges import OPAQUE_ROLE, Entry, role_of, tool_call_id_of

USER_PLACEHOLDER_TEXT = (
    "<system-reminder>The start of this conversation is not available in the current "
    "context. Continue from the messages that follow.</system-reminder>"
)

_PREAMBLE_ROLES = ("system", "developer")
_KEPT_ROLES = (*_PREAMBLE_ROLES, OPAQUE_ROLE)


# OpenAI's pattern for a message ``name`` ("Invalid 'messages[1].name': string does not
# match pattern. Expected a string that matches the pattern '^[a-zA-Z0-9_-]+$'."), 64 at most.
_NAME = re.compile(r"[a-zA-Z0-9_-]{1,64}")
_NAME_CHAR = re.compile(r"[a-zA-Z0-9_-]")


def convert_legacy_functions(entries: list[Entry]) -> tuple[list[Entry], list[Anomaly]]:
    """Turn legacy function calling into tool calling, for upstreams that only pair tools.

    An assistant ``function_call`` (the deprecated ``functions`` API, still written by AG2
    and AutoGen 0.2) becomes one tool call with a new id, and the next ``function`` role
    message answering it (same function name, else the latest unanswered call) becomes the
    tool result carrying that id. A ``function`` message answering no call stays as it is.
    """
    taken = {cid for _, m in entries for cid in _tool_call_ids(m)}
    pending: list[tuple[str, Any]] = []  # (new id, function name), latest last
    anomalies: list[Anomaly] = []
    out: list[Entry] = []
    for index, message in entries:
        role = role_of(message)
        function = message.get("function_call") if role == "assistant" else None
        if type(function) is dict and isinstance(function.get("name"), str):
            cid = _fresh_id(f"call_fn_{index}", taken)
            arguments = function.get("arguments")
            if not isinstance(arguments, str):
                arguments = "{}" if arguments is None else json.dumps(arguments)
            call = {"id": cid, "type": "function",
                    "function": {"name": function["name"], "arguments": arguments}}
            calls = message.get("tool_calls")
            new = {k: v for k, v in message.items() if k != "function_call"}
            new["tool_calls"] = [*(calls if isinstance(calls, list) else ()), call]
            out.append((index, new))
            pending.append((cid, function["name"]))
            anomalies.append(Anomaly(FUNCTION_CALL_CONVERTED, index, cid))
            continue
        if role == "function" and pending:
            name = message.get("name")
            at = next((i for i in range(len(pending) - 1, -1, -1) if pending[i][1] == name),
                      len(pending) - 1)
            cid, _ = pending.pop(at)
            result = {k: v for k, v in message.items() if k not in ("role", "name")}
            out.append((index, {"role": "tool", "tool_call_id": cid, **result}))
            continue
        out.append((index, message))
    return (out, anomalies) if anomalies else (entries, anomalies)


def developer_as_system(entries: list[Entry]) -> tuple[list[Entry], list[Anomaly]]:
    """Send each ``developer`` message as a ``system`` message, every other field kept.

    OpenAI's ``developer`` role is the newer name of ``system`` (agents send it for
    reasoning models: Agno, pi, the Agents SDK); upstreams that predate it refuse the
    request. Only for a refusal that named the role: elsewhere it stays as sent.
    """
    anomalies: list[Anomaly] = []
    out: list[Entry] = []
    for index, message in entries:
        if role_of(message) == "developer":
            message = {**message, "role": "system"}
            anomalies.append(Anomaly(DEVELOPER_ROLE_CONVERTED, index))
        out.append((index, message))
    return (out, anomalies) if anomalies else (entries, anomalies)


# The key an unparsed call's arguments are kept under: the model reads what it wrote.
UNPARSED_ARGUMENTS_KEY = "unparsed_arguments"


def wrap_unparsed_arguments(entries: list[Entry]) -> tuple[list[Entry], list[Anomaly]]:
    """Send each tool call whose ``arguments`` are no JSON object (a model's cut-off or
    malformed JSON, a bare string) with them inside one, as ``{"unparsed_arguments": ...}``.

    OpenAI takes any string there; vLLM and other servers that render every call of the
    history through a chat template parse them and refuse the request ("Expecting ','
    delimiter", "arguments must be a valid JSON object string"), on every later turn. Only
    for a refusal that said so: elsewhere the arguments stay as sent.
    """
    anomalies: list[Anomaly] = []
    out: list[Entry] = []
    for index, message in entries:
        calls = message.get("tool_calls") if role_of(message) == "assistant" else None
        texts = [_unparsed(call) for call in calls] if isinstance(calls, list) else []
        if calls and any(text is not None for text in texts):
            wrapped = []
            for call, text in zip(calls, texts, strict=True):
                if text is not None:
                    arguments = json.dumps({UNPARSED_ARGUMENTS_KEY: text}, ensure_ascii=False)
                    call = {**call, "function": {**call["function"], "arguments": arguments}}
                    anomalies.append(Anomaly(TOOL_ARGUMENTS_WRAPPED, index,
                                             tool_call_id=call.get("id")))
                wrapped.append(call)
            message = {**message, "tool_calls": wrapped}
        out.append((index, message))
    return (out, anomalies) if anomalies else (entries, anomalies)


def _unparsed(call: Any) -> str | None:
    """A call's ``arguments`` when they are a string holding no JSON object, else None."""
    function = call.get("function") if isinstance(call, dict) else None
    text = function.get("arguments") if isinstance(function, dict) else None
    if not isinstance(text, str):
        return None
    try:
        return None if isinstance(json.loads(text), dict) else text
    except ValueError:
        return text


def add_call_types(entries: list[Entry]) -> tuple[list[Entry], list[Anomaly]]:
    """Give ``"type": "function"`` to each tool call that carries a ``function`` and no type.

    OpenAI requires the field in a history; langchain-azure-ai's AzureAIChatCompletionsModel
    writes calls without it. Calls with another type stay as sent.
    """
    anomalies: list[Anomaly] = []
    out: list[Entry] = []
    for index, message in entries:
        calls = message.get("tool_calls") if role_of(message) == "assistant" else None
        if not isinstance(calls, list) or not any(_untyped(c) for c in calls):
            out.append((index, message))
            continue
        typed = []
        for call in calls:
            if _untyped(call):
                anomalies.append(Anomaly(TOOL_CALL_TYPE_ADDED, index, _call_id(call)))
                call = {"id": call["id"], "type": "function", **call} if "id" in call else {
                    "type": "function", **call}
            typed.append(call)
        out.append((index, {**message, "tool_calls": typed}))
    return (out, anomalies) if anomalies else (entries, anomalies)


def readable_assistant_turns(entries: list[Entry], *, drop_thinking: bool = False,
                             ) -> tuple[list[Entry], list[Anomaly]]:
    """Give an upstream that reads only text and tool calls an assistant turn it can read.

    A turn with no content and no calls that holds a ``refusal`` (openai-python's
    ``message.model_dump()`` of a refused answer) gets the refusal text as its content;
    one that holds only an ``audio`` reference (an id only OpenAI resolves, no transcript)
    is dropped. Both read as empty messages to Anthropic-style rules. With
    ``drop_thinking`` (a refusal named the part type), Anthropic's ``thinking`` and
    ``redacted_thinking`` parts in the content (signed reasoning only Claude reads) are
    dropped, the rest of the turn kept; a turn left with nothing is dropped.
    """
    anomalies: list[Anomaly] = []
    out: list[Entry] = []
    for index, message in entries:
        if role_of(message) != "assistant":
            out.append((index, message))
            continue
        content = message.get("content")
        thought = drop_thinking and isinstance(content, list) and any(
            _is_thinking(p) for p in content)
        if thought:
            anomalies.append(Anomaly(THINKING_PART_DROPPED, index))
            content = [p for p in content if not _is_thinking(p)] or None
            message = {**message, "content": content}
        if not (content is None or (isinstance(content, str) and is_blank(content))) or (
                message.get("tool_calls") or message.get("function_call") is not None):
            out.append((index, message))
            continue
        refusal = message.get("refusal")
        if isinstance(refusal, str) and not is_blank(refusal):
            out.append((index, {**message, "content": refusal}))
            anomalies.append(Anomaly(REFUSAL_MOVED_TO_CONTENT, index))
        elif message.get("audio") is not None:
            anomalies.append(Anomaly(EMPTY_CONTENT_DROPPED, index))
        elif not thought:  # a turn that held only thinking goes (its drop is reported)
            out.append((index, message))
    return (out, anomalies) if anomalies else (entries, anomalies)


_THINKING_TYPES = frozenset({"thinking", "redacted_thinking"})


def _is_thinking(part: Any) -> bool:
    return type(part) is dict and part.get("type") in _THINKING_TYPES


def _untyped(call: Any) -> bool:
    return type(call) is dict and call.get("type") is None and type(call.get("function")) is dict


def _call_id(call: dict[str, Any]) -> str | None:
    cid = call.get("id")
    return cid if isinstance(cid, str) else None


def _tool_call_ids(message: Any) -> list[str]:
    calls = message.get("tool_calls") if role_of(message) == "assistant" else None
    if not isinstance(calls, list):
        return []
    return [c["id"] for c in calls if type(c) is dict and isinstance(c.get("id"), str)]


def _fresh_id(wanted: str, taken: set[str]) -> str:
    cid, n = wanted, 1
    while cid in taken:
        n += 1
        cid = f"{wanted}_{n}"
    taken.add(cid)
    return cid


def rewrite_names(entries: list[Entry]) -> tuple[list[Entry], list[Anomaly]]:
    """Rewrite each message ``name`` OpenAI refuses into its pattern ``^[a-zA-Z0-9_-]+$``.

    Agent frameworks put display names there ("UserProxy Agent", "Élodie"): accents are
    dropped (``É`` -> ``E``), every other character outside the pattern becomes ``_``,
    and the name is cut at 64 characters. Names that already match stay as sent.
    """
    anomalies: list[Anomaly] = []
    out: list[Entry] = []
    for index, message in entries:
        name = message.get("name") if type(message) is dict else None
        if not isinstance(name, str) or _NAME.fullmatch(name):
            out.append((index, message))
            continue
        out.append((index, {**message, "name": _valid_name(name)}))
        anomalies.append(Anomaly(MESSAGE_NAME_REWRITTEN, index))
    return (out, anomalies) if anomalies else (entries, anomalies)


def _valid_name(name: str) -> str:
    letters = [c for c in unicodedata.normalize("NFKD", name) if not unicodedata.combining(c)]
    if any(c.isalnum() and not c.isascii() for c in letters):
        # Letters with no Latin form ("用户", "Агент") would all become "_", and every
        # speaker the same name: punycode spells them apart, the same way on every turn.
        kept = "".join(c if _NAME_CHAR.fullmatch(c) or c.isalnum() else "_" for c in letters)
        return kept.encode("punycode").decode("ascii")[:64] or "_"
    return "".join(c if _NAME_CHAR.fullmatch(c) else "_" for c in letters)[:64] or "_"


def dedupe_tool_calls(entries: list[Entry]) -> tuple[list[Entry], list[Anomaly]]:
    """Keep only the first occurrence of each tool call id across the history.

    A later call with a seen id is removed from its assistant message; an assistant message
    left with no calls and no content goes too. Results are re-paired afterwards, so every
    result carrying the id answers the first call.
    """
    seen: set[str] = set()
    anomalies: list[Anomaly] = []
    out: list[Entry] = []
    for index, message in entries:
        calls = message.get("tool_calls") if role_of(message) == "assistant" else None
        if not isinstance(calls, list) or not calls:
            out.append((index, message))
            continue
        kept: list[Any] = []
        for call in calls:
            cid = call.get("id") if type(call) is dict else None
            if isinstance(cid, str):
                if cid in seen:
                    anomalies.append(Anomaly(DUPLICATE_TOOL_CALL_DEDUPED, index, cid))
                    continue
                seen.add(cid)
            kept.append(call)
        if len(kept) == len(calls):
            out.append((index, message))
            continue
        new = {k: v for k, v in message.items() if k != "tool_calls"}
        if kept:
            new["tool_calls"] = kept
        cleaned = clean_message(new, strict=True)
        if cleaned is not None:
            out.append((index, cleaned))
    return out, anomalies


def merge_identical_calls(entries: list[Entry]) -> tuple[list[Entry], list[Anomaly]]:
    """Merge a tool call into an earlier call of its turn with the same name and arguments.

    The merged call's result goes too; its text, when it differs, is joined to the kept
    call's result (the first result of the two keeps its place). Results that are not
    plain text keep only the first.
    """
    into: dict[str, str] = {}  # merged call id -> kept call id
    anomalies: list[Anomaly] = []
    out: list[Entry] = []
    for index, message in entries:
        calls = message.get("tool_calls") if role_of(message) == "assistant" else None
        if not isinstance(calls, list) or len(calls) < 2:
            out.append((index, message))
            continue
        seen: dict[tuple[Any, str], str] = {}
        kept: list[Any] = []
        for call in calls:
            key = _call_key(call)
            cid = _call_id(call) if type(call) is dict else None
            if key is not None and cid is not None and key in seen:
                into[cid] = seen[key]
                anomalies.append(Anomaly(IDENTICAL_TOOL_CALLS_MERGED, index, cid))
                continue
            if key is not None and cid is not None:
                seen[key] = cid
            kept.append(call)
        out.append((index, message) if len(kept) == len(calls)
                   else (index, {**message, "tool_calls": kept}))
    if not into:
        return entries, []
    texts: dict[str, list[Any]] = {}
    for _, message in out:
        cid = tool_call_id_of(message) if role_of(message) == "tool" else None
        if isinstance(cid, str) and (cid in into or cid in into.values()):
            texts.setdefault(into.get(cid, cid), []).append(message.get("content"))
    placed: set[str] = set()
    merged: list[Entry] = []
    for index, message in out:
        cid = tool_call_id_of(message) if role_of(message) == "tool" else None
        if not isinstance(cid, str) or (cid not in texts and cid not in into):
            merged.append((index, message))
            continue
        kept_id = into.get(cid, cid)
        if kept_id in placed:
            continue
        placed.add(kept_id)
        contents = texts[kept_id]
        content = (contents[0] if not all(isinstance(c, str) for c in contents)
                   else "\n\n".join(dict.fromkeys(contents)))
        if content == message.get("content") and cid == kept_id:
            merged.append((index, message))
        else:
            merged.append((index, {**message, "tool_call_id": kept_id, "content": content}))
    return merged, anomalies


def _call_key(call: Any) -> tuple[Any, str] | None:
    function = call.get("function") if type(call) is dict else None
    if type(function) is not dict or not isinstance(function.get("name"), str):
        return None
    arguments = function.get("arguments")
    try:
        parsed = json.loads(arguments) if isinstance(arguments, str) else arguments
        canonical = json.dumps(parsed, sort_keys=True)
    except (TypeError, ValueError):
        canonical = repr(arguments)
    return function["name"], canonical


def has_user(entries: list[Entry]) -> bool:
    """True when some entry is a user message."""
    return any(role_of(m) == "user" for _, m in entries)


def drop_leading_non_user(entries: list[Entry]) -> tuple[list[Entry], list[Anomaly]]:
    """Drop everything before the first user message but the system/developer messages and
    the items a wire keeps opaque to the projection (a Responses ``compaction`` item opens
    a history).

    Only called when the history has a user message. Tool results of a dropped assistant
    that sit after the first user message become orphans for the pairing that follows.
    """
    first_user = next(i for i, (_, m) in enumerate(entries) if role_of(m) == "user")
    anomalies: list[Anomaly] = []
    out: list[Entry] = []
    for index, message in entries[:first_user]:
        if role_of(message) in _KEPT_ROLES:
            out.append((index, message))
        else:
            anomalies.append(Anomaly(LEADING_NON_USER_DROPPED, index, tool_call_id_of(message)))
    if not anomalies:
        return entries, anomalies
    out.extend(entries[first_user:])
    return out, anomalies


def insert_user_placeholder(messages: list[Any]) -> tuple[list[Any], list[Anomaly]]:
    """Put a placeholder user message after the system/developer preamble.

    Only called, on the final messages, when the history has no user message. A history
    with nothing but preamble messages (or nothing at all) is left as it is: there is
    nothing to continue from.
    """
    start = 0
    while start < len(messages) and role_of(messages[start]) in _PREAMBLE_ROLES:
        start += 1
    if start == len(messages):
        return messages, []
    placeholder = {"role": "user", "content": USER_PLACEHOLDER_TEXT}
    return (
        [*messages[:start], placeholder, *messages[start:]],
        [Anomaly(USER_PLACEHOLDER_INSERTED)],
    )


TOOL_MEDIA_NOTE = "<system>The media this tool returned follows in the next user message.</system>"
_MEDIA_PARTS = ("image_url", "input_audio", "file")


# The roles OpenAI takes no media in besides tool (text and refusals in an assistant turn,
# text in a system or developer message), and the caption their media are moved under.
MEDIA_CAPTIONS = {
    "assistant": "<system>Media from the assistant's previous message:</system>",
    "system": "<system>Media from the system message:</system>",
    "developer": "<system>Media from the developer message:</system>",
}
_TEXT_ROLES = frozenset(MEDIA_CAPTIONS)


def tool_media_caption(tool_call_id: str) -> str:
    """The text put before the media a tool returned, in the user message that carries it."""
    return f"<system>Media returned by tool call {tool_call_id}:</system>"


def move_tool_media(messages: list[Any]) -> tuple[list[Any], list[Anomaly]]:
    """Move images, audio and files out of tool results (and assistant turns) into the user
    turn that follows.

    OpenAI takes only text in a tool message (MCP screenshots, browser tools and file
    readers return images there, and Anthropic takes them). Each such result keeps its text
    and a note; its media go, captioned with the call id, at the front of the user message
    right after the run of tool results (a new one when the next message is not a user's).
    An assistant turn holding media (a chart a client saved with the answer; OpenAI takes
    only text and refusals there), or a system or developer message (text only), keeps its
    words and calls; its media go the same way, captioned with the role they came from.
    """
    anomalies: list[Anomaly] = []
    out: list[Any] = []
    moved: list[Any] = []  # media parts of the current run of tool messages
    for message in messages:
        role = role_of(message)
        if isinstance(role, str) and role in _TEXT_ROLES \
                and isinstance(message.get("content"), list) \
                and any(type(p) is dict and p.get("type") in _MEDIA_PARTS
                        for p in message["content"]):
            content = message["content"]
            kept = [p for p in content if not (type(p) is dict and p.get("type") in _MEDIA_PARTS)]
            if moved:  # (a run of tool results before it: their media first)
                out.append({"role": "user", "content": moved})
            if kept or message.get("tool_calls"):  # (a turn of media alone goes whole)
                out.append({**message, "content": kept or None})
            moved = [text_part(MEDIA_CAPTIONS[role]),
                     *(p for p in content if type(p) is dict and p.get("type") in _MEDIA_PARTS)]
            anomalies.append(Anomaly(MESSAGE_MEDIA_MOVED, None, None))
            continue
        if role_of(message) == "tool":
            content = message.get("content")
            media = [p for p in content if type(p) is dict and p.get("type") in _MEDIA_PARTS
                     ] if isinstance(content, list) else []
            if media:
                cid = tool_call_id_of(message) or ""
                kept = [p for p in content
                        if not (type(p) is dict and p.get("type") in _MEDIA_PARTS)]
                out.append({**message, "content": [*kept, text_part(TOOL_MEDIA_NOTE)]})
                moved += [text_part(tool_media_caption(cid)), *media]
                anomalies.append(Anomaly(TOOL_MEDIA_MOVED, None, cid or None))
                continue
            out.append(message)
            continue
        if moved:
            content = message.get("content") if role_of(message) == "user" else None
            if isinstance(content, str | list):
                parts = [text_part(content)] if isinstance(content, str) else list(content)
                message = {**message, "content": [*moved, *parts]}
            else:
                out.append({"role": "user", "content": moved})
            moved = []
        out.append(message)
    if moved:
        out.append({"role": "user", "content": moved})
    return (out, anomalies) if anomalies else (messages, anomalies)


def trim_final_assistant(messages: list[Any]) -> tuple[list[Any], list[Anomaly]]:
    """Trim the whitespace that ends a final assistant turn (a prefill the model continues).

    Anthropic refuses it ("final assistant content cannot end with trailing whitespace"),
    through any proxy; the model continues the same text without it. A turn with tool
    calls, or whose content is not text, stays as sent.
    """
    if not messages or role_of(messages[-1]) != "assistant":
        return messages, []
    last: dict[str, Any] = messages[-1]
    if last.get("tool_calls"):
        return messages, []
    content = last.get("content")
    if isinstance(content, str):
        trimmed: Any = content.rstrip()
        if trimmed == content or not trimmed:
            return messages, []
    elif isinstance(content, list) and content and type(content[-1]) is dict and (
            content[-1].get("type") == "text" and isinstance(content[-1].get("text"), str)):
        text = content[-1]["text"].rstrip()
        if text == content[-1]["text"] or not text:
            return messages, []
        trimmed = [*content[:-1], {**content[-1], "text": text}]
    else:
        return messages, []
    return [*messages[:-1], {**last, "content": trimmed}], [
        Anomaly(TRAILING_WHITESPACE_TRIMMED, None)]


# What the inserted assistant turn says: true, short, and no instruction to the model.
TOOL_RESULTS_RECEIVED_TEXT = "Tool results received."
_AFTER_TOOLS_REFUSED = ("user", "system", "developer")


def assistant_after_tools(messages: list[Any]) -> tuple[list[Any], list[Anomaly]]:
    """Put an assistant turn between a run of tool results and a user (or system) message
    that follows it.

    Mistral's API and its tokenizer (vLLM, llama.cpp templates) take only an assistant
    turn or more results after a tool result ("Unexpected role 'user' after role 'tool'"),
    while agents write the user's next message right after the results (an interrupted
    tool, a reminder, media a tool returned). Only for a refusal that named the order.
    """
    out: list[Any] = []
    anomalies: list[Anomaly] = []
    for message in messages:
        if out and role_of(out[-1]) == "tool" and role_of(message) in _AFTER_TOOLS_REFUSED:
            out.append({"role": "assistant", "content": TOOL_RESULTS_RECEIVED_TEXT})
            anomalies.append(Anomaly(ASSISTANT_TURN_INSERTED, None))
        out.append(message)
    return (out, anomalies) if anomalies else (messages, anomalies)
