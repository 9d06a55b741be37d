"""A chat stream's tool calls as their deltas come, for the translators that stream them
one at a time (Anthropic ``tool_use`` blocks, Responses ``function_call`` items).

Chat streams interleave parallel calls by index and may send a call's id and name after its
first arguments; the other wires open a block or item with its id and name, one at a time.
A call is therefore opened once its name is known and no other call is open; until then its
arguments are held, and sent with its opening (the calls still held go out whole when the
open one closes, and at the end).
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


class CallDeltas:
    """The calls of one chat stream, by chat index, in the order first seen."""

    def __init__(self) -> None:
        self.calls: dict[int, HeldCall] = {}

    def read(self, call: dict[str, Any]) -> tuple[int, HeldCall, str]:
        """A ``tool_calls`` delta taken in: the call's chat index, its state (id and name
        kept from the first delta that has them), and the arguments text the delta adds."""
        chat_index = call["index"] if isinstance(call.get("index"), int) else 0
        function = call.get("function") or {}
        held = self.calls.setdefault(chat_index, HeldCall())
        if isinstance(call.get("id"), str) and call["id"] and not held.id:
            held.id = call["id"]
        if isinstance(function.get("name"), str) and function["name"] and not held.name:
            held.name = function["name"]
        arguments = function.get("arguments")
        return chat_index, held, arguments if isinstance(arguments, str) else ""

    @staticmethod
    def ready(held: HeldCall, open_key: str | None) -> bool:
        """Whether a held call can be opened now: its name is known, no call is open."""
        return held.at is None and bool(held.name) and not (open_key or "").startswith(
            TOOL_KEY)

    def waiting(self, *, last: bool) -> Iterator[int]:
        """The chat indexes of the calls still held (``last``: nameless ones too)."""
        for chat_index, held in list(self.calls.items()):
            if held.at is None and (held.name or last):
                yield chat_index
