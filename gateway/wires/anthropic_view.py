"""Anthropic Messages history <-> the neutral chat view (pure, no I/O).

Into the view: an assistant message becomes one assistant message whose content parts are
its blocks as they are (``thinking``, ``redacted_thinking``, text with ``cache_control``,
...) and whose ``tool_use`` blocks become tool calls; assistant messages in a row after one
with tool calls become that one message (the API reads them as one turn, so a tool_use
followed by more assistant text is answered after both); a user message becomes, in block
order, one tool message per ``tool_result`` block and one user message per run of other
blocks; an empty final assistant message (valid there) becomes an opaque message the
projection leaves alone. Anthropic text blocks have the OpenAI text-part shape, so blank
ones are found by the same rules; ``is_error`` stays on the wire block (it is native here,
not a gateway extension to render).

Back to the wire: an untouched message is written as it came, byte for byte (assistant
messages read as one, as they came); a changed one is rebuilt from its own blocks in their
original order (signed thinking blocks are the
same objects); synthesized results become ``tool_result`` blocks.
"""

from __future__ import annotations

import math
from typing import Any

import orjson

from gateway.projection.exchanges import OPAQUE_ROLE
from gateway.wires.base import WIRE_KEY, Message, WireView

# Content of a tool_result without ``content``: not a string or list, so rendering
# leaves it alone (an absent content is valid on this wire).
_ABSENT = {"absent": True}


class AnthropicView(WireView):
    """The neutral view of an Anthropic ``messages`` list (see the module docstring)."""

    __slots__ = ("_positions", "groups", "members", "originals")

    def __init__(self) -> None:
        super().__init__()
        self.groups: list[int] = []  # neutral index -> wire message index
        self.members: dict[int, list[int]] = {}  # wire message index -> neutral indexes
        self.originals: list[Any] = []
        self._positions: dict[int, tuple[int, int]] | None = None

    @property
    def positions(self) -> dict[int, tuple[int, int]]:
        """``id(block)`` -> (message, block) of every block of the wire messages: built the
        first time a changed assistant message is written back (a history sent as it came
        never needs it)."""
        if self._positions is None:
            self._positions = {
                id(block): (i, j)
                for i, message in enumerate(self.originals)
                if type(message) is dict and isinstance(content := message.get("content"), list)
                for j, block in enumerate(content)}
        return self._positions

    def _add(self, message: Message, source: list[Any], wire_index: int) -> None:
        k = len(self.messages)
        self.add(message, source)
        self.groups.append(wire_index)
        self.members.setdefault(wire_index, []).append(k)


def parse_messages(messages: list[Any]) -> AnthropicView:
    """The neutral view of a (validated) Anthropic ``messages`` list."""
    view = AnthropicView()
    _parse_into(view, messages, 0)
    return view


def extend_view(view: AnthropicView, cut: int, messages: list[Any]) -> AnthropicView:
    """The view of ``messages``, whose first ``cut`` are the first ``cut`` of the list
    ``view`` was read from (the same objects) and end with a user message, or with an
    assistant message the next one (a user message) follows: those are read as they were,
    the rest from ``messages[cut:]``. ``view`` is left as it is; the new view shares its
    neutral messages (nothing changes a view's messages in place)."""
    kept = len(view.messages)
    while kept and view.groups[kept - 1] >= cut:
        kept -= 1
    out = AnthropicView()
    out.messages = view.messages[:kept]
    out.sources = view.sources[:kept]
    out.groups = view.groups[:kept]
    # (in the order of their wire index: all of them when the turn only added messages)
    out.members = (dict(view.members) if next(reversed(view.members), -1) < cut
                   else {i: ks for i, ks in view.members.items() if i < cut})
    out.calls = dict(view.calls)
    for message in view.messages[kept:]:
        for call in message.get("tool_calls") or ():
            out.calls.pop(id(call), None)
    _parse_into(out, messages, cut)
    return out


