"""The Messages wire's own repair rules: thinking, tool ids, system turns, cache breakpoints,
the final assistant turn (pure, no I/O).

The exchange rules the wire shares with chat run on the neutral view; these run on the
body itself, at three moments:

- :func:`repair_request`, before the view is built, on what can never be valid:
  ``system_message_lifted`` (a ``system`` role message joins the top-level ``system``),
  ``thinking_block_dropped`` (a thinking block without its ``signature``, a redacted one
  without ``data``, thinking in a user turn, thinking that ends an assistant turn),
  ``thinking_block_moved`` (thinking after text or a tool call moves to the front of its
  turn, unless the client asked for interleaved thinking), ``tool_id_rewritten`` (a tool id
  outside ``[a-zA-Z0-9_-]``, rewritten alike in ``tool_use`` and ``tool_result``; a
  ``server_tool_use`` id not ``srvtoolu_[a-zA-Z0-9_]``, alike in its result block; a
  ``tool_use`` id an earlier, answered call of another name or input used, as agents that
  number their calls from zero on every turn write it, ``<id>_<n>`` with the results after
  it: "`tool_use` ids must be unique", and each result stays with its own call),
  ``block_field_dropped``, ``image_part_converted``, ``image_data_url_unwrapped``,
  ``tool_result_rendered`` (single blocks: :mod:`gateway.wires.anthropic_blocks`),
  ``tool_input_parsed`` (a ``tool_use.input`` sent as a JSON string, as Chat Completions
  arguments are, becomes the object it holds; one sent as null, a stream cut before the
  input came, or left out, a call of no arguments saved without it, becomes ``{}``),
  ``cache_breakpoint_moved`` (``cache_control`` on an empty text block moves to the block
  before it, the turn before's last block when it opens its turn, or else the block after
  it; on a thinking block to the block after it), ``empty_content_dropped`` (blank
  text blocks inside a ``tool_result``, blank text blocks of a ``system`` list, their
  breakpoint on the block before), ``orphan_tool_result_dropped`` (a server tool's result,
  ``web_search_tool_result`` and the like, without its ``server_tool_use`` before it in the
  same assistant message), ``tool_result_reordered`` (a ``tool_result`` written into an
  assistant message moves to the start of the user message after it, one made when none
  follows; the exchange rules then pair it).
- :func:`finish_request`, on the body about to be sent: ``server_tool_use_dropped`` (a
  ``server_tool_use`` whose result is not after it in its assistant message, in a message
  that is not the last one: "web_search tool use with id ... was found without a
  corresponding web_search_tool_result block"; the tool never ran, so the call goes, and
  a message left empty with it; as the last message it is a paused turn sent back to be
  continued, which is valid, until the exchange rules answer a tool call of it),
  ``thinking_block_dropped``
  (thinking that ends an assistant turn, also once the exchange rules dropped what
  followed it), ``trailing_whitespace_trimmed`` (a final assistant turn ending in
  whitespace), ``tools_declared`` (tool blocks in the
  history and no ``tools``: the tools used are declared, with ``tool_choice: none``, a
  name outside the API's ``^[a-zA-Z0-9_-]{1,128}$`` in that form),
  ``thinking_disabled`` (thinking on, and the turn that made the pending tool calls, or
  the final assistant turn a prefill continues, does not start with a thinking block: the
  API then requires thinking off),
  ``cache_breakpoint_removed`` (more than four breakpoints: the first and the last three
  stay, the longest cached prefix with its stable head; breakpoints inside a
  ``tool_result``'s content count, a top-level ``cache_control`` takes one of the four),
  ``cache_ttl_adjusted`` (a one-hour breakpoint after a five-minute one becomes five
  minutes; a ``ttl`` other than "5m" / "1h" the one it means, or none).
- :func:`strict_request`, on a provider's refusal, for what is valid elsewhere: signed
  thinking it will not verify (``thinking_block_dropped``, all of it) and a trailing
  assistant turn it will not continue (``prefill_dropped``).

Nothing mutates its input; an unchanged body comes back as the very same object.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from typing import Any

import orjson

from gateway.projection.anomalies import TOOL_RESULT_REORDERED, Anomaly
from gateway.projection.exchanges import says_nothing
from gateway.wires.anthropic_blocks import (
    BLOCK_FIELD_DROPPED,
    error_result_filled,
    image_repaired,
    result_images_repaired,
    stream_leftovers,
)

SYSTEM_MESSAGE_LIFTED = "system_message_lifted"
THINKING_BLOCK_DROPPED = "thinking_block_dropped"
THINKING_BLOCK_MOVED = "thinking_block_moved"
THINKING_DISABLED = "thinking_disabled"
TOOL_ID_REWRITTEN = "tool_id_rewritten"
TOOL_INPUT_PARSED = "tool_input_parsed"
TOOLS_DECLARED = "tools_declared"
CACHE_BREAKPOINT_MOVED = "cache_breakpoint_moved"
CACHE_BREAKPOINT_REMOVED = "cache_breakpoint_removed"
CACHE_TTL_ADJUSTED = "cache_ttl_adjusted"
TRAILING_WHITESPACE_TRIMMED = "trailing_whitespace_trimmed"
PREFILL_DROPPED = "prefill_dropped"
EMPTY_CONTENT_DROPPED = "empty_content_dropped"  # the exchange rules' name for blank text
ORPHAN_TOOL_RESULT_DROPPED = "orphan_tool_result_dropped"  # the exchange rules' name too
SERVER_TOOL_USE_DROPPED = "server_tool_use_dropped"

MAX_CACHE_BREAKPOINTS = 4
THINKING_TYPES = frozenset({"thinking", "redacted_thinking"})
_TOOL_ID = re.compile(r"^[a-zA-Z0-9_-]+$")
# A server tool's call and the result block that answers it, both in the assistant message.
_SERVER_CALLS = {"mcp_tool_result": "mcp_tool_use"}
_SERVER_CALL = "server_tool_use"
_NOT_ID = re.compile(r"[^a-zA-Z0-9_-]")
_SERVER_ID = re.compile(r"^srvtoolu_[a-zA-Z0-9_]+$")
_NOT_SERVER_ID = re.compile(r"[^a-zA-Z0-9_]")
DECLARED_TOOL_NOTE = ("Declared by the gateway: this tool was used earlier in the "
                      "conversation and the request declared no tools.")

Body = dict[str, Any]
Found = tuple[Body, tuple[Anomaly, ...]]


def _is_thinking(block: Any) -> bool:
    return type(block) is dict and block.get("type") in THINKING_TYPES


def _signed(block: dict[str, Any]) -> bool:
    if block.get("type") == "redacted_thinking":
        return isinstance(block.get("data"), str) and bool(block["data"])
    return isinstance(block.get("signature"), str) and bool(block["signature"])


def thinking_on(body: Body) -> bool:
    """True when the request turns extended thinking on."""
    thinking = body.get("thinking")
    return type(thinking) is dict and thinking.get("type") in ("enabled", "adaptive")


# -- before the view ---------------------------------------------------------------------


def repair_request(body: Body, *, interleaved: bool = False) -> Found:
    """``body`` with what can never be valid repaired (see the module docstring);
    ``interleaved``: the client asked for interleaved thinking (thinking between calls)."""
    messages = body.get("messages")
    if not isinstance(messages, list):
        return body, ()
    anomalies: list[Anomaly] = []
    lifted: list[Any] = []
    out: list[Any] = []
    messages = _results_out_of_assistant(messages, anomalies)
    messages = _empty_ids_numbered(messages, anomalies)
    messages = _reused_ids_renamed(messages, anomalies)
    ids = _tool_id_map(messages)
    awaited = {ref for m in messages if type(m) is dict and isinstance(m.get("content"), list)
               for ref in _called_from_code(m["content"])}
    for i, message in enumerate(messages):
        if type(message) is not dict:
            out.append(message)
            continue
        if message.get("role") == "system":
            lifted.append(message.get("content"))
            anomalies.append(Anomaly(SYSTEM_MESSAGE_LIFTED, i))
            continue
        content = message.get("content")
        if isinstance(content, list):
            strays: list[Any] = []
            blocks = _blocks(content, message.get("role") == "assistant", interleaved, ids, i,
                             anomalies, strays, awaited)
            if blocks is not content:
                message = {**message, "content": blocks}
            for marker in strays:  # the turn before ends the same prefix; else the block after
                if not _mark_last_block(out, marker):
                    message = {**message, "content": _marked_first(message["content"],
                                                                    marker)}
            if content and not message["content"] and message.get("role") == "assistant":
                continue  # a turn of only what had to go (thinking as a whole prefill)
        out.append(message)
    system = _joined_system(body.get("system"), lifted) if lifted else body.get("system")
    system = _system_without_blank_text(system, anomalies)
    if not anomalies:
        return body, ()
    repaired = {**body, "messages": out}
    if system is not body.get("system"):
        if system == []:
            repaired.pop("system", None)
        else:
            repaired["system"] = system
    return repaired, tuple(anomalies)


def _is_result(block: Any) -> bool:
    return type(block) is dict and block.get("type") == "tool_result"


def _results_out_of_assistant(messages: list[Any], anomalies: list[Anomaly]) -> list[Any]:
    """``messages`` with the ``tool_result`` blocks of assistant messages ("tool_result
    blocks can only be in user messages": a result written on the model's side) moved to
    the start of the user message after them (a new one when none follows)."""
    if not any(message_role(m) == "assistant" and isinstance(m.get("content"), list)
               and any(_is_result(b) for b in m["content"]) for m in messages):
        return messages
    out: list[Any] = []
    carried: list[Any] = []
    for i, message in enumerate(messages):
        role = message_role(message)
        if carried and role == "user":
            content = message.get("content")
            blocks = content if isinstance(content, list) else (
                [{"type": "text", "text": content}] if isinstance(content, str) and content
                else [])
            message = {**message, "content": [*carried, *blocks]}
            carried = []
        elif carried:
            out.append({"role": "user", "content": carried})
            carried = []
        content = message.get("content") if role == "assistant" else None
        if isinstance(content, list) and any(_is_result(b) for b in content):
            carried = [b for b in content if _is_result(b)]
            anomalies.extend(Anomaly(TOOL_RESULT_REORDERED, i, tool_call_id=_tool_ref(b))
                             for b in carried)
            kept = [b for b in content if not _is_result(b)]
            if not kept:
                continue
            message = {**message, "content": kept}
        out.append(message)
    if carried:
        out.append({"role": "user", "content": carried})
    return out


def _system_without_blank_text(system: Any, anomalies: list[Anomaly]) -> Any:
    """A ``system`` block list without its blank text blocks ("system: text content blocks
    must be non-empty"); a breakpoint one of them had goes to the block before it (after it
    when it opens the list)."""
    if not isinstance(system, list) or not any(_blank_text(b) for b in system):
        return system
    kept: list[Any] = []
    pending: Any = None  # a breakpoint of blank blocks that open the list: the next block's
    for block in system:
        if not _blank_text(block):
            if pending is not None and type(block) is dict and "cache_control" not in block:
                block = {**block, "cache_control": pending}
            pending = None
            kept.append(block)
            continue
        anomalies.append(Anomaly(EMPTY_CONTENT_DROPPED))
        marker = block.get("cache_control")
        if marker is not None and not kept:
            pending = pending or marker
        elif marker is not None and type(kept[-1]) is dict and "cache_control" not in kept[-1]:
            kept[-1] = {**kept[-1], "cache_control": marker}
    return kept


def _server_result_orphan(block: Any, before: list[Any]) -> bool:
    """A server tool's result block (``web_search_tool_result``, ...) whose call is not
    among the blocks ``before`` it in its assistant message."""
    if type(block) is not dict:
        return False
    kind = block.get("type")
    if not isinstance(kind, str) or kind == "tool_result" or not kind.endswith("_tool_result"):
        return False
    call = _SERVER_CALLS.get(kind, _SERVER_CALL)
    ref = block.get("tool_use_id")
    return not any(type(b) is dict and b.get("type") == call and b.get("id") == ref
                   for b in before)


def _called_from_code(content: list[Any]) -> set[str]:
    """Ids of the server tool calls (a code run) that a client ``tool_use`` of ``content``
    names as its ``caller`` (programmatic tool calling): the run's result comes in a later
    assistant message, after the client's results."""
    return {caller["tool_id"] for b in content if type(b) is dict and b.get("type") == "tool_use"
            and type(caller := b.get("caller")) is dict and isinstance(caller.get("tool_id"), str)}


def _blocks(content: list[Any], assistant: bool, interleaved: bool, ids: dict[str, str],
            i: int, anomalies: list[Anomaly], strays: list[Any],
            awaited: set[str]) -> list[Any]:
    blocks: list[Any] = []
    changed = False
    for block in content:
        replaced = stream_leftovers(block)
        if replaced is not None:  # (see anthropic_blocks)
            anomalies.append(Anomaly(BLOCK_FIELD_DROPPED, i, tool_call_id=_tool_ref(block)))
            *said, block = replaced
            blocks += [s for s in said if not (blocks and blocks[-1] == s)]
            changed = True
        block, kind = image_repaired(block)
        block, kinds = result_images_repaired(block)
        for repaired in [k for k in (kind,) if k is not None] + kinds:
            anomalies.append(Anomaly(repaired, i))
            changed = True
        if _is_thinking(block) and (not assistant or not _signed(block)):
            anomalies.append(Anomaly(THINKING_BLOCK_DROPPED, i))
            changed = True
            continue
        renamed = _renamed(block, ids)
        if assistant and _server_result_orphan(renamed, blocks) \
                and _tool_ref(block) not in awaited:
            anomalies.append(Anomaly(ORPHAN_TOOL_RESULT_DROPPED, i,
                                     tool_call_id=_tool_ref(block)))
            changed = True
            continue
        if renamed is not block:
            anomalies.append(Anomaly(TOOL_ID_REWRITTEN, i, tool_call_id=_tool_ref(block)))
            changed = True
        parsed = _object_input(renamed)
        if parsed is not renamed:
            anomalies.append(Anomaly(TOOL_INPUT_PARSED, i, tool_call_id=_tool_ref(block)))
            renamed, changed = parsed, True
        blocks.append(renamed)
    if _moved_cache_control(blocks, strays):
        anomalies.append(Anomaly(CACHE_BREAKPOINT_MOVED, i))
        changed = True
    for n, block in enumerate(blocks):
        cleaned = _tool_result_without_blank_text(block)
        if cleaned is not block:
            blocks[n] = cleaned
            anomalies.append(Anomaly(EMPTY_CONTENT_DROPPED, i, tool_call_id=_tool_ref(block)))
            changed = True
        filled, kind = error_result_filled(blocks[n])
        if kind is not None:
            blocks[n] = filled
            anomalies.append(Anomaly(kind, i, tool_call_id=_tool_ref(block)))
            changed = True
    if assistant and blocks and _is_thinking(blocks[-1]):
        kept = _without_trailing_thinking(blocks)
        anomalies.extend(Anomaly(THINKING_BLOCK_DROPPED, i) for _ in blocks[len(kept):])
        blocks, changed = kept, True
    if assistant and not interleaved and _misplaced_thinking(blocks):
        blocks = ([b for b in blocks if _is_thinking(b)]
                  + [b for b in blocks if not _is_thinking(b)])
        anomalies.append(Anomaly(THINKING_BLOCK_MOVED, i))
        changed = True
    return blocks if changed else content


def _without_trailing_thinking(blocks: list[Any]) -> list[Any]:
    """``blocks`` without the thinking blocks that end them ("The final block in an
    assistant message cannot be `thinking`")."""
    end = len(blocks)
    while end and _is_thinking(blocks[end - 1]):
        end -= 1
    return blocks[:end]


def _misplaced_thinking(blocks: list[Any]) -> bool:
    seen_other = False
    for block in blocks:
        if _is_thinking(block):
            if seen_other:
                return True
        else:
            seen_other = True
    return False


def _blank_text(block: Any) -> bool:
    return type(block) is dict and block.get("type") == "text" and not (
        isinstance(block.get("text"), str) and block["text"].strip())


def _tool_result_without_blank_text(block: Any) -> Any:
    """A ``tool_result`` whose content list holds blank text blocks, without them (its
    breakpoint, if one of them had it, on the result itself)."""
    if not (type(block) is dict and block.get("type") == "tool_result"
            and isinstance(block.get("content"), list)
            and any(_blank_text(b) for b in block["content"])):
        return block
    kept = [b for b in block["content"] if not _blank_text(b)]
    marker = next((b["cache_control"] for b in block["content"]
                   if _blank_text(b) and "cache_control" in b), None)
    cleaned = {**block, "content": kept}
    if marker is not None and "cache_control" not in block:
        cleaned["cache_control"] = marker
    return cleaned


def _carries(block: Any) -> bool:
    """True when ``block`` can carry a ``cache_control`` (not thinking, not blank text)."""
    return type(block) is dict and not _is_thinking(block) and not _blank_text(block)


def _marked_first(blocks: list[Any], marker: Any) -> list[Any]:
    """``blocks`` with ``marker`` on the first one that can carry it (none: as they are)."""
    n = next((n for n, b in enumerate(blocks) if _carries(b)), None)
    if n is None or "cache_control" in blocks[n]:
        return blocks
    return [*blocks[:n], {**blocks[n], "cache_control": marker}, *blocks[n + 1:]]


def _mark_last_block(messages: list[Any], marker: Any) -> bool:
    """Put ``marker`` on the last block of the last message of ``messages`` that can carry
    it (in place on the list; not over a breakpoint already there); False when none can."""
    for m in range(len(messages) - 1, -1, -1):
        message = messages[m]
        content = message.get("content") if type(message) is dict else None
        if isinstance(content, str) and content.strip():
            content = [{"type": "text", "text": content}]
        if not isinstance(content, list) or not content:
            continue
        last = content[-1]
        if _carries(last):
            if "cache_control" not in last:
                messages[m] = {**message, "content": [*content[:-1],
                                                      {**last, "cache_control": marker}]}
            return True
    return False


def _moved_cache_control(blocks: list[Any], strays: list[Any]) -> bool:
    """Move ``cache_control`` off empty text blocks and thinking blocks, which cannot carry
    one (in place on the new list); a marker no block of the list can carry goes to
    ``strays``."""
    moved = False
    for n, block in enumerate(blocks):
        if _is_thinking(block) and "cache_control" in block:
            marker = block["cache_control"]
            blocks[n] = {k: v for k, v in block.items() if k != "cache_control"}
            later = next((m for m in range(n + 1, len(blocks)) if _carries(blocks[m])), None)
            if later is None:
                strays.append(marker)
            elif "cache_control" not in blocks[later]:
                blocks[later] = {**blocks[later], "cache_control": marker}
            moved = True
            continue
        if not (type(block) is dict and block.get("type") == "text" and "cache_control" in block
                and not (isinstance(block.get("text"), str) and block["text"].strip())):
            continue
        marker = block["cache_control"]
        blocks[n] = {k: v for k, v in block.items() if k != "cache_control"}
        # The block before ends the same cached prefix; opening the turn, the last block of
        # the turn before does (the caller's: a stray), and the breakpoint is kept.
        before = next((m for m in range(n - 1, -1, -1) if _carries(blocks[m])), None)
        if before is None:
            strays.append(marker)
        elif "cache_control" not in blocks[before]:
            blocks[before] = {**blocks[before], "cache_control": marker}
        moved = True
    return moved


def _tool_ref(block: Any) -> str | None:
    if type(block) is not dict:
        return None
    ref = block.get("id") if block.get("type") in ("tool_use", _SERVER_CALL) \
        else block.get("tool_use_id")
    return ref if isinstance(ref, str) else None


def _empty_ids_numbered(messages: list[Any], anomalies: list[Anomaly]) -> list[Any]:
    """``messages`` with ``tool_use`` blocks whose id is empty (a history converted from a
    provider without call ids) numbered ``toolu_gw_<n>`` by their place in the history, and
    the ``tool_result`` blocks with an empty id after them given the ids of the calls they
    answer, in order: one id for all of them would pair every result with the first call."""
    if not any(type(b) is dict and b.get("type") in ("tool_use", "tool_result")
               and _tool_ref(b) == "" for m in messages if type(m) is dict
               and isinstance(m.get("content"), list) for b in m["content"]):
        return messages
    out: list[Any] = []
    pending: list[str] = []  # the latest assistant turn's numbered calls not yet answered
    made = 0
    for i, message in enumerate(messages):
        content = message.get("content") if type(message) is dict else None
        if not isinstance(content, list):
            out.append(message)
            continue
        assistant = message.get("role") == "assistant"
        if assistant and out and message_role(out[-1]) != "assistant":
            pending = []
        blocks: list[Any] = []
        for block in content:
            blocks.append(block)
            if type(block) is dict and _tool_ref(block) == "":
                if assistant and block.get("type") == "tool_use":
                    made += 1
                    pending.append(f"toolu_gw_{made}")
                    blocks[-1] = {**block, "id": pending[-1]}
                    anomalies.append(Anomaly(TOOL_ID_REWRITTEN, i, tool_call_id=pending[-1]))
                elif not assistant and block.get("type") == "tool_result" and pending:
                    blocks[-1] = {**block, "tool_use_id": pending.pop(0)}
                    anomalies.append(Anomaly(TOOL_ID_REWRITTEN, i,
                                             tool_call_id=blocks[-1]["tool_use_id"]))
        changed = any(a is not b for a, b in zip(blocks, content, strict=True))
        out.append({**message, "content": blocks} if changed else message)
    return out


def _calls_in(message: Any) -> list[dict[str, Any]]:
    content = message.get("content") if type(message) is dict else None
    if message_role(message) != "assistant" or not isinstance(content, list):
        return []
    return [b for b in content if type(b) is dict and b.get("type") == "tool_use"
            and isinstance(b.get("id"), str)]


def _reused_ids_renamed(messages: list[Any], anomalies: list[Anomaly]) -> list[Any]:
    """``messages`` with a ``tool_use`` whose id an earlier call of another name or input
    used (Kimi's ``functions.read:0``, Gemini-backed agents' ``call_0``: calls numbered from
    zero on every turn or in every batch) given ``<id>_<n>``, and the ``tool_result`` blocks
    answering it given it too: results take the calls of their id in order, those made
    since the last user turn. So is the same call made again once the first was answered
    when its result says something else (``git status`` run twice as ``call_0``). A call
    written again as it was, answered alike (a resumed session's copy), is left to the
    strict rung's dedupe."""
    used = [b["id"] for m in messages for b in _calls_in(m)]
    if len(used) == len(set(used)):
        return messages
    taken = set(used)
    latest: dict[str, tuple[Any, Any]] = {}  # id -> name and input of its latest call
    waiting: dict[str, list[str]] = {}  # id -> its unanswered calls' ids, in order
    turned: set[str] = set()  # ids whose latest call a user turn followed
    said: dict[str, Any] = {}  # id -> the content of the latest result answering it
    out: list[Any] = []
    for i, message in enumerate(messages):
        content = message.get("content") if type(message) is dict else None
        assistant = message_role(message) == "assistant"
        if not isinstance(content, list):
            out.append(message)
            turned.update(() if assistant else latest)
            continue
        blocks: list[Any] = []
        for block in content:
            ref = _tool_ref(block)
            kind = block.get("type") if type(block) is dict else None
            if assistant and kind == "tool_use" and ref is not None:
                made = (block.get("name"), block.get("input"))
                if ref in turned:
                    waiting.pop(ref, None)  # calls left unanswered before the user's turn
                    turned.discard(ref)
                another = latest.get(ref, made) != made
                if not another and ref in said:  # the same call again, the first answered
                    again = _next_result(messages, i, ref)
                    another = again is not None and _meaning(again) != said[ref] \
                        and not says_nothing(again)
                if another:
                    n = 2
                    while f"{ref}_{n}" in taken:
                        n += 1
                    taken.add(f"{ref}_{n}")
                    block = {**block, "id": f"{ref}_{n}"}
                    anomalies.append(Anomaly(TOOL_ID_REWRITTEN, i, tool_call_id=block["id"]))
                if ref not in latest or block["id"] != ref:
                    waiting.setdefault(ref, []).append(block["id"])
                latest[ref] = made
            elif not assistant and kind == "tool_result" and ref is not None and waiting.get(ref):
                if not says_nothing(block.get("content")):
                    said[ref] = _meaning(block.get("content"))
                sent_as = waiting[ref].pop(0)
                if sent_as != ref:
                    block = {**block, "tool_use_id": sent_as}
                    anomalies.append(Anomaly(TOOL_ID_REWRITTEN, i, tool_call_id=sent_as))
            blocks.append(block)
        if not assistant:
            turned.update(latest)
        changed = any(a is not b for a, b in zip(blocks, content, strict=True))
        out.append({**message, "content": blocks} if changed else message)
    return out


def _next_result(messages: list[Any], i: int, ref: str) -> Any:
    """The content of the first ``tool_result`` for ``ref`` in a user turn after message
    ``i``; None when none answers it."""
    for message in messages[i + 1:]:
        content = message.get("content") if type(message) is dict else None
        if message_role(message) != "assistant" and isinstance(content, list):
            for block in content:
                if type(block) is dict and block.get("type") == "tool_result" \
                        and _tool_ref(block) == ref:
                    return block.get("content")
    return None


def _meaning(content: Any) -> Any:
    """What a result says, whatever its form: its text blocks' texts and its other blocks
    without their breakpoints (a string is its one text block)."""
    if isinstance(content, str):
        return ((content,),)
    if not isinstance(content, list):
        return content
    return tuple((b.get("text"),) if type(b) is dict and b.get("type") == "text"
                 else {k: v for k, v in b.items() if k != "cache_control"}
                 if type(b) is dict else b
                 for b in content)


def _server_result(block: Any) -> bool:
    """A server tool's result block (``web_search_tool_result``, ...; not MCP's, whose
    ids have their own form)."""
    kind = block.get("type") if type(block) is dict else None
    return isinstance(kind, str) and kind.endswith("_tool_result") \
        and kind not in ("tool_result", *_SERVER_CALLS)


def _tool_id_map(messages: list[Any]) -> dict[str, str]:
    """Tool ids outside the allowed alphabet -> a valid id, the same for use and result;
    a server tool's id, which must be ``srvtoolu_`` and ``[a-zA-Z0-9_]`` ("server_tool_use.id:
    String should match pattern '^srvtoolu_[a-zA-Z0-9_]+$'": one a relay renamed), alike."""
    found: dict[str, str] = {}
    for message in messages:
        content = message.get("content") if type(message) is dict else None
        if not isinstance(content, list):
            continue
        for block in content:
            kind = block.get("type") if type(block) is dict else None
            ref = _tool_ref(block)
            if ref is None or ref in found:
                continue
            if kind in ("tool_use", "tool_result") and not _TOOL_ID.match(ref):
                found[ref] = f"{_NOT_ID.sub('_', ref)[:40] or 'toolu'}_{_digest(ref)}"
            elif (kind == _SERVER_CALL or _server_result(block)) \
                    and not _SERVER_ID.match(ref):
                found[ref] = f"srvtoolu_{_NOT_SERVER_ID.sub('_', ref)[:40]}_{_digest(ref)}"
    return found


def _digest(ref: str) -> str:
    """What tells renamed ids apart (only an id that has to be renamed needs it)."""
    return hashlib.sha256(ref.encode()).hexdigest()[:10]


def _object_input(block: Any) -> Any:
    """A ``tool_use`` whose ``input`` is a JSON string (a history converted from Chat
    Completions, where arguments are strings) with the object it holds ("tool_use.input:
    Input should be a valid dictionary"); a string holding no object is kept under
    ``input``."""
    if type(block) is not dict or block.get("type") != "tool_use":
        return block
    text = block.get("input")
    if text is None:  # null, or absent (a call of no arguments saved without its input)
        return {**block, "input": {}}
    if not isinstance(text, str):
        return block
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError:
        value = None
    return {**block, "input": value if isinstance(value, dict) else {"input": text}}


def _renamed(block: Any, ids: dict[str, str]) -> Any:
    if not ids or type(block) is not dict or (block.get("type") not in (
            "tool_use", "tool_result", _SERVER_CALL) and not _server_result(block)):
        return block
    ref = _tool_ref(block)
    caller = block.get("caller")  # the code run a client call was made from, by its id
    run = caller.get("tool_id") if type(caller) is dict else None
    if (ref is None or ref not in ids) and not (isinstance(run, str) and run in ids):
        return block
    renamed = dict(block)
    if ref is not None and ref in ids:
        renamed["id" if block.get("type") in ("tool_use", _SERVER_CALL) else "tool_use_id"] = \
            ids[ref]
    if type(caller) is dict and isinstance(run, str) and run in ids:
        renamed["caller"] = {**caller, "tool_id": ids[run]}
    return renamed


def _joined_system(system: Any, lifted: list[Any]) -> Any:
    texts = [system] if system is not None else []
    texts += lifted
    if all(isinstance(t, str) for t in texts):
        return "\n\n".join(t for t in texts if t)
    blocks: list[Any] = []
    for t in texts:
        if isinstance(t, str):
            if t:
                blocks.append({"type": "text", "text": t})
        elif isinstance(t, list):
            blocks.extend(t)
    return blocks


# -- the body about to be sent -------------------------------------------------------------


def finish_request(body: Body) -> Found:
    """``body`` made acceptable as a whole (see the module docstring)."""
    anomalies: list[Anomaly] = []
    body = _no_unanswered_server_calls(body, anomalies)
    while True:  # each can uncover the other: "text ", thinking / thinking, " "
        settled = len(anomalies)
        body = _no_trailing_thinking(body, anomalies)
        body = _trim_final_whitespace(body, anomalies)
        if len(anomalies) == settled:
            break
    body = _declare_tools(body, anomalies)
    body = _thinking_for_tool_turn(body, anomalies)
    body = _cache_breakpoints(body, anomalies)
    return body, tuple(anomalies)


def _no_unanswered_server_calls(body: Body, anomalies: list[Anomaly]) -> Body:
    """No assistant message but the last has a ``server_tool_use`` without its result
    after it in the same message (a message left empty goes whole), unless a client call
    of that message was made from it (its result comes after the client's results)."""
    def edit(i: int, content: list[Any], last: bool) -> list[Any]:
        if last:
            return content  # a paused turn sent back to be continued
        awaited = _called_from_code(content)
        drop = [n for n, block in enumerate(content)
                if type(block) is dict and block.get("type") == _SERVER_CALL
                and block.get("id") not in awaited and not any(
                    type(b) is dict and b.get("tool_use_id") == block.get("id")
                    for b in content[n + 1:])]
        anomalies.extend(Anomaly(SERVER_TOOL_USE_DROPPED, i,
                                 tool_call_id=str(content[n].get("id"))) for n in drop)
        return [b for n, b in enumerate(content) if n not in drop] if drop else content
    return _edit_assistant_turns(body, edit)


def _no_trailing_thinking(body: Body, anomalies: list[Anomaly]) -> Body:
    """No assistant turn ends with thinking (the exchange rules may have dropped what
    followed it); a turn of thinking only goes whole."""
    def edit(i: int, content: list[Any], last: bool) -> list[Any]:
        if not content or not _is_thinking(content[-1]):
            return content
        kept = _without_trailing_thinking(content)
        anomalies.extend(Anomaly(THINKING_BLOCK_DROPPED, i) for _ in content[len(kept):])
        return kept
    return _edit_assistant_turns(body, edit)


def _edit_assistant_turns(body: Body, edit: Callable[[int, list[Any], bool], list[Any]],
                          ) -> Body:
    """``body`` with each assistant message's block list replaced by ``edit(index, blocks,
    is_last_message)``: the same list leaves the message as it is, an empty one drops it."""
    messages = body.get("messages")
    if not isinstance(messages, list):
        return body
    out: list[Any] = []
    for i, message in enumerate(messages):
        content = message.get("content") if type(message) is dict else None
        if message_role(message) == "assistant" and isinstance(content, list):
            kept = edit(i, content, i == len(messages) - 1)
            if kept is not content:
                if not kept:
                    continue
                message = {**message, "content": kept}
        out.append(message)
    if len(out) == len(messages) and all(a is b for a, b in zip(out, messages, strict=True)):
        return body
    return {**body, "messages": out}


def message_role(message: Any) -> Any:
    """A message's ``role`` (None for anything that is not a message)."""
    return message.get("role") if type(message) is dict else None


def _trim_final_whitespace(body: Body, anomalies: list[Anomaly]) -> Body:
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        return body
    last = messages[-1]
    if type(last) is not dict or last.get("role") != "assistant":
        return body
    content = last.get("content")
    new_content: Any
    if isinstance(content, str):
        if content == content.rstrip():
            return body
        new_content = content.rstrip()
    elif isinstance(content, list):
        new_content = list(content)
        while new_content and type(new_content[-1]) is dict \
                and new_content[-1].get("type") == "text" \
                and isinstance(new_content[-1].get("text"), str):
            text = new_content[-1]["text"]
            if text == text.rstrip():
                break
            new_content.pop()
            if text.rstrip():
                new_content.append({**content[len(new_content)], "text": text.rstrip()})
                break
        if len(new_content) == len(content) and all(
                a is b for a, b in zip(new_content, content, strict=True)):
            return body
    else:
        return body
    anomalies.append(Anomaly(TRAILING_WHITESPACE_TRIMMED, len(messages) - 1))
    kept = messages[:-1] if new_content in ("", []) else [
        *messages[:-1], {**last, "content": new_content}]
    return {**body, "messages": kept}


_TOOL_NAME_OUTSIDE = re.compile(r"[^a-zA-Z0-9_-]")


def _tool_names(messages: list[Any]) -> tuple[list[str], bool]:
    names: list[str] = []
    any_tool_block = False
    for message in messages:
        content = message.get("content") if type(message) is dict else None
        if not isinstance(content, list):
            continue
        for block in content:
            if type(block) is not dict:
                continue
            if block.get("type") in ("tool_use", "tool_result"):
                any_tool_block = True
            name = block.get("name")
            if block.get("type") == "tool_use" and isinstance(name, str) and name:
                # a declared tool's name must match ``^[a-zA-Z0-9_-]{1,128}$`` (a history's
                # MCP or Gemini names hold dots and colons): declared in that form
                name = _TOOL_NAME_OUTSIDE.sub("_", name)[:128]
                if name not in names:
                    names.append(name)
    return names, any_tool_block


def _declare_tools(body: Body, anomalies: list[Anomaly]) -> Body:
    tools = body.get("tools")
    messages = body.get("messages")
    if (isinstance(tools, list) and tools) or not isinstance(messages, list):
        return body
    names, any_tool_block = _tool_names(messages)
    if not any_tool_block or not names:
        return body
    anomalies.append(Anomaly(TOOLS_DECLARED))
    declared = {**body, "tools": [{"name": name, "description": DECLARED_TOOL_NOTE,
                                   "input_schema": {"type": "object"}} for name in names]}
    if "tool_choice" not in body:
        declared["tool_choice"] = {"type": "none"}
    return declared


def _thinking_for_tool_turn(body: Body, anomalies: list[Anomaly]) -> Body:
    """Thinking on, and the assistant turn whose tool calls the last user turn answers, or
    the final assistant turn (a prefill), does not start with thinking: the API refuses
    it, so thinking goes off (turns as the API combines consecutive messages of one
    role)."""
    messages = body.get("messages")
    if not thinking_on(body) or not isinstance(messages, list):
        return body
    first = unthought_tool_turn(messages)
    if first is None:
        return body
    anomalies.append(Anomaly(THINKING_DISABLED, first))
    return _thinking_off(body)


def _thinking_off(body: Body) -> Body:
    """``body`` without ``thinking``, and without the context edits that need it on ("the
    `clear_thinking_20251015` strategy requires `thinking` to be enabled"): a
    ``context_management`` left with no edits goes too."""
    out = {k: v for k, v in body.items() if k != "thinking"}
    management = out.get("context_management")
    edits = management.get("edits") if isinstance(management, dict) else None
    if not isinstance(edits, list):
        return out
    kept = [e for e in edits if not (type(e) is dict and isinstance(e.get("type"), str)
                                     and e["type"].startswith("clear_thinking"))]
    if len(kept) == len(edits):
        return out
    assert isinstance(management, dict)
    if kept or len(management) > 1:
        out["context_management"] = {**management, "edits": kept}
    else:
        del out["context_management"]
    return out


def unthought_tool_turn(messages: list[Any]) -> int | None:
    """The index of the assistant turn that must start with thinking when thinking is on
    (the one whose tool calls the last user turn answers, or a final one a prefill
    continues) and does not; None when there is none."""
    if len(messages) < 2:
        return None
    first = len(messages)
    while first and message_role(messages[first - 1]) == "assistant":
        first -= 1
    if first < len(messages):  # ends with an assistant turn: the prefill must think first
        content = messages[first].get("content")
        opening = content[0] if isinstance(content, list) and content else (
            content if isinstance(content, str) and content else None)
        if opening is None or _is_thinking(opening):
            return None
        return first
    # The turns as the API combines them: the trailing user messages, the assistant
    # messages before them.
    start = len(messages)
    while start and message_role(messages[start - 1]) == "user":
        start -= 1
    first = start
    while first and message_role(messages[first - 1]) == "assistant":
        first -= 1
    if start == len(messages) or first == start:
        return None
    answers = [b for m in messages[start:] if isinstance(m.get("content"), list)
               for b in m["content"]]
    content = messages[first].get("content")
    if not any(type(b) is dict and b.get("type") == "tool_result" for b in answers):
        return None
    if isinstance(content, list) and content and _is_thinking(content[0]):
        return None
    return first


# Where a breakpoint stands: (field, item, block in a message or -1, block inside a
# tool_result's content or -1).
Where = tuple[str, int, int, int]


def _breakpoints(body: Body) -> list[Where]:
    """Where ``cache_control`` stands, in prefix order: tools, system, message blocks (the
    blocks inside a ``tool_result`` before the result itself)."""
    found: list[Where] = []
    tools = body.get("tools")
    if isinstance(tools, list):
        found += [("tools", n, -1, -1) for n, t in enumerate(tools)
                  if type(t) is dict and "cache_control" in t]
    system = body.get("system")
    if isinstance(system, list):
        found += [("system", n, -1, -1) for n, b in enumerate(system)
                  if type(b) is dict and "cache_control" in b]
    messages = body.get("messages")
    if isinstance(messages, list):
        for m, message in enumerate(messages):
            content = message.get("content") if type(message) is dict else None
            if not isinstance(content, list):
                continue
            for n, b in enumerate(content):
                if type(b) is not dict:
                    continue
                inner = b.get("content") if b.get("type") == "tool_result" else None
                if isinstance(inner, list):
                    found += [("messages", m, n, k) for k, x in enumerate(inner)
                              if type(x) is dict and "cache_control" in x]
                if "cache_control" in b:
                    found.append(("messages", m, n, -1))
    return found


def _cache_breakpoints(body: Body, anomalies: list[Anomaly]) -> Body:
    found = _breakpoints(body)
    if not found:
        return body
    edits: dict[Where, Any] = {}  # position -> new cache_control (None: off)
    # Automatic caching (a top-level cache_control) takes one of the four.
    most = MAX_CACHE_BREAKPOINTS - (type(body.get("cache_control")) is dict)
    if len(found) > most:
        keep = {found[0], *found[-(most - 1):]}
        for where in found:
            if where not in keep:
                edits[where] = None
                anomalies.append(Anomaly(CACHE_BREAKPOINT_REMOVED,
                                         where[1] if where[0] == "messages" else None))
        found = [w for w in found if w in keep]
    short_seen = False
    for where in found:
        given = _block_at(body, where).get("cache_control")
        marker = _known_ttl(given)
        long_ttl = isinstance(marker, dict) and marker.get("ttl") == "1h"
        if isinstance(marker, dict) and long_ttl and short_seen:
            marker = {k: v for k, v in marker.items() if k != "ttl"}
        elif not long_ttl:
            short_seen = True
        if marker is not given:
            edits[where] = marker
            anomalies.append(Anomaly(CACHE_TTL_ADJUSTED,
                                     where[1] if where[0] == "messages" else None))
    return _with_markers(body, edits) if edits else body


_TTLS = {"5m": "5m", "1h": "1h", "300": "5m", "300s": "5m", "3600": "1h", "3600s": "1h",
         "60m": "1h"}


def _known_ttl(marker: Any) -> Any:
    """A breakpoint whose ``ttl`` is not "5m" or "1h" ("cache_control.ephemeral.ttl: Input
    should be '5m' or '1h'"; an hour written in seconds, 3600) with the one it means, or
    without it (five minutes) when it means neither; any other marker as it is."""
    if not isinstance(marker, dict) or "ttl" not in marker or marker["ttl"] in ("5m", "1h"):
        return marker
    ttl = _TTLS.get(str(marker["ttl"]).strip().lower())
    if ttl is None:
        return {k: v for k, v in marker.items() if k != "ttl"}
    return {**marker, "ttl": ttl}


def _block_at(body: Body, where: Where) -> dict[str, Any]:
    field, n, b, k = where
    item = body[field][n]
    block = item if b < 0 else item["content"][b]
    if k >= 0:
        block = block["content"][k]
    assert type(block) is dict
    return block


def _with_markers(body: Body, edits: dict[Where, Any]) -> Body:
    out = dict(body)
    for field in ("tools", "system", "messages"):
        if not any(w[0] == field for w in edits):
            continue
        items = list(body[field])
        for (f, n, b, k), marker in edits.items():
            if f != field:
                continue
            item = items[n]
            if b < 0:
                items[n] = _marked(item, marker)
                continue
            content = list(item["content"])
            if k >= 0:
                inner = list(content[b]["content"])
                inner[k] = _marked(inner[k], marker)
                content[b] = {**content[b], "content": inner}
            else:
                content[b] = _marked(content[b], marker)
            items[n] = {**item, "content": content}
        out[field] = items
    return out


def _marked(block: dict[str, Any], marker: Any) -> dict[str, Any]:
    if marker is None:
        return {k: v for k, v in block.items() if k != "cache_control"}
    return {**block, "cache_control": marker}


# -- on a refusal ------------------------------------------------------------------------

_THINKING_REFUSAL = re.compile(r"thinking|signature", re.I)
_SIGNATURE_REFUSAL = re.compile(r"signature", re.I)
_PREFILL_REFUSAL = re.compile(
    r"prefill|(?:must|should) end with (?:a |an )?\W?user|final (?:message|turn) must be"
    r"|last message must be|does not support (?:an )?(?:assistant|trailing)", re.I)


def refuses_signatures(refusal: str) -> bool:
    """Whether a refusal is of the thinking blocks' signatures (not, say, of a thinking
    budget): "Invalid `signature` in `thinking` block"."""
    return _SIGNATURE_REFUSAL.search(refusal) is not None


def signatures(messages: Any) -> list[str]:
    """The signatures of the signed thinking blocks in ``messages`` (a redacted block's
    ``data``)."""
    found: list[str] = []
    for message in messages if isinstance(messages, list) else ():
        content = message.get("content") if type(message) is dict else None
        found += [s for b in content if (s := signature(b)) is not None] \
            if isinstance(content, list) else []
    return found


def signature(block: Any) -> str | None:
    """A thinking block's signature (a redacted block's ``data``), None for other blocks."""
    if not _is_thinking(block) or not _signed(block):
        return None
    value = block["data"] if block.get("type") == "redacted_thinking" else block["signature"]
    return str(value)


def drop_thinking(body: Body, refused: Callable[[Any], bool]) -> Found:
    """``body`` without the thinking blocks ``refused`` says the provider refused before
    (on an earlier turn: ``wires.refused``); a message left empty goes."""
    messages = body.get("messages")
    if not isinstance(messages, list):
        return body, ()
    anomalies: list[Anomaly] = []
    out = _without_thinking(messages, refused, anomalies)
    return ({**body, "messages": out}, tuple(anomalies)) if anomalies else (body, ())


def _without_thinking(messages: list[Any], drop: Callable[[Any], bool],
                      anomalies: list[Anomaly]) -> list[Any]:
    out = []
    for i, message in enumerate(messages):
        content = message.get("content") if type(message) is dict else None
        if isinstance(content, list) and any(_is_thinking(b) and drop(b) for b in content):
            kept = [b for b in content if not (_is_thinking(b) and drop(b))]
            anomalies.extend(Anomaly(THINKING_BLOCK_DROPPED, i)
                             for _ in range(len(content) - len(kept)))
            if not kept:
                continue
            message = {**message, "content": kept}
        out.append(message)
    return out


def strict_request(body: Body, refusal: str = "") -> Found:
    """``body`` after a refusal (``refusal``: the provider's message): thinking it will not
    verify dropped, a trailing assistant turn it will not continue dropped."""
    messages = body.get("messages")
    if not isinstance(messages, list):
        return body, ()
    anomalies: list[Anomaly] = []
    out = list(messages)
    if _THINKING_REFUSAL.search(refusal):
        out = _without_thinking(messages, _is_thinking, anomalies)
    if (_PREFILL_REFUSAL.search(refusal) and out and type(out[-1]) is dict
            and out[-1].get("role") == "assistant"):
        anomalies.append(Anomaly(PREFILL_DROPPED, len(out) - 1))
        out.pop()
    if not anomalies:
        return body, ()
    return {**body, "messages": out}, tuple(anomalies)
