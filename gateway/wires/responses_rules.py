"""The Responses wire's own repair rules: what only ``input`` items have (pure, no I/O).

The exchange rules the wire shares with chat (a call and its output, empty turns) run on
the neutral view; these run on the items themselves, before the view is built
(:func:`repair_input`, what can never be valid) or on a provider's refusal
(:func:`strict_input`, what is valid on some upstreams and not on this one). Neither
mutates its input: an item that changes is a new dict, an untouched one is the same
object, and an input that needs nothing comes back as the very same list.

The rules, by anomaly name:

- ``duplicate_item_dropped``: an item whose id an earlier item of its type has
  ("Duplicate item found with id ..."): the first stays, later copies go; an
  ``item_reference`` to an item the input holds in full goes, wherever it comes. An item of
  another type reusing the id (an output given its call's ``fc_`` id), a call of its type
  with another ``call_id`` (a relay minting ``fc_1`` on every response), or a message saying
  something else (a client's ``msg_<n>`` colliding with a stored ``msg_4``), is not a copy:
  it stays, without the id (``item_id_removed``). An id the API never mints for the type (the
  Agents SDK's ``__fake_id__`` on every item) names no item: no item is a copy by it.
- ``tool_call_id_rewritten``: a call whose ``call_id`` an earlier call of its kind used,
  already answered, for another call (another name or arguments: agents that number calls
  from zero on every turn, ``call_0``, ``terminal:0``; "Duplicate function_call_output for
  call_id") gets ``<call_id>_<n>``, and so do the outputs after it up to that id's next
  call: each output stays with the call it answers. So does the same call made again
  after the first was answered when its output says something else (``git status`` run
  twice), and a call whose ``call_id`` an earlier call of another kind has. A call sent
  again as it was, answered alike, is a copy, left to the strict rung (duplicate call
  ids).
- ``call_id_synthesized``: a call item (``function_call``, ``custom_tool_call``, the
  built-in ``*_call`` items answered by ``*_call_output``) or an output with an empty
  ``call_id`` gets ``call_gw_<n>``; an output takes the id of the nearest earlier call of
  its kind that had none, so call and output stay paired.
- ``call_id_shortened``: a ``call_id`` over 64 characters ("string too long. Expected a
  string with maximum length 64") becomes a shorter one, the same on the call and its
  output.
- ``tool_message_converted``: a Chat Completions tool message (``{"role": "tool",
  "tool_call_id", "content"}``, a history converted from chat: "Invalid value: 'tool'")
  becomes the output item of the call it names, of that call's kind; a chat assistant
  message with ``tool_calls`` ("Unknown parameter: 'input[1].tool_calls'") becomes its text
  and one ``function_call`` item per call.
- ``call_id_relinked``: an output whose ``call_id`` is no call's but is the item ``id`` of
  exactly one call no output answers (the client named the call by the wrong field) gets
  that call's ``call_id``: the tool's real output reaches the model instead of being
  dropped as an orphan and replaced by a "not available" one. So does an output without a
  ``call_id`` whose own ``id`` is an unanswered call's ``call_id`` (the SDK types a
  ``local_shell_call_output`` so: "Missing required parameter: 'input[2].call_id'"); the
  ``id`` goes with it.
- ``tool_output_retyped``: an output of another kind than the call it answers (a
  ``function_call_output`` for a ``custom_tool_call`` or a ``local_shell_call``: "No tool
  call found for function call output") becomes the output item of the call's kind, its
  value in that kind's shape (a computer call's screenshot cannot be made of text: left to
  ``computer_call_dropped``); so does an output of its call's kind in the other shell
  tool's form (a ``shell_call_output`` as text, a ``local_shell_call_output`` as runs),
  and a computer call's screenshot given as an ``input_image`` part or an image data URL
  (the ``computer_screenshot`` it stands for).
- ``reasoning_summary_added``: a ``reasoning`` item without its required ``summary`` gets
  an empty one (a summary sent as a string: that text as its one ``summary_text`` part).
- ``tool_value_serialized``: a call's ``arguments`` (a custom call's ``input``) or an
  output's ``output`` sent as a JSON object, a number or a boolean, where the API takes
  text (a history converted from the Messages API, whose tool input is an object; a tool
  that returned 42): its JSON text; an output that is one input part sent alone: a list of
  that part; a call saved without its value (missing or null: an interrupted stream, an SDK
  leaving an undefined input out) gets ``{}`` (a custom call ``""``).
- ``assistant_content_retyped``: an assistant ``message`` whose text parts are typed
  ``input_text`` gets ``output_text`` (and the other way round for the other roles, and
  for the parts of a function or custom tool call's output, which are input parts); a
  reasoning summary's parts typed as message text get ``summary_text``; an assistant
  message of nothing (``[]``, null) right after a reasoning item (a reasoning-only turn
  replayed so) gets ``""``, the following item that reasoning needs.
- ``content_part_typed``: Chat Completions parts in a message (``text``, ``image_url``,
  ``file``: "Invalid value: 'text'") or an ``input_image`` whose ``image_url`` is chat's
  ``{url, detail}`` object become the Responses parts they stand for.
- ``item_id_removed``: an id that cannot be valid (empty, not a string, another
  backend's prefix for a message or a call) is removed; so are the ids of the output items
  that followed a reasoning item that was dropped (the provider links them to it).
- ``item_reference_dropped``: under ``store: false`` an ``item_reference`` can never
  resolve.
- ``reasoning_item_dropped``: a reasoning item without the output item it belongs to
  (the next item is a user turn, an output or nothing), a reasoning item under
  ``store: false`` that carries no ``encrypted_content`` (only its id, which will not
  resolve), one whose id is another backend's.
- On refusal (:func:`strict_input`): ``encrypted_item_dropped`` (encrypted reasoning or
  compaction the provider cannot verify), every ``item_reference`` and every reasoning item
  that only an id could resolve dropped (``orphan_tool_result_dropped``: with the outputs
  that answered a call only a reference stood for), the ids of the other items removed,
  all reasoning dropped when the refusal is about reasoning, and the reasoning text
  (``content``) of the encrypted reasoning kept left out (``reasoning_content_dropped``:
  text a gpt-oss / vLLM backend took, "Expected an array with maximum length 0").
- ``computer_call_dropped`` (on the input about to be sent, :func:`answerable_input`): a
  ``computer_call`` no ``computer_screenshot`` output answers (the only output the API
  takes for it: "expected a computer call output, but got a string instead"; a client's
  error text, or the exchange rules' synthesized "not available" result) goes with its
  outputs; reasoning left without its following item goes too. A call id another kind of
  call uses as well is left to the strict rung (duplicate call ids).
- Continuing a stored response (``previous_response_id``): :func:`without_held` drops the
  new input's items whose id the continued conversation holds already
  (``duplicate_item_dropped``: clients send a response's ``function_call`` again with its
  output) and the conversation's start sent again before them (a client resending its
  whole history, the user's words without ids included); on a refusal
  :func:`strict_continuation` drops every model-made item with an id and every reference
  ("Duplicate item": the provider holds those), gives a call of the stored conversation
  the client left unanswered its "not available" output ("No tool output found"), or drops
  an output no call made ("No tool call found").
"""

