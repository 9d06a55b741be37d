"""What a provider refused as not its own, remembered per upstream model for later turns.

Anthropic binds a thinking block's signature to the model that wrote it, and OpenAI binds
encrypted reasoning to the organization that produced it. After a client switches models
mid-session (Claude Code's ``/model``) or resumes a Codex session under another
organization, every later turn still carries the old blocks: the provider would refuse each
turn once ("Invalid `signature` in `thinking` block", "The encrypted content ... could not
be verified"), and the strict rung resend it without them. The secrets that refusal covered
are remembered (a digest of each, for the model that refused it), so the session's next
turns leave those very blocks out up front and are not refused again; the model's own
blocks, and the old ones sent where they were made, go as sent.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable
from hashlib import blake2b

# Digests kept (~100 bytes each): far more than the blocks of the sessions a worker serves.
KEPT = 65_536


class RefusedSecrets:
    """The signatures and encrypted contents each upstream model refused lately (a bounded
    LRU of digests)."""

    def __init__(self, kept: int = KEPT) -> None:
        self._digests: OrderedDict[tuple[str, bytes], None] = OrderedDict()
        self._kept = kept

    def remember(self, model: str, secrets: Iterable[str]) -> None:
        """``secrets`` (signatures, encrypted contents) as refused by ``model``."""
        for secret in secrets:
            key = (model, _digest(secret))
            self._digests[key] = None
            self._digests.move_to_end(key)
        while len(self._digests) > self._kept:
            self._digests.popitem(last=False)

    def holds(self, model: str, secret: str) -> bool:
        """Whether ``model`` refused ``secret`` before."""
        return bool(self._digests) and (model, _digest(secret)) in self._digests

    def __len__(self) -> int:
        return len(self._digests)


def _digest(secret: str) -> bytes:
    return blake2b(secret.encode(), digest_size=16).digest()
