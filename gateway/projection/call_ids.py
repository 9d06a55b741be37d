"""Tool calls without ids, given ids, and ids in a form an upstream refuses, rewritten (and
their results with them).

Clients written for an API without call ids (Ollama's) send tool calls without an ``id``
and results without a ``tool_call_id``. Such a call cannot be paired with its result, and
OpenAI refuses it. :func:`add_call_ids` gives each call an id (``call_gw_<n>``, unused in the
history) and each result after it that answers none the id of the call it answers: by the
tool name the result gives (``name`` / ``tool_name``), else in call order, among the calls
of the assistant message before it (until the next user or assistant message) that no
result names. The same holds for a result that lost its ``tool_call_id`` after calls that
have theirs (a converter that dropped it: Vercel AI SDK #2178, LangChain #22600; OpenAI:
"Missing parameter 'tool_call_id'"): it gets the id of the call it answers, so the tool's
real output reaches the model instead of being dropped as an orphan. Likewise
:func:`function_results`: a legacy ``function`` message answering a tool call becomes its
result. Pure: the client's objects are never edited.
"""

from __future__ import annotations

import re
from hashlib import blake2b
from typing import Any

from gateway.projection.anomalies import (
    CALL_ID_SYNTHESIZED,
    FUNCTION_CALL_CONVERTED,
    TOOL_CALL_ID_REWRITTEN,
    Anomaly,
)
from gateway.projection.exchanges import Entry

__all__ = ["CALL_ID_FORMS", "add_call_ids", "function_results", "has_calls_without_ids",
           "rewrite_call_ids"]

# The id forms strict upstreams demand. ``portable``: what OpenAI (at most 40 characters),
# Anthropic and Bedrock (``[a-zA-Z0-9_-]``) all take; ``nine_alnum``: Mistral's tokenizer
# (vLLM, Mistral's API), exactly nine letters and digits. A rewritten id has nine letters
# and digits, so it is valid in both.
CALL_ID_FORMS = {"portable": re.compile(r"[A-Za-z0-9_-]{1,40}"),
                 "nine_alnum": re.compile(r"[A-Za-z0-9]{9}")}
_ALPHABET = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"


def has_calls_without_ids(messages: list[Any]) -> bool:
    """True when an assistant message holds a tool call without an id, or a tool message
    has no ``tool_call_id``."""
    return any(type(m) is dict and (
        (isinstance(m.get("tool_calls"), list) and any(_without_id(c) for c in m["tool_calls"]))
        or (m.get("role") == "tool" and not _answers_an_id(m))) for m in messages)


def add_call_ids(entries: list[Entry]) -> tuple[list[Entry], list[Anomaly]]:
    """``entries`` (input index, message) with ids given as the module says, and one
    ``call_id_synthesized`` per call given an id and per result given the id of a call
    that had one (``entries`` themselves when nothing lacks an id)."""
    if not has_calls_without_ids([m for _, m in entries]):
        return entries, []
    taken = {c["id"] for _, m in entries if type(m) is dict
             and isinstance(m.get("tool_calls"), list) for c in m["tool_calls"]
             if type(c) is dict and isinstance(c.get("id"), str)}
    out = list(entries)
    anomalies: list[Anomaly] = []
    waiting: list[tuple[str, Any]] = []  # (id, tool name) of the latest calls unanswered
    given: set[str] = set()  # the ids this pass made
    number = 0
    for position, (index, message) in enumerate(entries):
        if type(message) is not dict:
            continue
        role = message.get("role")
        if role == "tool":
            if _answers_an_id(message):
                waiting = [w for w in waiting if w[0] != message["tool_call_id"]]
            elif waiting:
                named = message.get("name") or message.get("tool_name")
                pick = next((w for w in waiting if named and w[1] == named), waiting[0])
                waiting.remove(pick)
                out[position] = (index, {**message, "tool_call_id": pick[0]})
                if pick[0] not in given:  # the call had its id: the repair is the result's
                    anomalies.append(Anomaly(CALL_ID_SYNTHESIZED, index, pick[0]))
            continue
        waiting = []  # a user or assistant message: earlier calls are answered or not
        calls = message.get("tool_calls")
        if role != "assistant" or not isinstance(calls, list):
            continue
        written = []
        for call in calls:
            if type(call) is not dict:
                written.append(call)
                continue
            function = call.get("function")
            name = function.get("name") if type(function) is dict else None
            if _without_id(call):
                number += 1
                while f"call_gw_{number}" in taken:
                    number += 1
                call_id = f"call_gw_{number}"
                given.add(call_id)
                call = {**call, "id": call_id}
                anomalies.append(Anomaly(CALL_ID_SYNTHESIZED, index, call_id))
            waiting.append((call["id"], name))
            written.append(call)
        if any(a is not b for a, b in zip(written, calls, strict=True)):
            out[position] = (index, {**message, "tool_calls": written})
    return out, anomalies


