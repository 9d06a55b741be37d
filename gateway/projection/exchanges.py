"""Pair tool calls with their results and lay the history out exchange by exchange.

An *exchange* is one assistant message with tool calls plus the tool messages that answer
it. A tool message answers the most recent earlier assistant message that made a call with
its ``tool_call_id`` (clients reuse ids such as ``call_0`` across turns, which is valid).

This is the hot part of every repair, so the pipeline steps that look at one message at a
time happen on the way instead of in passes of their own (project.py lists the steps):
:func:`lay_out` walks the history once, cleaning blank text, pairing, and merging adjacent
messages, then emits the exchanges, rendering each result as it places it. Merging during
the walk gives the same result as merging the laid-out history: two messages that are
adjacent there are adjacent non-tool messages here, unless the first one made tool calls
(its results come between them).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from gateway.projection.anomalies import (
    ASSISTANT_MESSAGES_MERGED,
    DUPLICATE_TOOL_RESULT_DROPPED,
    EMPTY_CONTENT_DROPPED,
    ORPHAN_TOOL_RESULT_DROPPED,
    TOOL_RESULT_REORDERED,
    TOOL_RESULT_SYNTHESIZED,
    USER_MESSAGES_MERGED,
    Anomaly,
)
from gateway.projection.content import (
    clean_message,
    has_empty_tool_calls,
    is_joinable,
    join_contents,
    merge_assistant_messages,
)
from gateway.projection.render import IS_ERROR_FIELD, MODEL_NOTE_FIELD, render_reporting

SYNTHETIC_TOOL_RESULT_TEXT = (
    "Tool result is not available in the current context. "
    "Do not assume the tool completed successfully."
)
_SYNTHETIC_JSON = orjson.dumps(SYNTHETIC_TOOL_RESULT_TEXT)[1:-1]


def says_nothing(value: Any) -> bool:
    """A tool result (of any wire, in any shape) holding the "not available" text: it says
    nothing of what its call did."""
    try:
        return _SYNTHETIC_JSON in orjson.dumps(value)
    except orjson.JSONEncodeError:  # (a number past 64 bits: no text of ours)
        return False

# (index in the input list, message): what the strict passes work on.
Entry = tuple[int, Any]

# One exchange: (position of its assistant message in the kept messages, its position in
# the walked messages, its call ids in order, and the position of the result answering
# each call, None while unanswered).
_Exchange = tuple[int, int, list[str], list[int | None]]

# What the last kept message is, for the merges of the walk.
_OTHER, _PLAIN_USER, _ASSISTANT = 0, 1, 2
_JOINABLE = (str, list)  # a tuple: ``str | list`` would build a union object per check
_ONLY_SLOT = [0]  # the slots of an exchange's single call id (never mutated)


@dataclass(slots=True)
class Found:
    """The anomalies of a walk, one list per pipeline step (reported in this order)."""

    converted: list[Anomaly] = field(default_factory=list)  # function messages as results
    blank: list[Anomaly] = field(default_factory=list)
    paired: list[Anomaly] = field(default_factory=list)
    walked: int = 0  # how many of ``paired`` the walk found (the rest: laying results out)
    rendered: list[Anomaly] = field(default_factory=list)
    assistants_merged: list[Anomaly] = field(default_factory=list)
    users_merged: list[Anomaly] = field(default_factory=list)

    def in_step_order(self, placed: Sequence[Anomaly] = ()) -> tuple[Anomaly, ...]:
        """All of them in step order, a strict placeholder's (``placed``) in its place."""
        return (
            *self.converted,
            *self.blank,
            *self.paired,
            *self.rendered,
            *self.assistants_merged,
            *placed,
            *self.users_merged,
        )


# The role of a neutral message standing for a wire item that has no chat counterpart (a
# Responses ``reasoning`` or ``compaction`` item): the projection leaves it where it is.
OPAQUE_ROLE = "x-wire-item"


def role_of(message: Any) -> Any:
    """The ``role`` of a message, None for anything that is not a dict."""
    return message.get("role") if type(message) is dict else None


def turn_start(messages: Sequence[Any]) -> int:
    """Where the turn the model is asked to answer starts: after the last assistant message
    (a user message, or tool results such as a file the agent just read); 0 without one."""
    for i in range(len(messages) - 1, -1, -1):
        if role_of(messages[i]) == "assistant":
            return i + 1
    return 0


