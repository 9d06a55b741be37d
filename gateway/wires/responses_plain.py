"""Plain Responses inputs: the shapes none of the wire's own rules can change (pure).

An agent on the Responses API (Codex, the Agents SDK) resends an ``input`` of messages,
function calls with their outputs and reasoning items. When every item is in the form the
API mints and takes (ids of the item's own prefix, each used once; call ids used once, at
most 64 characters, each output answering an earlier call of the input; text where the
API takes text; reasoning with its id, its summary, its encrypted content when nothing is
stored, and the item it was made with after it), the up-front rules
(:func:`~gateway.wires.responses_rules.repair_input`) and the rules on the input about to
be sent (``answerable_input``) find nothing: :func:`plain_input` checks a whole stateless
body, :func:`plain_input_after` the items a turn added to a plain one.

It must never call an input plain that those rules would change; anything it does not know
(item references, built-in tool calls, custom tools, images, a field it has not seen) is
not plain, and the rules then run.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gateway.wires.base import entries_before
from gateway.wires.responses_rules import MAX_CALL_ID

_MESSAGE_KEYS = frozenset({"type", "id", "role", "content", "status"})
_CALL_KEYS = frozenset({"type", "id", "call_id", "name", "arguments", "status"})
_OUTPUT_KEYS = frozenset({"type", "id", "call_id", "output", "status"})
_REASONING_KEYS = frozenset({"type", "id", "summary", "encrypted_content", "status"})
_INPUT_PART_KEYS = frozenset({"type", "text"})
_OUTPUT_PART_KEYS = frozenset({"type", "text", "annotations", "logprobs"})
_ROLES = ("user", "assistant", "system", "developer")
# Items a reasoning item may be made with (the item after it).
_AFTER_REASONING = ("function_call", "reasoning")


@dataclass(frozen=True, slots=True)
class PlainInput:
    """What a plain input's later turns are checked against: its item ids and call ids
    (by the index of the item that has each), the calls already answered."""

    ids: dict[str, int]
    calls: dict[str, int]
    answered: frozenset[str]


def plain_input(body: dict[str, Any]) -> PlainInput | None:
    """What :class:`PlainInput` keeps of a stateless, validated ``body`` when its input is
    plain, else None."""
    return plain_input_after(body, PlainInput({}, {}, frozenset()), 0)


def plain_input_after(body: dict[str, Any], before: PlainInput, cut: int) -> PlainInput | None:
    """What :class:`PlainInput` keeps of ``body`` when its input is plain, given that its
    first ``cut`` items are those of a plain input (with the same other fields) that
    ``before`` was made of. None when it is not plain (or not known to be)."""
    items = body.get("input")
    if not isinstance(items, list) or not items or cut > len(items) \
            or body.get("previous_response_id") is not None \
            or body.get("conversation") is not None:
        return None
    store = body.get("store") is not False
    ids = entries_before(before.ids, cut)
    calls = entries_before(before.calls, cut)
    answered = (set(before.answered) if len(calls) == len(before.calls)
                else {ref for ref in before.answered if ref in calls})
    if cut and _kind(items[cut - 1]) == "reasoning" and not _follows_reasoning(
            items[cut] if cut < len(items) else None):
        return None
    for index in range(cut, len(items)):
        item = items[index]
        if type(item) is not dict:
            return None
        kind = _kind(item)
        ref = item.get("id")
        if ref is not None and (not isinstance(ref, str) or not ref or ref in ids):
            return None
        if kind == "message":
            if not _message(item, ref):
                return None
        elif kind == "function_call":
            call = item.get("call_id")
            if not (_CALL_KEYS.issuperset(item) and (ref is None or ref.startswith("fc"))
                    and isinstance(call, str) and call and len(call) <= MAX_CALL_ID
                    and call not in calls and isinstance(item.get("name"), str)
                    and item["name"] and isinstance(item.get("arguments"), str)):
                return None
            calls[call] = index
        elif kind == "function_call_output":
            call = item.get("call_id")
            if not (_OUTPUT_KEYS.issuperset(item) and isinstance(call, str)
                    and call in calls and call not in answered
                    and isinstance(item.get("output"), str)):
                return None
            answered.add(call)
        elif kind == "reasoning":
            if not (_REASONING_KEYS.issuperset(item) and ref is not None
                    and ref.startswith("rs") and _summary(item.get("summary"))
                    and _encrypted(item.get("encrypted_content"), store)
                    and _follows_reasoning(items[index + 1] if index + 1 < len(items)
                                           else None)):
                return None
        else:
            return None
        if ref is not None:
            ids[ref] = index
    return PlainInput(ids, calls, frozenset(answered))


def _kind(item: Any) -> str | None:
    if type(item) is not dict:
        return None
    kind = item.get("type")
    if kind is None and "role" in item:
        return "message"
    return kind if isinstance(kind, str) else None


def _message(item: dict[str, Any], ref: str | None) -> bool:
    role = item.get("role")
    if not (_MESSAGE_KEYS.issuperset(item) and isinstance(role, str) and role in _ROLES
            and (ref is None or ref.startswith("msg"))):
        return False
    content = item.get("content")
    if isinstance(content, str):
        return bool(content) and not content.isspace()
    if not isinstance(content, list) or not content:
        return False
    kind, keys = (("output_text", _OUTPUT_PART_KEYS) if role == "assistant"
                  else ("input_text", _INPUT_PART_KEYS))
    for part in content:
        if type(part) is not dict or part.get("type") != kind or not keys.issuperset(part):
            return False
        text = part.get("text")
        if not isinstance(text, str) or not text or text.isspace():
            return False
    return True


def _summary(summary: Any) -> bool:
    return isinstance(summary, list) and all(
        type(p) is dict and p.get("type") == "summary_text" and isinstance(p.get("text"), str)
        for p in summary)


def _encrypted(content: Any, store: bool) -> bool:
    if content is None:
        return store  # (the store resolves it by its id)
    return isinstance(content, str) and bool(content)


def _follows_reasoning(item: Any) -> bool:
    """The item a reasoning item is made with: a call, more reasoning, or words."""
    kind = _kind(item)
    if kind in _AFTER_REASONING:
        return True
    return kind == "message" and item.get("role") == "assistant" and _message(
        item, item.get("id") if isinstance(item.get("id"), str) else None)