from __future__ import annotations

import hashlib
import re
from collections import Counter
from collections.abc import Callable
from typing import Any

import orjson

from gateway.projection.anomalies import (
    CALL_ID_SYNTHESIZED,
    CONTENT_PART_TYPED,
    ORPHAN_TOOL_RESULT_DROPPED,
    TOOL_CALL_ID_REWRITTEN,
    TOOL_RESULT_SYNTHESIZED,
    Anomaly,
)
from gateway.projection.exchanges import SYNTHETIC_TOOL_RESULT_TEXT, says_nothing

DUPLICATE_ITEM_DROPPED = "duplicate_item_dropped"
REASONING_SUMMARY_ADDED = "reasoning_summary_added"
ASSISTANT_CONTENT_RETYPED = "assistant_content_retyped"
ITEM_ID_REMOVED = "item_id_removed"
ITEM_REFERENCE_DROPPED = "item_reference_dropped"
REASONING_ITEM_DROPPED = "reasoning_item_dropped"
ENCRYPTED_ITEM_DROPPED = "encrypted_item_dropped"
COMPUTER_CALL_DROPPED = "computer_call_dropped"
TOOL_VALUE_SERIALIZED = "tool_value_serialized"
CALL_ID_SHORTENED = "call_id_shortened"
TOOL_MESSAGE_CONVERTED = "tool_message_converted"
CALL_ID_RELINKED = "call_id_relinked"
TOOL_OUTPUT_RETYPED = "tool_output_retyped"
REASONING_CONTENT_DROPPED = "reasoning_content_dropped"
MAX_CALL_ID = 64  # "Expected a string with maximum length 64"

# Call items answered by an output item of their own type.
CALL_OUTPUTS = {
    "function_call": "function_call_output",
    "custom_tool_call": "custom_tool_call_output",
    "local_shell_call": "local_shell_call_output",
    "shell_call": "shell_call_output",
    "apply_patch_call": "apply_patch_call_output",
    "computer_call": "computer_call_output",
}
OUTPUT_CALLS = {output: call for call, output in CALL_OUTPUTS.items()}
# The id prefix the Responses API mints for an item type (an id it did not mint is refused:
# "Expected an ID that begins with 'msg'").
ID_PREFIXES = {"message": "msg", "function_call": "fc", "custom_tool_call": "ctc",
               "reasoning": "rs"}
_MESSAGE_ROLES = ("user", "assistant", "system", "developer")
# Item fields the API takes as text only (a function output may also be a part list).
_TEXT_FIELDS = {"function_call": "arguments", "custom_tool_call": "input",
                "function_call_output": "output", "custom_tool_call_output": "output"}
# A call's value when it was made without one ("Missing required parameter:
# 'input[1].arguments'", "expected a string, but got null instead").
_NO_VALUE = {"function_call": "{}", "custom_tool_call": ""}
# Items a model produces after reasoning: the "following item" a reasoning item needs.
_OUTPUT_TYPES = frozenset({"function_call", "custom_tool_call", "mcp_call", "mcp_list_tools",
                           "mcp_approval_request", "image_generation_call",
                           "code_interpreter_call", "web_search_call", "file_search_call",
                           "local_shell_call", "shell_call", "apply_patch_call",
                           "computer_call", "reasoning"})

Items = list[Any]


def output_item(kind: str, call_id: Any, text: Any) -> dict[str, Any]:
    """A new output item of type ``kind`` answering ``call_id`` with ``text``, in the shape
    that type takes: a shell call's output is a list of runs (stdout, stderr, outcome), an
    apply_patch call's output has a ``status`` (failed: nothing was applied that the
    gateway knows of), the others take the text itself."""
    if kind == "shell_call_output":
        return {"type": kind, "call_id": call_id, "output": [
            {"stdout": "", "stderr": text, "outcome": {"type": "exit", "exit_code": 1}}]}
    if kind == "apply_patch_call_output":
        return {"type": kind, "call_id": call_id, "status": "failed", "output": text}
    return {"type": kind, "call_id": call_id, "output": text}


def item_type(item: Any) -> str:
    """``message`` (the easy ``{"role", "content"}`` form too) or the item's ``type``."""
    if type(item) is not dict:
        return "?"
    kind = item.get("type")
    if kind is None and item.get("role") in _MESSAGE_ROLES:
        return "message"
    return kind if isinstance(kind, str) else "?"


def _is_output(item: Any) -> bool:
    kind = item_type(item)
    if kind == "message":
        return bool(item.get("role") == "assistant")
    return kind in _OUTPUT_TYPES


class _Edit:
    """The items being repaired: copies made on first change, anomalies in order."""

    def __init__(self, items: Items) -> None:
        self.source = items
        self.items: list[Any] = list(items)
        self.dropped: set[int] = set()
        self.anomalies: list[Anomaly] = []

    def set(self, i: int, item: dict[str, Any], kind: str) -> None:
        self.items[i] = item
        self.anomalies.append(Anomaly(kind, i))

    def drop(self, i: int, kind: str) -> None:
        if i not in self.dropped:
            self.dropped.add(i)
            self.anomalies.append(Anomaly(kind, i))

    def without_id(self, i: int) -> None:
        item = self.items[i]
        if type(item) is dict and "id" in item:
            self.set(i, {k: v for k, v in item.items() if k != "id"}, ITEM_ID_REMOVED)

    def result(self) -> tuple[Items, tuple[Anomaly, ...]]:
        if not self.anomalies:
            return self.source, ()
        kept = [item for i, item in enumerate(self.items) if i not in self.dropped]
        return kept, tuple(self.anomalies)

    def drop_reasoning(self, i: int, kind: str) -> None:
        """Drop reasoning item ``i`` and remove the ids of the output items after it."""
        self.drop(i, kind)
        j = i + 1
        while j < len(self.items) and _is_output(self.items[j]):
            if item_type(self.items[j]) != "reasoning" and j not in self.dropped:
                self.without_id(j)
            j += 1


