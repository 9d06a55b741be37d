"""The straightforward projection as it was before the hot-path rewrite.

Kept only as an oracle for tests/projection/test_equivalence.py: one pass per step, the
role looked up in every pass, and the fast-path check. The leaf helpers (blank-text
cleanup of one message, rendering of one tool result, joining contents) are shared with
the package; the passes, the pairing and the fast path are copies.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gateway.projection.anomalies import (
    ASSISTANT_MESSAGES_MERGED,
    DUPLICATE_TOOL_CALL_DEDUPED,
    DUPLICATE_TOOL_RESULT_DROPPED,
    EMPTY_CONTENT_DROPPED,
    LEADING_NON_USER_DROPPED,
    ORPHAN_TOOL_RESULT_DROPPED,
    TOOL_RESULT_RENDERED,
    TOOL_RESULT_REORDERED,
    TOOL_RESULT_SYNTHESIZED,
    USER_MESSAGES_MERGED,
    USER_PLACEHOLDER_INSERTED,
    Anomaly,
    Projection,
)
from gateway.projection.call_ids import add_call_ids
from gateway.projection.content import (
    assistant_has_payload,
    clean_message,
    is_blank,
    is_joinable,
    join_contents,
    parts_are_clean,
)
from gateway.projection.exchanges import SYNTHETIC_TOOL_RESULT_TEXT
from gateway.projection.render import IS_ERROR_FIELD, MODEL_NOTE_FIELD, render_tool_result
from gateway.projection.strict import (
    USER_PLACEHOLDER_TEXT,
    add_call_types,
    convert_legacy_functions,
    move_tool_media,
    readable_assistant_turns,
    rewrite_names,
    trim_final_assistant,
)

Entry = tuple[int | None, Any]
_PREAMBLE_ROLES = ("system", "developer")


def project(messages: list[Any], *, partial: bool = False) -> Projection:
    """project(): the fast path, else the full pipeline."""
    if is_clean(messages, partial=partial):
        return Projection(list(messages))
    return run_pipeline(messages, strict=False, partial=partial)


def run_pipeline(messages: list[Any], *, strict: bool, partial: bool = False) -> Projection:
    """The full projection, one step per pass."""
    anomalies: list[Anomaly] = []
    entries = _drop_blank(messages, anomalies, strict=strict)
    user_present = True
    if strict:
        # The strict rung's wire conversions are leaf passes, shared with the package.
        entries = _step(convert_legacy_functions(entries), anomalies)
        entries = _step(rewrite_names(entries), anomalies)
        entries = _step(add_call_types(entries), anomalies)
        entries = _step(add_call_ids(entries), anomalies)
        entries = _step(readable_assistant_turns(entries), anomalies)
        entries = _step(dedupe_tool_calls(entries), anomalies)
        user_present = any(role_of(m) == "user" for _, m in entries)
        if user_present:
            entries = _step(drop_leading_non_user(entries), anomalies)
    entries = _step(lay_out(entries, guard=partial and not strict, strict=strict), anomalies)
    entries = _render(entries, anomalies, strict=strict)
    if strict:
        entries = _step(merge_assistants(entries), anomalies)
        if not user_present:
            entries = _step(insert_user_placeholder(entries), anomalies)
    if strict:
        entries = _merge_users(entries, anomalies)
        moved, found = move_tool_media([m for _, m in entries])
        anomalies.extend(found)
        moved, found = trim_final_assistant(moved)
        anomalies.extend(found)
        return Projection(moved, tuple(anomalies))
    return Projection([m for _, m in entries], tuple(anomalies))


def _step(result: tuple[list[Entry], list[Anomaly]], anomalies: list[Anomaly]) -> list[Entry]:
    entries, found = result
    anomalies.extend(found)
    return entries


def _drop_blank(messages: list[Any], anomalies: list[Anomaly], *, strict: bool) -> list[Entry]:
    entries: list[Entry] = []
    for index, message in enumerate(messages):
        cleaned = clean_message(message, strict=strict)
        if cleaned is not message:
            anomalies.append(Anomaly(EMPTY_CONTENT_DROPPED, index))
        if cleaned is not None:
            entries.append((index, cleaned))
    return entries


def _render(entries: list[Entry], anomalies: list[Anomaly], *, strict: bool) -> list[Entry]:
    out = entries
    for pos, (index, message) in enumerate(entries):
        if index is None or role_of(message) != "tool":
            continue
        result = render_tool_result(message, strict=strict)
        if result.message is message:
            continue
        if out is entries:
            out = list(entries)
        out[pos] = (index, result.message)
        tid = tool_call_id_of(message)
        if result.parts_dropped:
            anomalies.append(Anomaly(EMPTY_CONTENT_DROPPED, index, tid))
        if result.rendered:
            anomalies.append(Anomaly(TOOL_RESULT_RENDERED, index, tid))
    return out


def _is_plain_user(message: Any) -> bool:
    return (
        type(message) is dict
        and len(message) == 2
        and message.get("role") == "user"
        and isinstance(message.get("content"), str | list)
    )


def _merge_users(entries: list[Entry], anomalies: list[Anomaly]) -> list[Entry]:
    out: list[Entry] = []
    merged = False
    for index, message in entries:
        if out and _is_plain_user(message) and _is_plain_user(out[-1][1]):
            first_index, first = out[-1]
            content = join_contents(first["content"], message["content"])
            out[-1] = (first_index, {"role": "user", "content": content})
            anomalies.append(Anomaly(USER_MESSAGES_MERGED, index))
            merged = True
        else:
            out.append((index, message))
    return out if merged else entries


# --- pairing -----------------------------------------------------------------------------


def role_of(message: Any) -> Any:
    return message.get("role") if type(message) is dict else None


def call_ids(message: dict[str, Any]) -> list[str]:
    calls = message.get("tool_calls")
    if not isinstance(calls, list):
        return []
    return [c["id"] for c in calls if type(c) is dict and isinstance(c.get("id"), str)]


def tool_call_id_of(message: Any) -> str | None:
    tid = message.get("tool_call_id") if role_of(message) == "tool" else None
    return tid if isinstance(tid, str) else None


def _about(kind: str, index: int | None, message: Any) -> Anomaly:
    return Anomaly(kind, index, tool_call_id_of(message))


@dataclass(slots=True)
class _Exchange:
    pos: int
    ids: list[str]
    results: list[int | None]
    slots_by_id: dict[str, list[int]] = field(default_factory=dict)


def lay_out(entries: list[Entry], *, guard: bool, strict: bool = False
            ) -> tuple[list[Entry], list[Anomaly]]:
    """Put every tool result right after the call it answers, in call order (a block of
    results right after their calls keeps its order, unless ``strict``; a call without a
    result has its stand-in in its own slot)."""
    if guard and not any(role_of(m) == "assistant" for _, m in entries):
        return entries, []
    anomalies: list[Anomaly] = []
    latest: dict[str, _Exchange] = {}
    exchanges: dict[int, _Exchange] = {}
    gone: set[int] = set()
    last_non_tool = -1
    for pos, (index, message) in enumerate(entries):
        role = role_of(message)
        if role != "tool":
            last_non_tool = pos
            ids = call_ids(message) if role == "assistant" else None
            if ids:
                ex = _Exchange(pos, ids, [None] * len(ids))
                for slot, cid in enumerate(ids):
                    ex.slots_by_id.setdefault(cid, []).append(slot)
                    latest[cid] = ex
                exchanges[pos] = ex
            continue
        tid = message.get("tool_call_id")
        answered = latest.get(tid) if isinstance(tid, str) else None
        if answered is None:
            gone.add(pos)
            anomalies.append(_about(ORPHAN_TOOL_RESULT_DROPPED, index, message))
            continue
        slots = answered.slots_by_id[tid]
        free = next((s for s in slots if answered.results[s] is None), None)
        if free is None:
            free = slots[-1]
            previous = answered.results[free]
            assert previous is not None
            gone.add(previous)
            anomalies.append(_about(DUPLICATE_TOOL_RESULT_DROPPED, *entries[previous]))
        answered.results[free] = pos
    if not exchanges and not gone:
        return entries, anomalies
    return _emit(entries, exchanges, gone, last_non_tool, anomalies, strict), anomalies


def _emit(
    entries: list[Entry],
    exchanges: dict[int, _Exchange],
    gone: set[int],
    last_non_tool: int,
    anomalies: list[Anomaly],
    strict: bool = False,
) -> list[Entry]:
    rank = [0] * len(entries)
    r = 0
    for pos in range(len(entries)):
        rank[pos] = r
        if pos not in gone:
            r += 1
    out: list[Entry] = []
    for pos, entry in enumerate(entries):
        if role_of(entry[1]) == "tool":
            continue
        out.append(entry)
        exchange = exchanges.get(pos)
        if exchange is None:
            continue
        expected_rank = rank[pos] + 1
        results = exchange.results
        if not strict and len(results) > 1 and any(r is not None for r in results):
            ranks = [rank[r] for r in results if r is not None]
            if sorted(ranks) == list(range(expected_rank, expected_rank + len(ranks))):
                present = iter(sorted((r for r in results if r is not None),
                                      key=lambda r: rank[r]))
                results = [None if r is None else next(present) for r in results]
        for cid, result in zip(exchange.ids, results, strict=True):
            if result is None:
                trailing = pos == last_non_tool
                anomalies.append(Anomaly(TOOL_RESULT_SYNTHESIZED, None, cid, trailing=trailing))
                out.append((None, _synthetic_result(cid)))
                continue
            if rank[result] != expected_rank:
                anomalies.append(_about(TOOL_RESULT_REORDERED, *entries[result]))
            expected_rank += 1
            out.append(entries[result])
    return out


def _synthetic_result(tool_call_id: str) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": tool_call_id, "content": SYNTHETIC_TOOL_RESULT_TEXT}


# --- strict passes -----------------------------------------------------------------------


def dedupe_tool_calls(entries: list[Entry]) -> tuple[list[Entry], list[Anomaly]]:
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


def drop_leading_non_user(entries: list[Entry]) -> tuple[list[Entry], list[Anomaly]]:
    first_user = next(i for i, (_, m) in enumerate(entries) if role_of(m) == "user")
    anomalies: list[Anomaly] = []
    out: list[Entry] = []
    for index, message in entries[:first_user]:
        if role_of(message) in _PREAMBLE_ROLES:
            out.append((index, message))
        else:
            anomalies.append(Anomaly(LEADING_NON_USER_DROPPED, index, tool_call_id_of(message)))
    if not anomalies:
        return entries, anomalies
    out.extend(entries[first_user:])
    return out, anomalies


def merge_assistants(entries: list[Entry]) -> tuple[list[Entry], list[Anomaly]]:
    anomalies: list[Anomaly] = []
    out: list[Entry] = []
    for index, message in entries:
        if out and _mergeable(message) and _mergeable(out[-1][1]):
            first_index, first = out[-1]
            out[-1] = (first_index, _merge_two(first, message))
            anomalies.append(Anomaly(ASSISTANT_MESSAGES_MERGED, index))
        else:
            out.append((index, message))
    return (out if anomalies else entries), anomalies


def insert_user_placeholder(entries: list[Entry]) -> tuple[list[Entry], list[Anomaly]]:
    start = 0
    while start < len(entries) and role_of(entries[start][1]) in _PREAMBLE_ROLES:
        start += 1
    if start == len(entries):
        return entries, []
    placeholder: Entry = (None, {"role": "user", "content": USER_PLACEHOLDER_TEXT})
    return (
        [*entries[:start], placeholder, *entries[start:]],
        [Anomaly(USER_PLACEHOLDER_INSERTED)],
    )


def _mergeable(message: Any) -> bool:
    return role_of(message) == "assistant" and is_joinable(message.get("content"))


def _merge_two(first: dict[str, Any], second: dict[str, Any]) -> dict[str, Any]:
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


# --- fast path ---------------------------------------------------------------------------


def is_clean(messages: list[Any], *, partial: bool = False) -> bool:
    """True when project() would return ``messages`` unchanged with no anomaly."""
    # The open exchange: the tool_calls list of the last assistant message and how many of
    # its calls are answered so far (`done`). Malformed calls (no string id) are skipped.
    calls: list[Any] = []
    done = 0
    seen_assistant = False
    tool_before_assistant = False
    for m in messages:
        if m.__class__ is not dict:
            if done < len(calls) and _owes(calls, done):
                return False
            calls = []
            continue
        role = m.get("role")
        if role == "tool":
            if done < len(calls):
                call = calls[done]
                if call.__class__ is not dict or call.get("id").__class__ is not str:
                    done = _skip_malformed(calls, done)
                    if done == len(calls):
                        return False  # nothing left to answer: orphan or duplicate
                    call = calls[done]
                if m.get("tool_call_id") != call["id"]:  # a block in another order?
                    later = next((j for j in range(done + 1, len(calls)) if _is_call(calls[j])
                                  and calls[j]["id"] == m.get("tool_call_id")), None)
                    if later is None:
                        return False
                    calls = list(calls)
                    calls[done], calls[later] = calls[later], calls[done]
                done += 1
            elif seen_assistant or not partial:
                return False  # orphan or duplicate
            else:
                tool_before_assistant = True  # fine only under the sizing guard
            if IS_ERROR_FIELD in m or MODEL_NOTE_FIELD in m:
                return False
            c = m.get("content")
            if c.__class__ is str:
                pass  # empty output is valid as sent
            elif c.__class__ is list:
                if not parts_are_clean(c):
                    return False
            elif c is None:
                return False
            continue
        if done < len(calls):
            if _owes(calls, done):
                return False  # a call without its result
            calls = []
        c = m.get("content")
        if role == "user":
            if c.__class__ is str:
                if not c or c.isspace():
                    return False
            elif c.__class__ is list:
                if not parts_are_clean(c):
                    return False
            elif c is None:
                return False
            continue
        if role == "assistant":
            seen_assistant = True
            tool_calls = m.get("tool_calls")
            if tool_calls.__class__ is list and tool_calls:
                calls = tool_calls
                done = 0
                if c is None or c.__class__ is str:
                    continue
            elif tool_calls.__class__ is list:
                return False
            elif c is None or (c.__class__ is str and (not c or c.isspace())):
                if not assistant_has_payload(m):
                    return False
                continue
        elif role != "system" and role != "developer":
            continue
        if c.__class__ is str:
            if not c or c.isspace():
                return False
        elif c.__class__ is list:
            if not parts_are_clean(c):
                return False
        elif c is None:
            return False
    if done < len(calls) and _owes(calls, done):
        return False
    return not (tool_before_assistant and seen_assistant)


def _is_call(call: Any) -> bool:
    return type(call) is dict and isinstance(call.get("id"), str)


def _skip_malformed(calls: list[Any], start: int) -> int:
    """Index of the next well-formed call at or after ``start`` (len(calls) if none)."""
    while start < len(calls) and not _is_call(calls[start]):
        start += 1
    return start


def _owes(calls: list[Any], start: int) -> bool:
    """True when a well-formed call at or after ``start`` still waits for its result."""
    return _skip_malformed(calls, start) < len(calls)
