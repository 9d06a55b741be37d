"""Pair tool calls with their results and lay the history out exchange by exchange.

An *exchange* is one assistant message with tool calls plus the tool messages that answer
it. A tool message answers the most recent earlier assistant message that made a call with
its ``tool_call_id`` (clients reuse ids such as ``call_0`` across turns, which is valid).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gateway.projection.anomalies import (
    DUPLICATE_TOOL_RESULT_DROPPED,
    ORPHAN_TOOL_RESULT_DROPPED,
    TOOL_RESULT_REORDERED,
    TOOL_RESULT_SYNTHESIZED,
    Anomaly,
)

SYNTHETIC_TOOL_RESULT_TEXT = (
    "Tool result is not available in the current context. "
    "Do not assume the tool completed successfully."
)

# (index in the input list or None for something the projection created, message)
Entry = tuple[int | None, Any]


def role_of(message: Any) -> Any:
    """The ``role`` of a message, None for anything that is not a dict."""
    return message.get("role") if type(message) is dict else None


def call_ids(message: dict[str, Any]) -> list[str]:
    """Ids of an assistant message's tool calls, in order; malformed calls are skipped."""
    calls = message.get("tool_calls")
    if not isinstance(calls, list):
        return []
    return [c["id"] for c in calls if type(c) is dict and isinstance(c.get("id"), str)]


@dataclass(slots=True)
class _Exchange:
    pos: int  # position of the assistant message in the entries
    ids: list[str]
    results: list[int | None]  # entry position of the result answering each call
    slots_by_id: dict[str, list[int]] = field(default_factory=dict)


def lay_out(entries: list[Entry], *, guard: bool) -> tuple[list[Entry], list[Anomaly]]:
    """Put every tool result right after the call it answers, in call order.

    Orphans are dropped, duplicates keep the last result, missing results are synthesized.
    With ``guard``, a slice holding no assistant message at all is returned untouched: its
    tool messages are not paired, so not dropped as orphans (the SPEC sizing guard).
    """
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
        if free is None:  # every call with this id is answered: the later result wins
            free = slots[-1]
            previous = answered.results[free]
            assert previous is not None
            gone.add(previous)
            anomalies.append(_about(DUPLICATE_TOOL_RESULT_DROPPED, *entries[previous]))
        answered.results[free] = pos
    if not exchanges and not gone:
        return entries, anomalies
    return _emit(entries, exchanges, gone, last_non_tool, anomalies), anomalies


def _emit(
    entries: list[Entry],
    exchanges: dict[int, _Exchange],
    gone: set[int],
    last_non_tool: int,
    anomalies: list[Anomaly],
) -> list[Entry]:
    """Lay the entries out exchange by exchange, reporting moved and synthesized results."""
    # A result is in place when, counting only surviving entries, it sits at
    # rank(assistant) + 1 + (its rank among the results present for that assistant).
    rank = [0] * len(entries)
    r = 0
    for pos in range(len(entries)):
        rank[pos] = r
        if pos not in gone:
            r += 1

    out: list[Entry] = []
    for pos, entry in enumerate(entries):
        if role_of(entry[1]) == "tool":
            continue  # emitted with its exchange, or gone
        out.append(entry)
        exchange = exchanges.get(pos)
        if exchange is None:
            continue
        expected_rank = rank[pos] + 1
        for cid, result in zip(exchange.ids, exchange.results, strict=True):
            if result is None:
                trailing = pos == last_non_tool
                anomalies.append(Anomaly(TOOL_RESULT_SYNTHESIZED, None, cid, trailing=trailing))
                out.append((None, synthetic_result(cid)))
                continue
            if rank[result] != expected_rank:
                anomalies.append(_about(TOOL_RESULT_REORDERED, *entries[result]))
            expected_rank += 1
            out.append(entries[result])
    return out


def synthetic_result(tool_call_id: str) -> dict[str, Any]:
    """The tool message standing in for a result the history does not have."""
    return {"role": "tool", "tool_call_id": tool_call_id, "content": SYNTHETIC_TOOL_RESULT_TEXT}


def tool_call_id_of(message: Any) -> str | None:
    """The ``tool_call_id`` of a tool message when it is a string, else None."""
    tid = message.get("tool_call_id") if role_of(message) == "tool" else None
    return tid if isinstance(tid, str) else None


def _about(kind: str, index: int | None, message: Any) -> Anomaly:
    return Anomaly(kind, index, tool_call_id_of(message))