def repair_input(items: Items, *, store: bool = True) -> tuple[Items, tuple[Anomaly, ...]]:
    """``items`` with what can never be valid repaired (see the module docstring)."""
    items, converted = _chat_calls_converted(items)
    edit = _Edit(items)
    edit.anomalies.extend(converted)
    seen: dict[str, tuple[str, int]] = {}  # item id -> type and index of the first with it
    for i, item in enumerate(items):
        item_id = item.get("id") if type(item) is dict else None
        kind = item_type(item)
        # An id this API never mints for the type (an SDK's placeholder on every item,
        # "__fake_id__") names no item: it goes (``_check_id``), never taking a copy with it.
        if isinstance(item_id, str) and item_id and item_id.startswith(
                ID_PREFIXES.get(kind, "")):
            first = seen.get(item_id)
            if first is None:
                seen[item_id] = (kind, i)
            elif (first[0] == kind and not _another_item(items[first[1]], item)) \
                    or kind == "item_reference":
                edit.drop(i, DUPLICATE_ITEM_DROPPED)  # a copy (or a reference to the item)
            elif first[0] == "item_reference":  # the item the reference stood for, in full
                edit.drop(first[1], DUPLICATE_ITEM_DROPPED)
                seen[item_id] = (kind, i)
            else:
                edit.without_id(i)  # another item reusing the id: kept, without it
    _separate_call_kinds(edit)
    _pair_outputs(edit)
    _synthesize_call_ids(edit)
    _renumber_reused_call_ids(edit)
    _shorten_call_ids(edit)
    for i, item in enumerate(edit.items):
        kind = item_type(item)
        if kind in OUTPUT_CALLS and i not in edit.dropped and _misshapen(kind,
                                                                          item.get("output")):
            edit.set(i, item := _output_as(kind, item.get("call_id"), item.get("output")),
                     TOOL_OUTPUT_RETYPED)
        elif kind == "computer_call_output" and (shot := _screenshot_of(item.get("output"))):
            edit.set(i, item := {**item, "output": shot}, TOOL_OUTPUT_RETYPED)
        if kind == "reasoning":
            summary = item.get("summary")
            if not isinstance(summary, list):
                edit.set(i, {**item, "summary": _summary_of(summary)}, REASONING_SUMMARY_ADDED)
            elif any(type(p) is dict and p.get("type") in _SUMMARY_MISTYPED for p in summary):
                edit.set(i, {**item, "summary": [_summary_part(p) for p in summary]},
                         ASSISTANT_CONTENT_RETYPED)
        elif kind == "message" and item.get("content") in (None, []) and i \
                and item.get("role") == "assistant" and item_type(items[i - 1]) == "reasoning":
            # a reasoning-only turn replayed with a message of nothing ("empty array",
            # "got null"): the empty text that turn's following item is written with
            edit.set(i, {**item, "content": ""}, ASSISTANT_CONTENT_RETYPED)
        elif kind == "message" or (kind in _PART_OUTPUTS and type(item.get("output")) is list):
            if kind == "message" and isinstance(item.get("content"), list):
                typed = _chat_parts_typed(item)
                if typed is not None:
                    edit.set(i, item := typed, CONTENT_PART_TYPED)
            retyped = _retyped(item) if kind == "message" else _output_parts_retyped(item)
            if retyped is not None:
                edit.set(i, retyped, ASSISTANT_CONTENT_RETYPED)
        elif kind == "item_reference" and not store:
            edit.drop(i, ITEM_REFERENCE_DROPPED)
            continue
        elif kind in _NO_VALUE and item.get(_TEXT_FIELDS[kind]) is None:
            # a call saved without its value (an interrupted stream, an SDK leaving an
            # undefined input out): made with none
            edit.set(i, {**item, _TEXT_FIELDS[kind]: _NO_VALUE[kind]}, TOOL_VALUE_SERIALIZED)
        elif kind in _TEXT_FIELDS and _not_text(item.get(_TEXT_FIELDS[kind])):
            key = _TEXT_FIELDS[kind]
            value = item[key]
            if kind in _PART_OUTPUTS and type(value) is dict and value.get("type") in _PARTS:
                # one input part sent alone: the list of it (an image stays an image)
                fixed = {**item, key: [value]}
                edit.set(i, _output_parts_retyped(fixed) or fixed, TOOL_VALUE_SERIALIZED)
            else:
                edit.set(i, {**item, key: orjson.dumps(value).decode()}, TOOL_VALUE_SERIALIZED)
        if kind in ID_PREFIXES or (type(item) is dict and "id" in item):
            _check_id(edit, i, kind, store)
    _drop_lone_reasoning(edit)
    return edit.result()


def without_lone_reasoning(items: Items) -> tuple[Items, tuple[Anomaly, ...]]:
    """``items`` without the reasoning items a projection or a strict rule left without
    their following item (its call deduped, the turn it opened dropped as leading); the
    same list when there are none."""
    edit = _Edit(items)
    _drop_lone_reasoning(edit)
    return edit.result()


def _drop_lone_reasoning(edit: _Edit) -> None:
    """Drop the reasoning items not followed by their output item (from the end: a drop
    uncovers the one before). A reference kept there may stand for that item (stored)."""
    for i in reversed(range(len(edit.items))):
        item = edit.items[i]
        if item_type(item) == "reasoning" and i not in edit.dropped:
            following = _next_kept(edit, i)
            if following is None or not (_is_output(following)
                                         or item_type(following) == "item_reference"):
                edit.drop_reasoning(i, REASONING_ITEM_DROPPED)


