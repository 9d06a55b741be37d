"""Hash chains over chat messages (pure, no I/O).

The chain identifies every prefix of a history cheaply::

    h_0 = b""
    h_i = sha256(h_{i-1} + canonical(msg_i))      (h_{i-1} as raw 32-byte digest)

``canonical`` is ``orjson.dumps(msg, option=OPT_SORT_KEYS)``, so key order inside a
message does not matter but every value does, except prompt-cache breakpoints
(``cache_control`` on the message or one of its content parts): they mark a prefix, they
are not part of it, and agents move them forward every turn.
``prefix_chain(messages)[k - 1]`` is the hex digest of the first ``k`` messages; a history
that begins with a stored prefix has the same digest at that position.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import orjson

__all__ = [
    "canonical",
    "extend_chain",
    "hash_client_key",
    "prefix_chain",
    "session_fingerprint",
]

_SORT = orjson.OPT_SORT_KEYS
_FINGERPRINT_ROLES = frozenset({"system", "developer"})


def canonical(message: Mapping[str, Any]) -> bytes:
    """Return the canonical bytes of one message (orjson, keys sorted)."""
    return orjson.dumps(message, option=_SORT)


def extend_chain(previous: str | None, messages: Iterable[Mapping[str, Any]]) -> list[str]:
    """Continue a chain from the hex digest ``previous`` (``None`` = empty history).

    Returns one hex digest per message of ``messages``; ``extend_chain(None, m)`` equals
    ``prefix_chain(m)``, and ``prefix_chain(a + b) == prefix_chain(a) +
    extend_chain(prefix_chain(a)[-1], b)``.
    """
    prev = b"" if previous is None else bytes.fromhex(previous)
    sha256 = hashlib.sha256
    out: list[str] = []
    append = out.append
    for msg in messages:
        prev = sha256(prev + orjson.dumps(_unmarked(msg), option=_SORT)).digest()
        append(prev.hex())
    return out


def _unmarked(message: Mapping[str, Any]) -> Mapping[str, Any]:
    """``message`` without its ``cache_control`` markers (itself when it has none)."""
    content = message.get("content")
    parts: list[Any] = content if isinstance(content, list) else []
    marked_parts = any(isinstance(part, Mapping) and "cache_control" in part for part in parts)
    if "cache_control" not in message and not marked_parts:
        return message
    out = {k: v for k, v in message.items() if k != "cache_control"}
    if marked_parts:
        out["content"] = [
            {k: v for k, v in part.items() if k != "cache_control"}
            if isinstance(part, Mapping) else part for part in parts]
    return out


def prefix_chain(messages: Sequence[Mapping[str, Any]]) -> list[str]:
    """Return the chain digests (hex) of ``messages``: one per prefix length 1..n."""
    return extend_chain(None, messages)


def _fingerprint_view(message: Mapping[str, Any]) -> dict[str, Any]:
    """Role + content, with ``cache_control`` markers removed from content parts.

    Clients move cache breakpoints from call to call; they must not change the
    fingerprint of a session.
    """
    content = message.get("content")
    if isinstance(content, list):
        content = [
            {k: v for k, v in part.items() if k != "cache_control"}
            if isinstance(part, Mapping)
            else part
            for part in content
        ]
    return {"role": message.get("role"), "content": content}


def session_fingerprint(messages: Sequence[Mapping[str, Any]]) -> str:
    """Return a stable session id for clients that send none (hex sha256).

    Hashes the leading system/developer messages (those before the first user message)
    and the first user message, by role and content only. Later messages, injected
    mid-history system reminders and moving ``cache_control`` markers do not change it.
    A history with no user message is fingerprinted by its leading system messages.
    """
    h = hashlib.sha256(b"gw-session-fingerprint\x00")
    for msg in messages:
        role = msg.get("role")
        if role == "user":
            h.update(b"u" + canonical(_fingerprint_view(msg)) + b"\x00")
            break
        if role in _FINGERPRINT_ROLES:
            h.update(b"s" + canonical(_fingerprint_view(msg)) + b"\x00")
    return h.hexdigest()


def hash_client_key(key: str) -> str:
    """Return the stored form of a client key (sha256 hex, domain-separated).

    Stores keep only this, never the key itself.
    """
    return hashlib.sha256(b"gw-client-key\x00" + key.encode("utf-8")).hexdigest()