def _parse_into(view: AnthropicView, messages: list[Any], start: int) -> None:
    # (one loop over locals: a history of hundreds of messages is read whole on a body the
    # gateway never saw; ``AnthropicView._add`` inlined)
    view.originals = messages
    out, sources, groups, members = view.messages, view.sources, view.groups, view.members
    last = len(messages) - 1
    for i in range(start, last + 1):
        msg = messages[i]
        role = msg.get("role")
        content = msg.get("content")
        if role == "assistant":
            if i == last and content in ("", []):
                # Valid as it is ("all messages must have non-empty content except for the
                # optional final assistant message"): not a blank turn for the exchange
                # rules.
                view._add({"role": OPAQUE_ROLE}, [msg], i)
                continue
            message = _assistant(view, content)
            if i and messages[i - 1].get("role") == "assistant" and _joined_turn(
                    view, messages, i, message, msg):
                continue
            k = message[WIRE_KEY] = len(out)
            out.append(message)
            sources.append([msg])
            groups.append(i)
            members[i] = [k]
            continue
        if content.__class__ is not list:
            k = len(out)
            out.append({"role": "user", "content": content, WIRE_KEY: k})
            sources.append([msg])
            groups.append(i)
            members[i] = [k]
            continue
        run: list[Any] = []
        mine: list[int] = []
        for block in content:
            if block.__class__ is dict and block.get("type") == "tool_result":
                if run:
                    mine.append(k := len(out))
                    out.append({"role": "user", "content": run, WIRE_KEY: k})
                    sources.append([msg])
                    run = []
                mine.append(k := len(out))
                out.append({"role": "tool", "tool_call_id": block.get("tool_use_id"),
                            "content": block.get("content", _ABSENT), WIRE_KEY: k})
                sources.append([block])
            else:
                run.append(block)
        if run or not content:
            mine.append(k := len(out))
            out.append({"role": "user", "content": run, WIRE_KEY: k})
            sources.append([msg])
        groups.extend([i] * len(mine))
        members[i] = mine


def _assistant(view: AnthropicView, content: Any) -> Message:
    if not isinstance(content, list):
        return {"role": "assistant", "content": content}
    parts: list[Any] = []
    calls: list[dict[str, Any]] = []
    for block in content:
        if type(block) is dict and block.get("type") == "tool_use":
            call = {
                "id": block.get("id"),
                "type": "function",
                "function": {"name": block.get("name"),
                             "arguments": orjson.dumps(block.get("input", {})).decode()},
            }
            view.calls[id(call)] = block
            calls.append(call)
        else:
            parts.append(block)
    message: Message = {"role": "assistant", "content": parts if parts or not calls else None}
    if calls:
        message["tool_calls"] = calls
    return message


def _joined_turn(view: AnthropicView, messages: list[Any], i: int, message: Message,
                 msg: Any) -> bool:
    """Join assistant message ``i`` to the neutral message of the assistant message before
    it when that one made tool calls: one turn to the API, whose results follow both (its
    content a string too: a client that writes a step's words as a plain message)."""
    if i == 0 or not view.messages or not isinstance(msg.get("content"), list | str):
        return False
    before = messages[i - 1]
    last = view.messages[-1]
    if not (type(before) is dict and before.get("role") == "assistant"
            and isinstance(before.get("content"), list) and last.get("role") == "assistant"
            and last.get("tool_calls") and view.sources[-1][-1] is before):
        return False
    said = message.get("content")
    if isinstance(said, str):  # (its words as a text block; a blank one the rules drop)
        said = [{"type": "text", "text": said}]
    parts = [*(last.get("content") or []), *(said or [])]
    calls = [*last["tool_calls"], *(message.get("tool_calls") or [])]
    last["content"] = parts or None
    last["tool_calls"] = calls
    view.sources[-1].append(msg)
    view.members.setdefault(i, []).append(len(view.messages) - 1)
    return True


def render_messages(view: AnthropicView, projected: list[Any]) -> list[Any]:
    """The Anthropic ``messages`` for a projected neutral history."""
    if view.unchanged(projected):
        return view.originals
    out: list[Any] = []
    run: list[Any] = []
    for message in projected:
        if type(message) is dict and message.get("role") == "assistant":
            _flush(view, run, out)
            run = []
            out.extend(_assistant_messages(view, message))
        else:
            run.append(message)
    _flush(view, run, out)
    return out