def _screenshot_of(output: Any) -> dict[str, Any] | None:
    """A computer call's screenshot given in another image shape (an ``input_image`` part,
    alone or as a one-part list, or an image data URL as text) as the
    ``computer_screenshot`` the API takes ("expected a computer call output"); None
    otherwise."""
    if type(output) is list and len(output) == 1:
        output = output[0]
    if isinstance(output, str) and output.startswith("data:image/"):
        return {"type": "computer_screenshot", "image_url": output}
    if type(output) is dict and output.get("type") == "input_image":
        image = {k: output[k] for k in ("image_url", "file_id") if isinstance(output.get(k), str)}
        return {"type": "computer_screenshot", **image} if image else None
    return None


def _screenshot(output: Any) -> bool:
    return type(output) is dict and output.get("type") == "computer_screenshot"


def answerable_input(items: Items) -> tuple[Items, tuple[Anomaly, ...]]:
    """``items`` without the computer calls no screenshot answers, and their outputs (see
    the module docstring: ``computer_call_dropped``); the same list when there are none."""
    unanswerable = {item.get("call_id") for item in items
                    if item_type(item) == "computer_call"}
    if not unanswerable:
        return items, ()
    unanswerable -= {item.get("call_id") for item in items
                     if item_type(item) == "computer_call_output"
                     and _screenshot(item.get("output"))}
    # A call id another kind of call uses too is a duplicate for the strict rung to settle
    # ("duplicate_tool_call_deduped"), not a computer call to drop here.
    unanswerable -= {item.get("call_id") for item in items
                     if item_type(item) in CALL_OUTPUTS and item_type(item) != "computer_call"}
    if not unanswerable:
        return items, ()
    edit = _Edit(items)
    for i, item in enumerate(items):
        kind = item_type(item)
        if (kind == "computer_call" or kind in OUTPUT_CALLS) \
                and item.get("call_id") in unanswerable:
            if kind == "computer_call":
                edit.drop(i, COMPUTER_CALL_DROPPED)
            else:
                edit.dropped.add(i)
    _drop_lone_reasoning(edit)
    return edit.result()


def _check_id(edit: _Edit, i: int, kind: str, store: bool) -> None:
    item = edit.items[i]
    if "id" not in item:
        return
    item_id = item.get("id")
    prefix = ID_PREFIXES.get(kind)
    valid = isinstance(item_id, str) and item_id != "" and (
        prefix is None or item_id.startswith(prefix))
    if kind == "reasoning":
        # A reasoning item needs its id; one this upstream did not mint, or one only the
        # store could resolve, cannot be sent.
        if not valid or (not store and not item.get("encrypted_content")):
            edit.drop_reasoning(i, REASONING_ITEM_DROPPED)
    elif not valid:
        edit.without_id(i)


def _next_kept(edit: _Edit, i: int) -> Any:
    for j in range(i + 1, len(edit.items)):
        if j not in edit.dropped:
            return edit.items[j]
    return None


def _retyped(item: dict[str, Any]) -> dict[str, Any] | None:
    content = item.get("content")
    if not isinstance(content, list):
        return None
    wrong, right = ("input_text", "output_text") if item.get("role") == "assistant" else (
        "output_text", "input_text")
    if not any(type(p) is dict and p.get("type") == wrong for p in content):
        return None
    parts = [{**p, "type": right} if type(p) is dict and p.get("type") == wrong else p
             for p in content]
    if right == "input_text":  # output_text carries annotations/logprobs input_text has not
        parts = [{k: v for k, v in p.items() if k not in ("annotations", "logprobs")}
                 if type(p) is dict and p.get("type") == right else p for p in parts]
    return {**item, "content": parts}


# Outputs whose ``output`` may be a list of input parts (input_text, input_image, ...).
_PART_OUTPUTS = ("function_call_output", "custom_tool_call_output")
# Part types an output's part list may hold, and the chat ones that stand for them.
_PARTS = ("input_text", "input_image", "input_file", "output_text", "text", "image_url",
          "file")
# Summary parts typed as message text ("Supported values are: 'summary_text'").
_SUMMARY_MISTYPED = ("output_text", "input_text", "text")


def _not_text(value: Any) -> bool:
    """A tool value the API refuses where it takes text: an object or a bare number or
    boolean ("expected a string ..., but got an integer instead")."""
    return type(value) in (dict, int, float, bool)


def _summary_of(summary: Any) -> list[Any]:
    """A reasoning ``summary`` that is not a list: its text as the one summary part (a
    summary sent as a string), else none."""
    if isinstance(summary, str) and summary.strip():
        return [{"type": "summary_text", "text": summary}]
    return []


def _summary_part(part: Any) -> Any:
    if type(part) is dict and part.get("type") in _SUMMARY_MISTYPED:
        return {"type": "summary_text", "text": part.get("text")}
    return part


def _chat_part(part: Any, assistant: bool) -> Any:
    """A Chat Completions part (``text``, ``image_url``, ``file``) as the Responses part it
    stands for, an ``input_image`` whose ``image_url`` is chat's ``{url, detail}`` object
    flattened; None when ``part`` needs nothing."""
    if type(part) is not dict:
        return None
    kind = part.get("type")
    if kind == "text":
        text = part.get("text")
        return ({"type": "output_text", "text": text, "annotations": []} if assistant
                else {"type": "input_text", "text": text})
    if kind == "image_url" or (kind == "input_image" and type(part.get("image_url")) is dict):
        image = part.get("image_url")
        url = image.get("url") if type(image) is dict else image
        detail = part.get("detail", image.get("detail") if type(image) is dict else None)
        typed = {"type": "input_image", "image_url": url}
        return typed if detail is None else {**typed, "detail": detail}
    if kind == "file" and type(part.get("file")) is dict:
        return {"type": "input_file", **part["file"]}
    return None


def _chat_parts_typed(item: dict[str, Any]) -> dict[str, Any] | None:
    """A message with Chat Completions parts ("Invalid value: 'text'") as Responses parts."""
    assistant = item.get("role") == "assistant"
    typed = [_chat_part(p, assistant) for p in item["content"]]
    if all(t is None for t in typed):
        return None
    return {**item, "content": [p if t is None else t for p, t in zip(item["content"], typed,
                                                                       strict=True)]}