def lay_out(
    messages: list[Any],
    indexes: Sequence[int],
    found: Found,
    *,
    guard: bool,
    merge_assistants: bool,
    strict: bool = False,
) -> list[Any]:
    """Repair a history and put every tool result right after the call it answers.

    ``indexes[i]`` is the input index of ``messages[i]`` (for the anomalies). On the way,
    blank text is removed (empty messages dropped); with ``strict`` adjacent plain user
    messages merge, and with ``merge_assistants`` so do consecutive assistant messages.
    Orphan results are dropped, duplicates keep the last result, missing results are
    synthesized, and every result from the input is rendered. With ``guard``, tool
    messages are not paired at all when no assistant message survives the cleanup (the
    SPEC sizing guard for slices).
    ``strict`` applies the strict cleanup and rendering (blank assistant content beside
    tool calls becomes None, empty tool output gets its placeholder text).
    """
    pairing = not (guard and _no_assistant(messages))
    latest: dict[str, tuple[list[int | None], list[int]]] = {}  # id -> its latest exchange
    exchanges: list[_Exchange] = []
    kept: list[Any] = []  # the non-tool messages (and unpaired tool ones), in order
    removed: list[int] = []  # positions that do not reach the output as they stand
    last = _OTHER
    for pos, message in enumerate(messages):
        if message.__class__ is not dict:
            if message is None:  # clean_message drops it, without an anomaly
                removed.append(pos)
            else:
                kept.append(message)
                last = _OTHER
            continue
        role = message.get("role")
        if role == "tool":
            if not pairing:
                kept.append(render_reporting(indexes[pos], message, found.rendered,
                                             strict=strict))
                last = _OTHER
                continue
            tid = message.get("tool_call_id")
            answered = latest.get(tid) if isinstance(tid, str) else None
            if answered is None:
                removed.append(pos)
                found.paired.append(_about(ORPHAN_TOOL_RESULT_DROPPED, indexes[pos], message))
                continue
            results, slots = answered
            for slot in slots:
                if results[slot] is None:
                    results[slot] = pos
                    break
            else:  # every call with this id is answered: the later result wins
                previous = results[slots[-1]]
                assert previous is not None
                removed.append(previous)
                found.paired.append(
                    _about(DUPLICATE_TOOL_RESULT_DROPPED, indexes[previous], messages[previous])
                )
                results[slots[-1]] = pos
            continue

        # Blank text (clean_message), with the two shapes it always keeps checked inline.
        content = message.get("content")
        if (content.__class__ is str and content and not content.isspace()
                and (role != "assistant" or not has_empty_tool_calls(message))):
            pass  # non-blank text
        elif (
            content is None
            and role == "assistant"
            and (calls := message.get("tool_calls")).__class__ is list
            and calls
        ):
            pass  # tool calls without content
        else:
            message = _clean(message, indexes[pos], found.blank, strict)
            if message is None:
                removed.append(pos)
                continue
            content = message.get("content")

        if role == "user":
            # content.__class__ first: isinstance with a tuple is slow, and str common.
            if len(message) == 2 and (content.__class__ is str or isinstance(content, _JOINABLE)):
                if last == _PLAIN_USER and strict:
                    joined = join_contents(kept[-1]["content"], content)
                    kept[-1] = {"role": "user", "content": joined}
                    found.users_merged.append(Anomaly(USER_MESSAGES_MERGED, indexes[pos]))
                    continue
                last = _PLAIN_USER
            else:
                last = _OTHER
            kept.append(message)
            continue
        if role != "assistant":
            last = _OTHER
            kept.append(message)
            continue

        calls = message.get("tool_calls")
        if merge_assistants and is_joinable(content):
            if last == _ASSISTANT:
                kept[-1] = merge_assistant_messages(kept[-1], message)
                found.assistants_merged.append(Anomaly(ASSISTANT_MESSAGES_MERGED, indexes[pos]))
            else:
                kept.append(message)
            last = _ASSISTANT
        else:
            kept.append(message)
            last = _OTHER
        if not calls:
            continue
        ids: list[str] = []  # of the well-formed calls, in order
        for call in calls if isinstance(calls, list) else ():
            if type(call) is dict and isinstance(cid := call.get("id"), str):
                ids.append(cid)
        if ids:
            results = [None] * len(ids)
            exchanges.append((len(kept) - 1, pos, ids, results))
            if len(ids) == 1:
                latest[ids[0]] = (results, _ONLY_SLOT)
            else:
                _register(latest, ids, results)
            last = _OTHER  # its results come next
    found.walked = len(found.paired)
    if not exchanges:
        return kept
    return _emit(messages, indexes, kept, exchanges, removed, found, strict)


def _no_assistant(messages: list[Any]) -> bool:
    """True when no assistant message would survive the blank-text cleanup."""
    return not any(
        role_of(m) == "assistant" and clean_message(m) is not None for m in messages
    )


def _clean(message: dict[str, Any], index: int, found: list[Anomaly], strict: bool) -> Any:
    """clean_message(), reporting a change; None when the message is dropped."""
    cleaned = clean_message(message, strict=strict)
    if cleaned is not message:
        found.append(Anomaly(EMPTY_CONTENT_DROPPED, index))
    return cleaned