def function_results(entries: list[Entry]) -> tuple[list[Entry], list[Anomaly]]:
    """``entries`` with each legacy ``function`` message that answers a tool call turned into
    that call's ``tool`` result, and one ``function_call_converted`` each.

    A half-migrated agent answers a tool call the old way: a ``function`` message right
    after the calls (among their results) whose ``name`` is the name of one of those calls
    still unanswered, or without a name (which OpenAI refuses: "Missing required parameter:
    'messages[2].name'") when exactly one call is unanswered. Left as it is, the call would
    get the synthetic "not available" text while its real output sits beside it. Any other
    ``function`` message stays as sent.
    """
    if not any(type(m) is dict and m.get("role") == "function" for _, m in entries):
        return entries, []
    out = list(entries)
    anomalies: list[Anomaly] = []
    waiting: list[tuple[str, Any]] = []  # (id, tool name) of the latest calls unanswered
    for position, (index, message) in enumerate(entries):
        if type(message) is not dict:
            continue
        role = message.get("role")
        if role == "tool":
            waiting = [w for w in waiting if w[0] != message.get("tool_call_id")]
            continue
        if role == "function" and waiting:
            name = message.get("name")
            pick = next((w for w in waiting if isinstance(name, str) and w[1] == name), None)
            if pick is None and not (isinstance(name, str) and name) and len(waiting) == 1:
                pick = waiting[0]  # no name (OpenAI refuses that): the one call it can answer
            if pick is not None:
                waiting.remove(pick)
                fields = {k: v for k, v in message.items() if k not in ("role", "name")}
                out[position] = (index, {"role": "tool", "tool_call_id": pick[0], **fields})
                anomalies.append(Anomaly(FUNCTION_CALL_CONVERTED, index, pick[0]))
                continue
        calls = message.get("tool_calls") if role == "assistant" else None
        waiting = [(c["id"], c["function"].get("name")) for c in calls
                   if type(c) is dict and isinstance(c.get("id"), str)
                   and type(c.get("function")) is dict] if isinstance(calls, list) else []
    return (out, anomalies) if anomalies else (entries, anomalies)


def _answers_an_id(message: dict[str, Any]) -> bool:
    answered = message.get("tool_call_id")
    return isinstance(answered, str) and bool(answered)


def _without_id(call: Any) -> bool:
    return type(call) is dict and not (isinstance(call.get("id"), str) and call["id"])


def rewrite_call_ids(entries: list[Entry], form: str) -> tuple[list[Entry], list[Anomaly]]:
    """``entries`` with every tool call id outside ``form`` (:data:`CALL_ID_FORMS`) rewritten,
    and the ``tool_call_id`` of the results answering it: nine letters and digits made from
    the old id (the same on every turn, so a session's prompt prefix stays stable), unused
    in the history. One ``tool_call_id_rewritten`` per call rewritten (``entries``
    themselves when all fit). Pure: the client's objects are never edited."""
    pattern = CALL_ID_FORMS[form]
    wrong: list[str] = []
    taken: set[str] = set()
    for _, message in entries:
        if type(message) is not dict:
            continue
        answered = message.get("tool_call_id")
        if isinstance(answered, str):
            taken.add(answered)
        calls = message.get("tool_calls")
        if message.get("role") != "assistant" or not isinstance(calls, list):
            continue
        for call in calls:
            call_id = call.get("id") if type(call) is dict else None
            if isinstance(call_id, str) and call_id:
                taken.add(call_id)
                if pattern.fullmatch(call_id) is None and call_id not in wrong:
                    wrong.append(call_id)
    if not wrong:
        return entries, []
    renamed: dict[str, str] = {}
    for old in wrong:
        renamed[old] = new = _fresh_id(old, taken)
        taken.add(new)
    out = list(entries)
    anomalies: list[Anomaly] = []
    for position, (index, message) in enumerate(entries):
        if type(message) is not dict:
            continue
        answered = message.get("tool_call_id")
        if message.get("role") == "tool" and isinstance(answered, str) and answered in renamed:
            out[position] = (index, {**message, "tool_call_id": renamed[answered]})
            continue
        calls = message.get("tool_calls")
        if message.get("role") != "assistant" or not isinstance(calls, list):
            continue
        written = [{**call, "id": renamed[call["id"]]}
                   if type(call) is dict and call.get("id") in renamed else call
                   for call in calls]
        if any(a is not b for a, b in zip(written, calls, strict=True)):
            out[position] = (index, {**message, "tool_calls": written})
            anomalies += [Anomaly(TOOL_CALL_ID_REWRITTEN, index, call["id"])
                          for call in calls if type(call) is dict and call.get("id") in renamed]
    return out, anomalies


def _fresh_id(old: str, taken: set[str]) -> str:
    """Nine letters and digits from a hash of ``old`` (another salt while one is taken)."""
    salt = 0
    while True:
        number = int.from_bytes(blake2b(f"{salt}:{old}".encode(), digest_size=8).digest())
        digits = []
        for _ in range(9):
            number, digit = divmod(number, len(_ALPHABET))
            digits.append(_ALPHABET[digit])
        candidate = "".join(digits)
        if candidate not in taken:
            return candidate
        salt += 1