def _chat_calls_converted(items: Items) -> tuple[Items, tuple[Anomaly, ...]]:
    """A Chat Completions assistant message with ``tool_calls`` ("Unknown parameter:
    'input[1].tool_calls'") as its text (when it has any) and one ``function_call`` item per
    call; the same list when there is none."""
    if not any(type(i) is dict and isinstance(i.get("tool_calls"), list)
               and item_type(i) == "message" for i in items):
        return items, ()
    out: list[Any] = []
    anomalies: list[Anomaly] = []
    for i, item in enumerate(items):
        if not (type(item) is dict and isinstance(item.get("tool_calls"), list)
                and item_type(item) == "message"):
            out.append(item)
            continue
        anomalies.append(Anomaly(TOOL_MESSAGE_CONVERTED, i))
        said = {k: v for k, v in item.items() if k not in ("tool_calls", "function_call")}
        if said.get("content"):
            out.append(said)
        for call in item["tool_calls"]:
            function = call.get("function") if type(call) is dict else None
            if type(function) is not dict:
                continue
            arguments = function.get("arguments")
            out.append({"type": "function_call", "call_id": call.get("id"),
                        "name": function.get("name"),
                        "arguments": "{}" if arguments is None else arguments})
    return out, tuple(anomalies)


# Chat text part types, as the input text part of an output.
_CHAT_TEXT = ("text", "output_text")


def _output_parts_retyped(item: dict[str, Any]) -> dict[str, Any] | None:
    """An output whose part list has the model's ``output_text`` parts, with input parts
    ("Invalid value: 'output_text'. Supported values are: 'input_text', ...")."""
    output = item.get("output")
    if not isinstance(output, list) or not any(
            type(p) is dict and (p.get("type") == "output_text" or _chat_part(p, False))
            for p in output):
        return None
    return {**item, "output": _input_parts(output)}


def _input_parts(parts: list[Any]) -> list[Any]:
    """``parts`` with chat or output text parts as ``input_text`` ones, chat's image and
    file parts as ``input_image`` / ``input_file``."""
    return [{"type": "input_text", "text": p.get("text")}
            if type(p) is dict and p.get("type") in _CHAT_TEXT else _chat_part(p, False) or p
            for p in parts]


def _text_of(value: Any) -> str:
    """An output value as text (the text of its text parts when it is a part list)."""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return "\n".join(_run_text(p) for p in value if type(p) is dict and _run_text(p))
    return "" if value is None else orjson.dumps(value).decode()


def _run_text(part: dict[str, Any]) -> str:
    """A text part's text, or a shell run's output (stdout, then stderr)."""
    if isinstance(part.get("text"), str):
        return str(part["text"])
    return "\n".join(str(part[k]) for k in ("stdout", "stderr") if part.get(k))


def _misshapen(kind: str, output: Any) -> bool:
    """An output of its call's kind in the other shell tool's form: a ``shell_call_output``
    as text ("expected an array of shell call output content"), a
    ``local_shell_call_output`` as runs ("expected a string, but got an array")."""
    return (kind == "shell_call_output" and isinstance(output, str)) or (
        kind == "local_shell_call_output" and isinstance(output, list))


def _output_as(kind: str, call_id: Any, value: Any) -> dict[str, Any]:
    """The output item of type ``kind`` answering ``call_id`` with ``value`` (a tool's
    text or input parts) in the shape that type takes."""
    if kind == "shell_call_output":
        return {"type": kind, "call_id": call_id, "output": [
            {"stdout": _text_of(value), "stderr": "", "outcome": {"type": "exit",
                                                                   "exit_code": 0}}]}
    if kind == "apply_patch_call_output":
        return {"type": kind, "call_id": call_id, "status": "completed",
                "output": _text_of(value)}
    if kind in _PART_OUTPUTS:
        return {"type": kind, "call_id": call_id, "output": value}
    return {"type": kind, "call_id": call_id, "output": _text_of(value)}


def _pair_outputs(edit: _Edit) -> None:
    """Outputs as the calls they answer take them: chat tool messages converted, outputs
    naming their call by its item id relinked, outputs of another kind than their call
    retyped (see the module docstring). One walk when nothing is wrong."""
    items, dropped = edit.items, edit.dropped
    calls: dict[Any, str] = {}  # call id -> its call's kind ("": calls of several kinds)
    outputs: list[int] = []
    tools: list[int] = []
    for i, item in enumerate(items):
        if type(item) is not dict or i in dropped:
            continue
        kind = item.get("type")
        if kind in CALL_OUTPUTS:
            call_id = item.get("call_id")
            prior = calls.get(call_id)
            calls[call_id] = kind if prior is None or prior == kind else ""
        elif kind in OUTPUT_CALLS:
            outputs.append(i)
        elif item.get("role") == "tool" and kind in (None, "message"):
            tools.append(i)
    for i in tools:
        item = items[i]
        call_id = item.get("tool_call_id", item.get("call_id"))
        if not isinstance(call_id, str) or not call_id:
            continue  # naming no call: nothing to pair it with (the provider refuses it)
        content = item.get("content")
        value = _input_parts(content) if isinstance(content, list) else content
        edit.set(i, _output_as(CALL_OUTPUTS.get(calls.get(call_id) or "function_call",
                                                "function_call_output"),
                               call_id, "" if value is None else value),
                 TOOL_MESSAGE_CONVERTED)
        outputs.append(i)
    stray = [i for i in outputs if items[i].get("call_id") not in calls]
    if stray:
        _relink(edit, stray)
    for i in outputs:
        item = items[i]
        call_kind = calls.get(item.get("call_id"))
        if not call_kind or CALL_OUTPUTS[call_kind] == item["type"] \
                or call_kind == "computer_call":  # only a screenshot answers it
            continue
        edit.set(i, _output_as(CALL_OUTPUTS[call_kind], item.get("call_id"),
                               item.get("output")), TOOL_OUTPUT_RETYPED)


