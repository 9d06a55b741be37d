"""Prefix stability per session (issue 26): where a turn's prompt first differs from the
previous turn's, and how many tokens that put out of the provider's cacheable prefix.

Providers cache a prompt's longest repeated prefix (tools, then the system prompt, then the
messages in order); one changed byte early invalidates everything after it. For each model
request of a session this compares the prompt the upstream received with the previous
turn's, piece by piece, by hashes of the pieces (Python's cached string hash of text
content, a serialization only for other content and tool calls; the leading messages that
are the previous turn's very objects are not looked at again), when the answer is about to
be relayed, before the gateway lets go of the parsed request:

``first``      the session's first turn seen by this process
``unchanged``  the same prompt again
``appended``   the previous prompt, with messages added at the end (the healthy case)
``tools``      the tool schemas changed
``system``     the system prompt changed (Responses ``instructions``, Anthropic ``system``,
               or a system/developer message)
``message``    message ``index`` changed (or was removed)
``gateway``    the client's messages kept their prefix but what the gateway sent did not (a
               repair or compaction changed an earlier turn): the gateway's fault

Sessions are remembered in a bounded LRU (hashes for ``SESSIONS``, the previous messages
themselves for the last ``KEEP_MESSAGES`` sessions, for the side-by-side view).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from hashlib import blake2b
from typing import Any

import orjson

from gateway.projection.anomalies import Message
from gateway.telemetry.context import common_prefix

SESSIONS = 10_000
KEEP_MESSAGES = 64
SHOWN_CHARS = 2_000
CHARS_PER_TOKEN = 4
CAUSES = ("first", "unchanged", "appended", "tools", "system", "message", "gateway")
_SYSTEM_ROLES = frozenset({"system", "developer"})


def _digest(value: Any) -> tuple[bytes, int]:
    """(8-byte hash, serialized length) of a JSON value."""
    raw = orjson.dumps(value, default=str)
    return blake2b(raw, digest_size=8).digest(), len(raw)


@dataclass(slots=True)
class _Turn:
    tools: bytes
    system: bytes
    sent: list[int]
    cumulative: list[int]  # tokens before message i (estimate), i = 0..len(sent)
    client: list[int] | None  # None: the client's messages were the ones sent
    system_tokens: int  # the body's own system fields (Responses, Messages)
    head: PromptHead | None = None  # the values ``tools`` and ``system`` digest


@dataclass(frozen=True, slots=True)
class PromptHead:
    """The parts of a request body before its messages: tool schemas and system fields."""

    tools: tuple[Any, ...] = ()  # ``tools``, legacy ``functions``
    system: tuple[Any, ...] = ()  # Responses ``instructions``, Anthropic ``system``

    @classmethod
    def of(cls, body: Mapping[str, Any]) -> PromptHead:
        """The head of ``body`` (references, nothing copied)."""
        return cls((body.get("tools"), body.get("functions")),
                   (body.get("instructions"), body.get("system")))

    def same(self, other: PromptHead) -> bool:
        """True when ``other`` holds the very same values (nothing in the gateway edits a
        client's value in place, so they serialize the same)."""
        return all(a is b for a, b in zip(self.tools + self.system, other.tools + other.system,
                                          strict=True))


@dataclass(frozen=True, slots=True)
class PrefixBreak:
    """One turn's comparison with the previous turn of its session."""

    cause: str
    index: int | None = None  # the first message that differs
    field: str | None = None  # which of its fields (role, content, tool_calls, ...)
    lost_tokens: int = 0  # of the previous prompt, now outside the cacheable prefix
    before: str | None = None  # the two versions at the first difference (inspector)
    after: str | None = None

    @property
    def broke(self) -> bool:
        """True when the cached prefix of the previous turn was not reused whole."""
        return self.cause not in ("first", "unchanged", "appended")

    def as_dict(self) -> dict[str, Any]:
        """The inspector's view."""
        return {"cause": self.cause, "index": self.index, "field": self.field,
                "lost_tokens": self.lost_tokens, "before": self.before, "after": self.after}


def _message_digest(message: Message) -> tuple[int, int]:
    """(hash, tokens estimate) of one message. Text content is hashed by Python's own string
    hash (computed once per string object, then cached by it): no serialization."""
    content = message.get("content")
    if content.__class__ is str:
        size = len(content)
    else:
        content = orjson.dumps(content, default=str)
        size = len(content)
    rest = (message.get("tool_calls"), message.get("tool_call_id"), message.get("name"))
    if rest == (None, None, None):
        return hash((message.get("role"), content, len(message))), -(-size // CHARS_PER_TOKEN)
    extra = orjson.dumps(rest, default=str)
    return (hash((message.get("role"), content, extra, len(message))),
            -(-(size + len(extra)) // CHARS_PER_TOKEN))


def _hashes(messages: Sequence[Message], previous: Sequence[Message] | None = None,
            turn: _Turn | None = None) -> tuple[list[int], list[int]]:
    """Hashes and cumulative token estimates of ``messages``; the leading messages that are
    the very objects of the ``previous`` turn (the edge reads an agent's next turn over the
    one before it, reusing them) take that turn's figures without serializing again."""
    hashes: list[int] = []
    cumulative, total, start = [0], 0, 0
    if previous is not None and turn is not None:
        start = min(common_prefix(previous, messages), len(turn.sent))
        hashes, cumulative = turn.sent[:start], turn.cumulative[:start + 1]
        total = cumulative[-1]
    for message in messages[start:]:
        digest, tokens = _message_digest(message)
        hashes.append(digest)
        total += tokens
        cumulative.append(total)
    return hashes, cumulative


def _first_difference(old: list[int], new: list[int]) -> int | None:
    """The first index where ``new`` stops extending ``old`` (None: it extends it)."""
    shared = common_prefix(old, new)
    return None if shared == len(old) else shared


def _shown(value: Any) -> str:
    text = value if isinstance(value, str) else orjson.dumps(value, default=str).decode()
    return text if len(text) <= SHOWN_CHARS else text[:SHOWN_CHARS] + "…"


def _field(old: Message, new: Message) -> str:
    for key in ("role", "content", "tool_calls", "tool_call_id", "name"):
        if old.get(key) != new.get(key):
            return key
    return next((k for k in sorted(set(old) | set(new)) if old.get(k) != new.get(k)), "")


def session_key(model: str, session_id: str | None, messages: Sequence[Message],
                fingerprint: str | None = None) -> str:
    """The session a request's prompt is compared within: model and session id (or, for a
    client that sends none, its session ``fingerprint`` when the edge computed it while
    reading, else a hash of its first two messages)."""
    if session_id:
        return f"{model}\x00{session_id}"
    if fingerprint:
        return f"{model}\x00fp-{fingerprint}"
    first = orjson.dumps(list(messages[:2]), default=str)
    return f"{model}\x00fp-{blake2b(first, digest_size=12).hexdigest()}"


class PrefixTracker:
    """The previous turn of each recent session, and the comparison of the next one."""

    def __init__(self, sessions: int = SESSIONS, keep_messages: int = KEEP_MESSAGES) -> None:
        self._turns: OrderedDict[str, _Turn] = OrderedDict()
        self._sent_by_session: OrderedDict[str, Sequence[Message]] = OrderedDict()
        # A repaired turn's client messages and their sums, for the next repaired turn.
        self._clients: OrderedDict[str, tuple[Sequence[Message], _Turn]] = OrderedDict()
        self._sessions, self._keep = sessions, keep_messages

    def observe(self, key: str, head: PromptHead, client: Sequence[Message],
                sent: Sequence[Message] | None) -> PrefixBreak:
        """Compare this turn (``sent``: what the upstream received, ``client``: what the
        client sent) with the previous one of session ``key``, and remember it."""
        upstream = client if sent is None else sent
        previous = self._turns.pop(key, None)
        if previous is not None and previous.head is not None and previous.head.same(head):
            # An agent's next turn read over the previous one shares its fields' objects.
            tools, system, system_tokens = previous.tools, previous.system, previous.system_tokens
        else:
            tools, _ = _digest(head.tools)
            system, system_size = _digest(head.system)
            system_tokens = -(-system_size // CHARS_PER_TOKEN)
        old_messages = self._sent_by_session.pop(key, None)
        sent_hashes, cumulative = _hashes(upstream, old_messages, previous)
        client_hashes = None
        kept_client = self._clients.pop(key, None)
        if upstream is not client:  # repaired: from the last repaired turn, or what it kept
            reuse = kept_client or (upstream, _Turn(tools, system, sent_hashes, cumulative,
                                                   None, 0))
            client_hashes, client_sums = _hashes(client, reuse[0], reuse[1])
            self._clients[key] = (client, _Turn(tools, system, client_hashes, client_sums,
                                                None, 0))
            if len(self._clients) > self._keep:
                self._clients.popitem(last=False)
        self._turns[key] = _Turn(tools, system, sent_hashes, cumulative, client_hashes,
                                 system_tokens, head)
        self._sent_by_session[key] = upstream
        if len(self._turns) > self._sessions:
            self._turns.popitem(last=False)
        if len(self._sent_by_session) > self._keep:
            self._sent_by_session.popitem(last=False)
        if previous is None:
            return PrefixBreak("first")
        lost_all = previous.cumulative[-1] + previous.system_tokens
        if previous.tools != tools:  # everything after the tools (the tools are new anyway)
            return PrefixBreak("tools", lost_tokens=lost_all)
        if previous.system != system:
            return PrefixBreak("system", lost_tokens=lost_all)
        index = _first_difference(previous.sent, sent_hashes)
        if index is None:
            return PrefixBreak("unchanged" if len(sent_hashes) == len(previous.sent)
                               else "appended")
        lost = previous.cumulative[-1] - previous.cumulative[index]
        old = (old_messages[index] if old_messages is not None and index < len(old_messages)
               else None)
        new = upstream[index] if index < len(upstream) else None
        before = None if old is None else _shown(old.get("content"))
        after = None if new is None else _shown(new.get("content"))
        what = _field(old, new) if old is not None and new is not None else None
        old_client = previous.client if previous.client is not None else previous.sent
        new_client = client_hashes if client_hashes is not None else sent_hashes
        client_index = _first_difference(old_client, new_client)
        if client_index is None or client_index > index:
            return PrefixBreak("gateway", index, what, lost, before, after)
        role = new.get("role") if new is not None else None
        cause = "system" if role in _SYSTEM_ROLES else "message"
        return PrefixBreak(cause, index, what, lost, before, after)