def _register(
    latest: dict[str, tuple[list[int | None], list[int]]],
    ids: list[str],
    results: list[int | None],
) -> None:
    """Make an exchange with several calls the latest one for each of its call ids."""
    slots_by_id: dict[str, list[int]] = {}
    for slot, cid in enumerate(ids):
        slots_by_id.setdefault(cid, []).append(slot)
    for cid, slots in slots_by_id.items():
        latest[cid] = (results, slots)


def _emit(
    messages: list[Any],
    indexes: Sequence[int],
    kept: list[Any],
    exchanges: list[_Exchange],
    removed: list[int],
    found: Found,
    strict: bool,
) -> list[Any]:
    """Lay the kept messages out exchange by exchange, placing and rendering results."""
    # A result is in place when, counting only surviving positions, it sits at
    # rank(assistant) + 1 + (its rank among the results present for that assistant).
    rank = _ranks(len(messages), removed)
    last = len(kept) - 1
    out: list[Any] = []
    start = 0  # first kept message not emitted yet
    for at, pos, ids, results in exchanges:
        out += kept[start : at + 1]
        start = at + 1
        expected_rank = rank[pos] + 1
        if not strict and _answered_in_a_block(results, rank, expected_rank):
            # Parallel results right after their calls, in another order than the calls:
            # valid on every wire as sent (strict upstreams get them in call order); a call
            # without its result keeps its slot for the stand-in.
            present = iter(sorted((r for r in results if r is not None), key=rank.__getitem__))
            results = [None if r is None else next(present) for r in results]
        for slot, result in enumerate(results):
            if result is None:
                cid = ids[slot]
                trailing = at == last  # a call at the very end of the history
                found.paired.append(Anomaly(TOOL_RESULT_SYNTHESIZED, None, cid, trailing=trailing))
                out.append(synthetic_result(cid))
                continue
            message = messages[result]
            if rank[result] != expected_rank:
                found.paired.append(_about(TOOL_RESULT_REORDERED, indexes[result], message))
            expected_rank += 1
            content = message.get("content")
            if (  # inlined: a non-blank string result with nothing to render stays as it is
                content.__class__ is not str
                or not content
                or content.isspace()
                or IS_ERROR_FIELD in message
                or MODEL_NOTE_FIELD in message
            ):
                message = render_reporting(indexes[result], message, found.rendered,
                                           strict=strict)
            out.append(message)
    out += kept[start:]
    return out


def results_follow_calls(messages: Sequence[Any]) -> bool:
    """True when every tool result comes somewhere after the assistant message that made its
    call, one result per call and every call answered: valid as sent on a wire that pairs
    results with calls by id (the Responses API), whatever lies between them."""
    called: set[str] = set()
    answered: set[str] = set()
    for message in messages:
        if message.__class__ is not dict:
            return False
        role = message.get("role")
        if role == "assistant":
            calls = message.get("tool_calls")
            for call in calls if calls.__class__ is list else ():
                if call.__class__ is dict and call.get("id").__class__ is str:
                    called.add(call["id"])
        elif role == "tool":
            call_id = message.get("tool_call_id")
            if call_id.__class__ is not str or call_id not in called or call_id in answered:
                return False
            answered.add(call_id)
    return answered == called


def _answered_in_a_block(results: Sequence[int | None], rank: list[int], first: int) -> bool:
    """True when the results the calls have sit right after the assistant message, one
    after another (in any order; some calls may have none)."""
    ranks = sorted(rank[r] for r in results if r is not None)
    if len(results) < 2 or not ranks:
        return False
    return ranks[0] == first and ranks[-1] == first + len(ranks) - 1 and (
        len(set(ranks)) == len(ranks))


def _ranks(count: int, removed: list[int]) -> list[int]:
    """For each position, how many positions before it are not ``removed``."""
    if not removed:
        return list(range(count))
    rank: list[int] = []
    start = 0
    for skipped, pos in enumerate(sorted(removed)):
        rank.extend(range(start - skipped, pos + 1 - skipped))  # positions start..pos
        start = pos + 1
    rank.extend(range(start - len(removed), count - len(removed)))
    return rank


def synthetic_result(tool_call_id: str) -> dict[str, Any]:
    """The tool message standing in for a result the history does not have."""
    return {"role": "tool", "tool_call_id": tool_call_id, "content": SYNTHETIC_TOOL_RESULT_TEXT}


def tool_call_id_of(message: Any) -> str | None:
    """The ``tool_call_id`` of a tool message when it is a string, else None."""
    tid = message.get("tool_call_id") if role_of(message) == "tool" else None
    return tid if isinstance(tid, str) else None


def _about(kind: str, index: int | None, message: Any) -> Anomaly:
    return Anomaly(kind, index, tool_call_id_of(message))