def _relink(edit: _Edit, stray: list[int]) -> None:
    """The ``stray`` outputs (answering no call id) that name exactly one unanswered call
    by its item ``id``, or that have no ``call_id`` and whose own ``id`` is an unanswered
    call's ``call_id``: that call's ``call_id``."""
    answered: set[Any] = set()
    calls: set[Any] = set()
    by_item_id: dict[Any, list[Any]] = {}
    for i, item in enumerate(edit.items):
        if type(item) is not dict or i in edit.dropped:
            continue
        kind = item.get("type")
        if kind in OUTPUT_CALLS:
            answered.add(item.get("call_id"))
        elif kind in CALL_OUTPUTS:
            calls.add(item.get("call_id"))
            if isinstance(item.get("id"), str) and item["id"]:
                by_item_id.setdefault(item["id"], []).append(item.get("call_id"))
    for i in stray:
        item = edit.items[i]
        named = by_item_id.get(item.get("call_id"), [])
        own_id = item.get("id")
        if not item.get("call_id") and isinstance(own_id, str) and own_id in calls \
                and own_id not in answered:
            # the call named by the output's ``id`` (the SDK's local shell output shape):
            # the ``call_id`` the API pairs by, the ``id`` no longer standing for the call
            answered.add(own_id)
            edit.set(i, {**{k: v for k, v in item.items() if k != "id"}, "call_id": own_id},
                     CALL_ID_RELINKED)
        elif len(named) == 1 and named[0] not in answered:
            answered.add(named[0])
            edit.set(i, {**item, "call_id": named[0]}, CALL_ID_RELINKED)


def _synthesize_call_ids(edit: _Edit) -> None:
    """Empty ``call_id``s: one synthetic id shared by a call and the output answering it."""
    waiting: dict[str, list[str]] = {}  # output type -> synthetic ids of calls without one
    n = 0
    for i, item in enumerate(edit.items):
        kind = item_type(item)
        if kind not in CALL_OUTPUTS and kind not in OUTPUT_CALLS:
            continue
        call_id = item.get("call_id")
        if isinstance(call_id, str) and call_id:
            continue
        if kind in CALL_OUTPUTS:
            n += 1
            new_id = f"call_gw_{n}"
            waiting.setdefault(CALL_OUTPUTS[kind], []).append(new_id)
        else:
            pending = waiting.get(kind)
            if pending:
                new_id = pending.pop(0)
            else:  # answers no call: stays an orphan, which the exchange rules drop
                n += 1
                new_id = f"call_gw_{n}"
        edit.set(i, {**item, "call_id": new_id}, CALL_ID_SYNTHESIZED)


def _another_item(first: Any, item: Any) -> bool:
    """``item`` is not a copy of ``first``, which has its item id: a call with another
    ``call_id``, a message saying something else (a client numbering its messages
    ``msg_<n>`` where the API's own ``msg_4`` sits too)."""
    kind = item_type(item)
    if kind == "message":
        return (item.get("role"), item.get("content")) != (first.get("role"),
                                                            first.get("content"))
    return kind in CALL_OUTPUTS and item.get("call_id") != first.get("call_id")


_CALL_FIELDS = ("name", "arguments", "input", "action")


def _renumber_reused_call_ids(edit: _Edit) -> None:
    """A call reusing the ``call_id`` of an earlier call, for another call, the id answered
    more than once (what the API refuses: "Duplicate function_call_output"):
    ``<call_id>_<n>``, on the call and on the outputs answering it (outputs take the calls of
    their id in order, those made since the last user message). Another call is one with
    other arguments, or the same call made again after the first was answered whose output
    says something else (an agent numbering its calls from zero on every turn runs ``git
    status`` twice); the same call answered alike is a copy, left to the strict rung."""
    items, dropped = edit.items, edit.dropped
    calls = [item.get("call_id") for i, item in enumerate(items) if i not in dropped
             and item_type(item) in CALL_OUTPUTS and isinstance(item.get("call_id"), str)]
    if len(calls) == len(set(calls)):
        return
    answers = Counter((OUTPUT_CALLS[item_type(item)], item.get("call_id"))
                      for i, item in enumerate(items)
                      if i not in dropped and item_type(item) in OUTPUT_CALLS)
    twice = {key for key, n in answers.items() if n > 1}
    taken = set(calls)
    latest: dict[tuple[str, str], tuple[Any, ...]] = {}  # (kind, id) -> its latest call
    waiting: dict[tuple[str, str], list[str]] = {}  # (kind, id) -> unanswered calls' ids
    turned: set[tuple[str, str]] = set()  # those whose latest call a user message followed
    said: dict[tuple[str, str], Any] = {}  # (kind, id) -> the output of its latest answer
    for i, item in enumerate(items):
        kind = item_type(item)
        call_id = item.get("call_id") if type(item) is dict else None
        if i in dropped:
            continue
        if kind == "message" and item.get("role") != "assistant":
            turned.update(latest)
        if not isinstance(call_id, str):
            continue
        if kind in CALL_OUTPUTS and (kind, call_id) in twice:
            key = (kind, call_id)
            made = tuple(item.get(f) for f in _CALL_FIELDS)
            if key in turned:
                waiting.pop(key, None)  # calls left unanswered before the user's message
                turned.discard(key)
            another = latest.get(key, made) != made
            if not another and key in said:  # the same call again, the first answered
                again = _next_output(edit, i, key)
                another = again not in (None, said[key]) and not says_nothing(again)
            sent_as = call_id
            if another:
                sent_as = _fresh_id(call_id, taken)
                edit.set(i, {**item, "call_id": sent_as}, TOOL_CALL_ID_REWRITTEN)
            if key not in latest or sent_as != call_id:
                waiting.setdefault(key, []).append(sent_as)
            latest[key] = made
        elif kind in OUTPUT_CALLS and waiting.get(key := (OUTPUT_CALLS[kind], call_id)):
            if not says_nothing(item.get("output")):
                said[key] = item.get("output")
            sent_as = waiting[key].pop(0)
            if sent_as != call_id:
                edit.set(i, {**item, "call_id": sent_as}, TOOL_CALL_ID_REWRITTEN)


def _fresh_id(call_id: str, taken: set[str]) -> str:
    """``<call_id>_<n>`` for the lowest ``n`` from 2 no call has, now taken."""
    n = 2
    while f"{call_id}_{n}" in taken:
        n += 1
    taken.add(fresh := f"{call_id}_{n}")
    return fresh


