"""What the translators (Anthropic Messages, Responses) read off a chat stream's chunks: the
tool calls as their deltas come (streamed one at a time as ``tool_use`` blocks and
``function_call`` items), the reasoning and text of a delta, and a chunk's usage.

Chat streams interleave parallel calls by index and may send a call's id and name after its
first arguments; the other wires open a block or item with its id and name, one at a time.
A call is therefore opened once its name is known and no other call is open; until then its
arguments are held, and sent with its opening (the calls still held go out whole when the
open one closes, and at the end). A call opens with its first arguments (an ``arguments``
field, even empty), so a name some servers split over two deltas arrives whole.

Gemini's OpenAI endpoint leaves ``index`` out (parallel calls in one chunk or one per chunk,
each with its own id), and some proxies send every call at index 0: a delta whose id is new
is a new call, one without an index or id goes on with the call read last.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

TOOL_KEY = "tool:"  # the translators' name for an open call: "tool:<chat index>"


@dataclass(slots=True)
class HeldCall:
    """One call as its deltas came: its id and name once known, the arguments not sent
    yet, and where it went in the translated answer (None until it was opened)."""

    id: str | None = None
    name: str = ""
    args: str = ""
    at: int | None = None
    begun: bool = False  # a delta brought its arguments (even empty): the name is whole


class CallDeltas:
    """The calls of one chat stream, by chat index, in the order first seen."""

    def __init__(self) -> None:
        self.calls: dict[int, HeldCall] = {}
        self._moved: dict[int, int] = {}  # a chat index reused by a new call -> its key
        self._last = 0  # the key of the call read last

    def _key(self, call: dict[str, Any]) -> int:
        """The key a delta's call is kept under: its chat index, unless the index is
        missing or already holds a call with another id (then a key of its own, below 0,
        never a real index)."""
        index = call.get("index")
        call_id = call.get("id") if isinstance(call.get("id"), str) else None
        if not isinstance(index, int) or isinstance(index, bool):
            if not call_id:
                return self._last
            known = next((k for k, held in self.calls.items() if held.id == call_id), None)
            return known if known is not None else -1 - len(self.calls)
        key = self._moved.get(index, index)
        held = self.calls.get(key)
        if call_id and held is not None and held.id and held.id != call_id:
            key = self._moved[index] = -1 - len(self.calls)
        return key

    def read(self, call: dict[str, Any]) -> tuple[int, HeldCall, str]:
        """A ``tool_calls`` delta taken in: the call's key (its chat index, see
        :meth:`_key`), its state (id kept from the first delta that has it; name pieces
        joined until its arguments begin, a repeated name kept once), and the arguments
        text the delta adds."""
        chat_index = self._last = self._key(call)
        function = call.get("function")
        function = function if isinstance(function, dict) else {}
        held = self.calls.setdefault(chat_index, HeldCall())
        if isinstance(call.get("id"), str) and call["id"] and not held.id:
            held.id = call["id"]
        name = function.get("name")
        if isinstance(name, str) and name and held.at is None and (
                not held.name or (not held.begun and name != held.name)):
            held.name += name
        arguments = function.get("arguments")
        if isinstance(arguments, str):
            held.begun = True
        return chat_index, held, arguments if isinstance(arguments, str) else ""

    @staticmethod
    def ready(held: HeldCall, open_key: str | None) -> bool:
        """Whether a held call can be opened now: its name is known and its arguments
        begun, no call is open."""
        return held.at is None and held.begun and bool(held.name) and not (
            open_key or "").startswith(TOOL_KEY)

    def waiting(self, *, last: bool) -> Iterator[int]:
        """The chat indexes of the calls still held (``last``: nameless ones too, but not
        one that never had an id, a name or arguments: a delta of metadata only, as
        Gemini's ``extra_content`` before its call)."""
        for chat_index, held in list(self.calls.items()):
            if held.at is None and (held.name or (last and (held.id or held.args))):
                yield chat_index


def _whole_numbers(value: Any) -> Any:
    """``value`` with its whole-number floats (``12.0``) as ints, in nested objects too
    (not past 64 bits: no wire's JSON writer takes such an int, and no count is that big)."""
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**63:
        return int(value)
    if isinstance(value, dict):
        return {key: _whole_numbers(item) for key, item in value.items()}
    return value


def chunk_usage(chunk: dict[str, Any]) -> dict[str, Any] | None:
    """A chat chunk's ``usage``, or Groq's in ``x_groq`` (its streams' last chunk carries
    the usage there), token counts sent as floats (``12.0``, some servers) made ints; None
    without one."""
    usage = chunk.get("usage")
    if not isinstance(usage, dict):
        groq = chunk.get("x_groq")
        usage = groq.get("usage") if isinstance(groq, dict) else None
    return _whole_numbers(usage) if isinstance(usage, dict) else None


def _part_words(part: Any) -> tuple[str, str] | None:
    """One content part of Mistral's Magistral as (kind, words): a ``text`` part, or a
    ``thinking`` part (its text parts joined); None for anything else."""
    if not isinstance(part, dict):
        return None
    if part.get("type") == "text" and isinstance(part.get("text"), str):
        return "text", part["text"]
    inner = part.get("thinking")
    if part.get("type") != "thinking" or not isinstance(inner, str | list):
        return None
    if isinstance(inner, str):
        return "thinking", inner
    return "thinking", "".join(p["text"] for p in inner
                               if isinstance(p, dict) and isinstance(p.get("text"), str))


def delta_words(delta: dict[str, Any]) -> list[tuple[str, str]]:
    """The reasoning and text of one chat delta, in order, as ("thinking" | "text", words):
    ``reasoning_content`` (DeepSeek, vLLM's reasoning parsers) or ``reasoning``
    (OpenRouter, newer vLLM), then ``content``: a string, or a list of parts (Mistral's
    Magistral streams its thinking and text as parts)."""
    out: list[tuple[str, str]] = []
    thought = delta.get("reasoning_content") or delta.get("reasoning")
    if isinstance(thought, str) and thought:
        out.append(("thinking", thought))
    content = delta.get("content")
    if isinstance(content, str):
        out.append(("text", content))
    elif isinstance(content, list):
        out += [words for part in content if (words := _part_words(part)) is not None]
    return [(kind, words) for kind, words in out if words]
