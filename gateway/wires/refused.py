"""Thinking blocks a provider refused, remembered per upstream model for the later turns.

Anthropic binds a thinking block's signature to the model that wrote it. After a client
switches models mid-session (Claude Code's ``/model``), every later turn still carries the
old model's blocks: the provider refuses each turn once ("Invalid `signature` in `thinking`
block"), and the strict rung resends it without thinking. The blocks that refusal covered
are remembered (a digest of each signature, for the model that refused it), so the session's
next turns leave those very blocks out up front and are not refused again; the new model's
own blocks, and the old ones sent to the old model, go as sent.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from hashlib import blake2b
from typing import Any

# Digests kept (~100 bytes each): far more than the blocks of the sessions a worker serves.
KEPT = 65_536


def _signature(block: Any) -> str | None:
    """A thinking block's signature (a redacted block's ``data``), None for other blocks."""
    if type(block) is not dict:
        return None
    kind = block.get("type")
    value = (block.get("signature") if kind == "thinking"
             else block.get("data") if kind == "redacted_thinking" else None)
    return value if isinstance(value, str) and value else None


class RefusedThinking:
    """The signatures each upstream model refused lately (a bounded LRU of digests)."""

    def __init__(self, kept: int = KEPT) -> None:
        self._digests: OrderedDict[tuple[str, bytes], None] = OrderedDict()
        self._kept = kept

    def remember(self, model: str, messages: Any) -> None:
        """Every signed thinking block in ``messages`` as refused by ``model``."""
        if not isinstance(messages, list):
            return
        for message in messages:
            content = message.get("content") if type(message) is dict else None
            for block in content if isinstance(content, list) else ():
                signature = _signature(block)
                if signature is not None:
                    key = (model, _digest(signature))
                    self._digests[key] = None
                    self._digests.move_to_end(key)
        while len(self._digests) > self._kept:
            self._digests.popitem(last=False)

    def refused(self, model: str) -> Callable[[Any], bool] | None:
        """A test of a block: True for a thinking block ``model`` refused before."""
        if not self._digests:
            return None

        def test(block: Any) -> bool:
            signature = _signature(block)
            return signature is not None and (model, _digest(signature)) in self._digests
        return test

    def __len__(self) -> int:
        return len(self._digests)


def _digest(signature: str) -> bytes:
    return blake2b(signature.encode(), digest_size=16).digest()