def _separate_call_kinds(edit: _Edit) -> None:
    """A call whose ``call_id`` an earlier call of another kind has (a function call and a
    custom tool call both ``x1``: "Duplicate ..."), and the outputs of its kind answering
    it after it: ``<call_id>_<n>`` (``tool_call_id_rewritten``)."""
    items, dropped = edit.items, edit.dropped
    kinds: dict[str, str] = {}  # call id -> the kind of its first call
    for i, item in enumerate(items):
        if i not in dropped and item_type(item) in CALL_OUTPUTS \
                and isinstance(call_id := item.get("call_id"), str) \
                and kinds.setdefault(call_id, item["type"]) != item["type"]:
            break
    else:
        return
    taken = {item["call_id"] for item in items if item_type(item) in CALL_OUTPUTS
             and isinstance(item.get("call_id"), str)}
    kinds = {}
    renamed: dict[tuple[str, str], str] = {}  # (output kind, call id) -> its call's new id
    for i, item in enumerate(items):
        kind = item_type(item)
        call_id = item.get("call_id") if type(item) is dict else None
        if i in dropped or not isinstance(call_id, str):
            continue
        if kind in CALL_OUTPUTS:
            if kinds.setdefault(call_id, kind) != kind:
                fresh = _fresh_id(call_id, taken)
                renamed[(CALL_OUTPUTS[kind], call_id)] = fresh
                edit.set(i, {**item, "call_id": fresh}, TOOL_CALL_ID_REWRITTEN)
        elif (new_id := renamed.get((kind, call_id))) is not None:
            edit.set(i, {**item, "call_id": new_id}, TOOL_CALL_ID_REWRITTEN)


def _next_output(edit: _Edit, i: int, key: tuple[str, str]) -> Any:
    """The ``output`` of the first output after item ``i`` answering a call of ``key``
    (kind, call id); None when none does."""
    for j in range(i + 1, len(edit.items)):
        item = edit.items[j]
        kind = item_type(item)
        if j not in edit.dropped and kind in OUTPUT_CALLS and OUTPUT_CALLS[kind] == key[0] \
                and item.get("call_id") == key[1]:
            return item.get("output")
    return None


def _shorten_call_ids(edit: _Edit) -> None:
    """``call_id``s over the API's 64 characters (another provider's, a bridge's): one
    shorter id, the same on the call and its outputs (a hash of the whole id, so ids that
    share a long prefix stay apart)."""
    for i, item in enumerate(edit.items):
        kind = item_type(item)
        call_id = item.get("call_id") if kind in CALL_OUTPUTS or kind in OUTPUT_CALLS else None
        if isinstance(call_id, str) and len(call_id) > MAX_CALL_ID:
            digest = hashlib.sha256(call_id.encode()).hexdigest()[:16]
            edit.set(i, {**item, "call_id": f"{call_id[:40]}_{digest}"}, CALL_ID_SHORTENED)


def without_held(items: Items, held: frozenset[str], conversation: Items | None = None,
                 ) -> tuple[Items, tuple[Anomaly, ...]]:
    """The new ``input`` of a request continuing a stored response without the items whose
    id the stored conversation (``held``) has: the provider refuses an input that repeats
    one ("Duplicate item found with id ..."). When the input opens with the stored
    ``conversation`` sent again (a client resending its whole history with the id), the
    items of it without an id go too (the user's words would reach the model twice)."""
    edit = _Edit(items)
    resent = _resent(items, conversation or [], held)
    for i, item in enumerate(items):
        item_id = item.get("id") if type(item) is dict else None
        if i < resent or (isinstance(item_id, str) and item_id in held):
            edit.drop(i, DUPLICATE_ITEM_DROPPED)
    return edit.result()


def _resent(items: Items, conversation: Items, held: frozenset[str]) -> int:
    """How many first items of ``items`` are the first items of the stored
    ``conversation`` again, in order, counted through the last one carrying an id the
    conversation holds (the user's words typed again alone are new input)."""
    through = 0
    for n, (mine, theirs) in enumerate(zip(items, conversation, strict=False), 1):
        mine_id = mine.get("id") if type(mine) is dict else None
        if isinstance(mine_id, str) and mine_id in held:
            if type(theirs) is not dict or theirs.get("id") != mine_id:
                break
            through = n
        elif mine != theirs:
            break
    return through


def paired_continuation(held: Items, items: Items) -> tuple[Items, tuple[Anomaly, ...]]:
    """The new ``items`` of a request continuing the stored conversation ``held`` (the
    gateway kept it), paired with it: a call of the conversation the new input leaves
    unanswered while moving on gets its "not available" output first
    (``tool_result_synthesized``; the provider refuses "No tool output found"), and an
    output no call of either made goes (``orphan_tool_result_dropped``). References are
    the provider's to resolve: with one, nothing is judged here."""
    if not items or any(item_type(i) == "item_reference" for i in (*held, *items)):
        return items, ()
    calls: dict[Any, str] = {}  # call id -> output type, in call order
    answered: set[Any] = set()
    for n, item in enumerate((*held, *items)):
        kind = item_type(item)
        if kind in CALL_OUTPUTS and n < len(held):
            calls.setdefault(item.get("call_id"), CALL_OUTPUTS[kind])
        elif kind in CALL_OUTPUTS:  # a call of the new input: its output is its own turn's
            answered.add(item.get("call_id"))
            calls.setdefault(item.get("call_id"), CALL_OUTPUTS[kind])
        elif kind in OUTPUT_CALLS:
            answered.add(item.get("call_id"))
    edit = _Edit(items)
    for i, item in enumerate(items):
        if item_type(item) in OUTPUT_CALLS and item.get("call_id") not in calls:
            edit.drop(i, ORPHAN_TOOL_RESULT_DROPPED)
    kept, anomalies = edit.result()
    missing = [(call_id, kind) for call_id, kind in calls.items()
               if call_id not in answered and kind != "computer_call_output"]
    if not missing or not kept:
        return kept, anomalies
    outputs = [output_item(kind, call_id, SYNTHETIC_TOOL_RESULT_TEXT)
               for call_id, kind in missing]
    return [*outputs, *kept], (*anomalies, *(Anomaly(TOOL_RESULT_SYNTHESIZED, 0, call_id)
                                             for call_id, _ in missing))


