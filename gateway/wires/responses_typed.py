"""Reading a new Responses body whose input is plain, without building it (pure).

The Responses twin of :mod:`gateway.wires.anthropic_typed`: the input items are decoded
into one typed struct each (``msgspec``: every key no plain item has refused, the types
checked in C), walked once for the plain verdict of
:func:`~gateway.wires.responses_plain.plain_input`, the state its later turns are checked
against, and what :mod:`gateway.wires.responses_deferred` reads of the view (its length,
counts, fingerprint and whether the projection changes it); the request gets
:class:`LazyMessages` (the client's items, parsed from their bytes when something reads
them) and a deferred view. An input without a message item is left to the general way
(which refuses an input nothing of which can be sent).

It only ever says "plain" for what ``plain_input`` calls plain; anything else returns
None and the caller reads the body the general way. ``tests/wires/test_responses_typed.py``
checks both on the same bodies.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import msgspec

from gateway.projection.lazy_messages import LazyMessages
from gateway.telemetry.context import (
    CALL_OVERHEAD,
    CHARS_PER_TOKEN,
    MESSAGE_OVERHEAD,
    CountedMessages,
)
from gateway.wires.base import Message
from gateway.wires.chat_typed import read_history_body
from gateway.wires.responses_plain import PlainInput
from gateway.wires.responses_rules import MAX_CALL_ID

_UNSET = msgspec.UNSET
_ROLES = frozenset({"user", "assistant", "system", "developer"})


class _Part(msgspec.Struct, forbid_unknown_fields=True, gc=False):
    type: str
    text: str
    annotations: Any = _UNSET
    logprobs: Any = _UNSET


class _Summary(msgspec.Struct, gc=False):  # (other keys are let through, as plain does)
    type: str
    text: str


class _Item(msgspec.Struct, forbid_unknown_fields=True, gc=False):
    """Any plain item: which fields it has tells its kind's keys apart (see ``_walk``)."""

    type: str | msgspec.UnsetType | None = _UNSET
    id: str | msgspec.UnsetType | None = _UNSET
    role: str | msgspec.UnsetType = _UNSET
    content: str | list[_Part] | msgspec.UnsetType = _UNSET
    status: Any = _UNSET
    call_id: str | msgspec.UnsetType = _UNSET
    name: str | msgspec.UnsetType = _UNSET
    arguments: str | msgspec.UnsetType = _UNSET
    output: str | msgspec.UnsetType = _UNSET
    summary: list[_Summary] | msgspec.UnsetType = _UNSET
    encrypted_content: str | msgspec.UnsetType | None = _UNSET


_ITEMS = msgspec.json.Decoder(list[_Item])


@dataclass(frozen=True, slots=True)
class PlainItems:
    """A body :func:`read_plain_input_typed` found plain (see there)."""

    body: dict[str, Any]  # the top-level fields parsed; "input" holds ``items``
    items: LazyMessages
    plain: PlainInput
    start: int  # offset of the input array's opening bracket in the body
    close: int  # offset of its closing bracket
    neutral: int  # how many neutral messages its view holds
    counted: CountedMessages  # their context counts
    lead: list[Message]  # the neutral messages the session fingerprint hashes
    clean: bool  # the projection returns its view unchanged
    extensible: bool  # it ends with words or an output (a later turn may extend it)


def read_plain_input_typed(raw: bytes) -> PlainItems | None:
    """``raw`` read as a stateless Responses body whose input is plain, without building
    it; None when it is not, or not in a shape this reader knows (then read it the general
    way). The top-level fields are checked by the caller, as on the general way."""
    read = read_history_body(raw, _ITEMS, "input")
    if read is None:
        return None
    body, items = read.body, read.decoded
    if body.get("previous_response_id") is not None or body.get("conversation") is not None:
        return None
    walked = _walk(items, body.get("store") is not False)
    if walked is None:
        return None
    plain, neutral, counted, lead, clean, extensible = walked
    return PlainItems(body, read.lazy, plain, read.start, read.close, neutral, counted, lead,
                      clean, extensible)