def _flush(view: AnthropicView, run: list[Any], out: list[Any]) -> None:
    """Write a run of neutral user/tool messages as user messages: a wire message whose
    neutral messages all came back untouched and together is written as it came."""
    blocks: list[Any] = []
    start = 0
    while start < len(run):
        k, _ = view.origin(run[start])
        group = view.groups[k] if k is not None else None
        end = start + 1
        while end < len(run):
            nk, _ = view.origin(run[end])
            if nk is None or view.groups[nk] != group:
                break
            end += 1
        segment = run[start:end]
        if group is not None and _whole(view, group, segment):
            if blocks:
                out.append({"role": "user", "content": blocks})
                blocks = []
            out.append(view.originals[group])
        else:
            for message in segment:
                blocks.extend(_user_blocks(view, message))
        start = end
    if blocks:
        out.append({"role": "user", "content": blocks})


def _whole(view: AnthropicView, group: int, segment: list[Any]) -> bool:
    members = view.members[group]
    return len(members) == len(segment) and all(
        view.messages[k] is m for k, m in zip(members, segment, strict=True)
    )


def _user_blocks(view: AnthropicView, message: Any) -> list[Any]:
    if type(message) is not dict:
        return []
    k, untouched = view.origin(message)
    content = message.get("content")
    if message.get("role") == "tool":
        if k is not None:
            block = view.sources[k][0]
            if untouched:
                return [block]
            rebuilt = {key: v for key, v in block.items() if key != "content"}
            if content is not _ABSENT:
                rebuilt["content"] = content
            return [rebuilt]
        return [{"type": "tool_result", "tool_use_id": message.get("tool_call_id"),
                 "content": content}]
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return list(content) if isinstance(content, list) else []


def _assistant_messages(view: AnthropicView, message: Message) -> list[Any]:
    k, untouched = view.origin(message)
    if untouched and k is not None:
        return list(view.sources[k])
    content = message.get("content")
    keyed: list[tuple[tuple[float, int], Any]] = []
    if isinstance(content, str):
        keyed.append(((math.inf, 0), {"type": "text", "text": content}))
    elif isinstance(content, list):
        keyed.extend((_position(view, block, n), block) for n, block in enumerate(content))
    for n, call in enumerate(message.get("tool_calls") or ()):
        block = view.calls.get(id(call))
        if block is None:
            block = _new_tool_use(call)
        keyed.append((_position(view, block, 10_000 + n), block))
    keyed.sort(key=lambda pair: pair[0])
    sources = view.sources[k] if k is not None else [{"role": "assistant"}]
    if len(sources) == 1:
        rebuilt = {key: v for key, v in sources[0].items() if key not in ("content", WIRE_KEY)}
        rebuilt["content"] = [block for _, block in keyed]
        return [rebuilt]
    # Assistant messages read as one turn go back as the messages they were, each with its
    # own blocks (new ones with the last).
    assert k is not None
    first = view.groups[k]
    split: list[list[Any]] = [[] for _ in sources]
    for (at, _), block in keyed:
        n = len(sources) - 1 if at == math.inf else int(at) - first
        split[min(max(n, 0), len(sources) - 1)].append(block)
    out: list[Any] = []
    for source, blocks in zip(sources, split, strict=True):
        if blocks:
            rebuilt = {key: v for key, v in source.items() if key not in ("content", WIRE_KEY)}
            rebuilt["content"] = blocks
            out.append(rebuilt)
    return out


def _position(view: AnthropicView, block: Any, fallback: int) -> tuple[float, int]:
    found = view.positions.get(id(block))
    if found is None:
        return (math.inf, fallback)
    return (float(found[0]), found[1])


def _new_tool_use(call: Any) -> dict[str, Any]:
    function = call.get("function") or {}
    try:
        arguments = orjson.loads(function.get("arguments") or "{}")
    except orjson.JSONDecodeError:
        arguments = {}
    return {"type": "tool_use", "id": call.get("id"), "name": function.get("name"),
            "input": arguments if isinstance(arguments, dict) else {}}