_DUPLICATE = re.compile(r"duplicate item", re.I)
# "No tool output found for function call call_1." / "No tool call found for custom tool
# call output with call_id call_2.": the call kind in words, and the call id.
_NO_OUTPUT = re.compile(r"No tool output found for ([a-z ]+?call) (\S+?)\.?(?:\s|$)")
_NO_CALL = re.compile(r"No tool call found for [a-z ]+? output with call_id (\S+?)\.?(?:\s|$)")
# The output item type of a call kind as the API words it; a computer call's output is a
# screenshot, which nothing can stand in for.
_OUTPUT_OF_WORDS = {call.replace("_", " "): output for call, output in CALL_OUTPUTS.items()
                    if call != "computer_call"}


def strict_continuation(items: Items, refusal: str = "") -> tuple[Items, tuple[Anomaly, ...]]:
    """The new ``input`` of a request continuing a stored response, after the provider
    refused it: for repeating an item it holds, the model's own items that carry an id
    (reasoning, calls, assistant messages) are the stored response's, sent again, and so
    are references (an SDK referring to the response's items by id); they go.
    For a call of the stored conversation left without its output (the client moved on),
    the output saying the result is not available is put first (``tool_result_synthesized``);
    for an output no call of the conversation made, the output goes
    (``orphan_tool_result_dropped``), unless nothing would be left to send."""
    if _DUPLICATE.search(refusal):
        edit = _Edit(items)
        for i, item in enumerate(items):
            if (_is_output(item) or item_type(item) == "item_reference") and item.get("id"):
                edit.drop(i, DUPLICATE_ITEM_DROPPED)
        return edit.result()
    missing = _NO_OUTPUT.search(refusal)
    output_type = _OUTPUT_OF_WORDS.get(missing[1]) if missing is not None else None
    if missing is not None and output_type is not None:
        synthesized = output_item(output_type, missing[2], SYNTHETIC_TOOL_RESULT_TEXT)
        return [synthesized, *items], (Anomaly(TOOL_RESULT_SYNTHESIZED, 0, missing[2]),)
    orphan = _NO_CALL.search(refusal)
    if orphan is None:
        return items, ()
    edit = _Edit(items)
    for i, item in enumerate(items):
        if item_type(item) in OUTPUT_CALLS and item.get("call_id") == orphan[1]:
            edit.drop(i, ORPHAN_TOOL_RESULT_DROPPED)
    if len(edit.dropped) == len(items):
        return items, ()
    return edit.result()


_ENCRYPTED = re.compile(r"encrypted|could not be (?:verified|decrypted)|decrypt", re.I)
_REASONING = re.compile(r"reasoning", re.I)


def refuses_encrypted(refusal: str) -> bool:
    """Whether a refusal is of encrypted content the provider could not verify."""
    return _ENCRYPTED.search(refusal) is not None


def encrypted_contents(items: Any) -> list[str]:
    """The ``encrypted_content`` of the items (encrypted reasoning) that carry one."""
    if not isinstance(items, list):
        return []
    return [item["encrypted_content"] for item in items if type(item) is dict
            and isinstance(item.get("encrypted_content"), str) and item["encrypted_content"]]


def drop_encrypted(items: Items, refused: Callable[[str], bool],
                   ) -> tuple[Items, tuple[Anomaly, ...]]:
    """``items`` without the encrypted items whose content ``refused`` says the provider
    refused on an earlier turn (``wires.refused``), made stateless as :func:`strict_input`
    made that turn (the ids go, but reasoning's and compaction's): the prefix the provider
    cached then stays the same. The provider's own encrypted items stay."""
    edit = _Edit(items)
    for i, item in enumerate(edit.items):
        secret = item.get("encrypted_content") if type(item) is dict else None
        if isinstance(secret, str) and secret and refused(secret):
            edit.drop_reasoning(i, ENCRYPTED_ITEM_DROPPED)
    if not edit.dropped:
        return items, ()
    _stateless(edit)
    return edit.result()


def _stateless(edit: _Edit) -> None:
    """Every kept item without its id but reasoning's and compaction's (those the API
    links by id; nothing else can be found upstream once the input is stateless)."""
    for i, item in enumerate(edit.items):
        if i not in edit.dropped and item_type(item) not in ("reasoning", "compaction"):
            edit.without_id(i)


def strict_input(items: Items, refusal: str = "") -> tuple[Items, tuple[Anomaly, ...]]:
    """``items`` made stateless after a refusal (``refusal``: the provider's message).

    Everything that only the provider's memory could make valid goes: encrypted items it
    cannot verify (when the refusal says so), references, reasoning items known by id
    only (all reasoning when the refusal is about reasoning), and the ids of the rest.
    """
    edit = _Edit(items)
    encrypted = _ENCRYPTED.search(refusal) is not None
    reasoning = _REASONING.search(refusal) is not None
    for i, item in enumerate(edit.items):
        kind = item_type(item)
        has_secret = type(item) is dict and bool(item.get("encrypted_content"))
        if encrypted and has_secret:
            edit.drop_reasoning(i, ENCRYPTED_ITEM_DROPPED)
        elif kind == "item_reference":
            edit.drop(i, ITEM_REFERENCE_DROPPED)
        elif kind == "reasoning" and (reasoning or not has_secret):
            edit.drop_reasoning(i, REASONING_ITEM_DROPPED)
        elif kind == "reasoning" and isinstance(item.get("content"), list) and item["content"]:
            # reasoning text another backend took ("maximum length 0"): the encrypted
            # reasoning goes on without it
            edit.set(i, {k: v for k, v in item.items() if k != "content"},
                     REASONING_CONTENT_DROPPED)
    _drop_orphan_outputs(edit)
    _stateless(edit)
    return edit.result()


def _drop_orphan_outputs(edit: _Edit) -> None:
    """Drop the outputs no kept call before them made (a call a dropped reference stood
    for: what the exchange rules left to the provider's word)."""
    made: set[Any] = set()
    for i, item in enumerate(edit.items):
        if i in edit.dropped:
            continue
        kind = item_type(item)
        if kind in CALL_OUTPUTS:
            made.add(item.get("call_id"))
        elif kind in OUTPUT_CALLS and item.get("call_id") not in made:
            edit.drop(i, ORPHAN_TOOL_RESULT_DROPPED)