def _walk(items: list[_Item], store: bool
          ) -> tuple[PlainInput, int, CountedMessages, list[Message], bool, bool] | None:
    """(plain state, neutral messages, counts, fingerprint messages, clean, extensible) of
    plain typed items, else None: ``plain_input`` and ``responses_deferred._walk`` in one
    flat loop over locals (it runs for every item of every new body)."""
    ids: dict[str, int] = {}
    calls: dict[str, int] = {}
    answered: set[str] = set()
    overhead, per_token = MESSAGE_OVERHEAD, CHARS_PER_TOKEN
    t = s = o = n = 0
    turn = at_t = at_s = at_o = 0
    lead: list[Message] = []
    user_found = False
    clean = True
    said_any = False  # a message item came
    run: set[str] = set()  # the call ids of the run of calls being read
    chars = 0  # their names' and arguments' characters
    said: _Item | None = None  # the assistant message item among them
    open_calls: set[str] = set()  # calls of the last run not answered yet
    answer_id = answer = ""  # an output's call id and text
    last = len(items) - 1
    for index, item in enumerate(items):
        kind = item.type
        ref = item.id
        if isinstance(ref, str) and (not ref or ref in ids):
            return None
        if kind is None or kind is _UNSET:
            if item.role is _UNSET:
                return None
            kind = "message"
        if kind == "message":
            if not _message(item, ref):
                return None
            said_any = True
        elif kind == "function_call":
            call, name, arguments = item.call_id, item.name, item.arguments
            if not isinstance(call, str) or not isinstance(name, str) \
                    or not isinstance(arguments, str) or not (
                    item.role is _UNSET and item.content is _UNSET and item.output is _UNSET
                    and item.summary is _UNSET and item.encrypted_content is _UNSET
                    and (not isinstance(ref, str) or ref.startswith("fc"))
                    and call and len(call) <= MAX_CALL_ID and call not in calls and name):
                return None
            calls[call] = index
            if isinstance(ref, str):
                ids[ref] = index
            # (in the view: one of the calls of an assistant message)
            if not run and open_calls:
                clean = False  # (a call of the run before without its output)
            run.add(call)
            chars += len(name) + len(arguments)
            continue
        elif kind == "function_call_output":
            call, output = item.call_id, item.output
            if not isinstance(call, str) or not isinstance(output, str) or not (
                    item.role is _UNSET and item.content is _UNSET and item.name is _UNSET
                    and item.arguments is _UNSET and item.summary is _UNSET
                    and item.encrypted_content is _UNSET and call in calls
                    and call not in answered):
                return None
            answered.add(call)
            answer_id, answer = call, output
        elif kind == "reasoning":
            secret = item.encrypted_content
            summary = item.summary
            if not (isinstance(ref, str) and ref.startswith("rs")
                    and isinstance(summary, list) and item.role is _UNSET
                    and item.content is _UNSET and item.call_id is _UNSET
                    and item.name is _UNSET and item.arguments is _UNSET
                    and item.output is _UNSET
                    and all(p.type == "summary_text" for p in summary)
                    and (bool(secret) if isinstance(secret, str) else store)
                    and index < last and _follows_reasoning(items[index + 1])):
                return None
        else:
            return None
        if isinstance(ref, str):
            ids[ref] = index
        # What the view makes of it (``responses_deferred._walk``).
        if run:
            if kind == "message" and said is None and item.role == "assistant":
                said = item
                continue
            t += overhead + (_text(said.content) if said is not None else 0) \
                + -(-chars // per_token) + CALL_OVERHEAD * len(run)
            n += 1
            turn, at_t, at_s, at_o = n, t, s, o
            open_calls, run, chars, said = run, set(), 0, None
        n += 1
        if kind == "function_call_output":
            tokens = overhead + -(-len(answer) // per_token)
            t += tokens
            o += tokens
            if answer_id in open_calls:
                open_calls.discard(answer_id)
            else:
                clean = False  # an orphan for the scan, or an output of an earlier run
            continue
        if open_calls:
            clean = False  # a call without its output before this item
            open_calls = set()
        if kind == "reasoning":
            t += overhead
            continue
        role, content = item.role, item.content
        tokens = overhead + _text(content)
        t += tokens
        if role == "assistant":
            turn, at_t, at_s, at_o = n, t, s, o
        elif role != "user":
            s += tokens
        if not user_found and role != "assistant":
            lead.append({"role": role, "content": _neutral(content)})
            user_found = role == "user"
    if not said_any:
        return None  # (the general way refuses an input with nothing to send)
    if run:
        t += overhead + (_text(said.content) if said is not None else 0) \
            + -(-chars // per_token) + CALL_OVERHEAD * len(run)
        n += 1
        turn, at_t, at_s, at_o = n, t, s, o
        clean = False  # (calls the input ends with wait for their outputs)
    if open_calls:
        clean = False
    totals = (t, s, o, 0)
    counted = (CountedMessages(0, totals) if turn == 0
               else CountedMessages(0, totals, turn, (at_t, at_s, at_o, 0)))
    tail = items[-1]
    extensible = tail.type == "function_call_output" or (
        tail.type in (None, _UNSET, "message") and tail.role in ("user", "system", "developer"))
    return (PlainInput(ids, calls, frozenset(answered)), n, counted, lead, clean,
            extensible)


def _message(item: _Item, ref: str | msgspec.UnsetType | None) -> bool:
    """``responses_plain._message`` of a typed item (and only a message's keys)."""
    role, content = item.role, item.content
    if not (isinstance(role, str) and role in _ROLES and item.call_id is _UNSET
            and item.name is _UNSET and item.arguments is _UNSET and item.output is _UNSET
            and item.summary is _UNSET and item.encrypted_content is _UNSET
            and (not isinstance(ref, str) or ref.startswith("msg"))):
        return False
    if isinstance(content, str):
        return bool(content) and not content.isspace()
    if not isinstance(content, list) or not content:
        return False
    assistant = role == "assistant"
    kind = "output_text" if assistant else "input_text"
    for part in content:
        text = part.text
        if part.type != kind or not text or text.isspace() or (not assistant and (
                part.annotations is not _UNSET or part.logprobs is not _UNSET)):
            return False
    return True


def _follows_reasoning(item: _Item) -> bool:
    """The item a reasoning item is made with: a call, more reasoning, or an assistant's
    words (checked as a message when the walk reaches it)."""
    kind = item.type
    if kind in ("function_call", "reasoning"):
        return True
    return kind in (None, _UNSET, "message") and item.role == "assistant"


def _text(content: Any) -> int:
    """The tokens of a plain message's text (a string or text parts)."""
    if isinstance(content, str):
        return -(-len(content) // CHARS_PER_TOKEN)
    return -(-sum(len(part.text) for part in content) // CHARS_PER_TOKEN)


def _neutral(content: Any) -> Any:
    """A plain message's content as the view holds it (text parts as chat's)."""
    if isinstance(content, str):
        return content
    return [{"type": "text", "text": part.text} for part in content]
