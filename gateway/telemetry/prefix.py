"""Prefix stability per session (issue 26): where a turn's prompt first differs from the
previous turn's, and how many tokens that put out of the provider's cacheable prefix.

Providers cache a prompt's longest repeated prefix (tools, then the system prompt, then the
messages in order); one changed byte early invalidates everything after it. For each model
request of a session this compares the prompt the upstream received with the previous
turn's, piece by piece, when the answer is about to be relayed, before the gateway lets go
of the parsed request. A turn the edge read over the previous turn's very body (its
``EdgeTurn``) is appended without looking at a message. Otherwise the previous turn's
messages themselves are compared with this turn's (list comparison in C: messages that are
the previous turn's very objects cost an identity check); nothing is hashed or counted
unless a break is found. A
session whose messages are let go (only the last ``KEEP_MESSAGES`` sessions keep theirs) is
compared by hashes of its pieces (Python's string hash of text content, a serialization
only for other content and tool calls), made when its messages are let go, and only for a
session seen more than once (a one-off request that returns is a ``first`` again):

``first``      the session's first turn seen by this process
``unchanged``  the same prompt again
``appended``   the previous prompt, with messages added at the end (the healthy case)
``tools``      the tool schemas changed
``system``     the system prompt changed (Responses ``instructions``, Anthropic ``system``,
               or a system/developer message)
``message``    message ``index`` changed (or was removed)
``gateway``    the client's messages kept their prefix but what the gateway sent did not (a
               repair or compaction changed an earlier turn): the gateway's fault

Sessions are remembered in a bounded LRU (``SESSIONS``), the previous messages themselves
for the last ``KEEP_MESSAGES`` sessions (also for the side-by-side view), those seen once
in a short probation (``context.RecentSessions``).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from hashlib import blake2b
from typing import Any

import orjson

from gateway.projection.anomalies import Message
from gateway.projection.lazy_messages import LazyMessages
from gateway.sessions.hashing import session_fingerprint
from gateway.telemetry.context import (
    CHARS_PER_TOKEN,
    SYSTEM_ROLES,
    EdgeTurn,
    RecentSessions,
    common_prefix,
    serialized_schemas,
)

SESSIONS = 10_000
# Sessions whose messages are kept: about as many as the edge's history cache holds by
# default (their messages are the same objects).
KEEP_MESSAGES = 32
SHOWN_CHARS = 2_000
CAUSES = ("first", "unchanged", "appended", "tools", "system", "message", "gateway")
# Keys that are no part of the prompt a provider caches: Anthropic's cache breakpoints, and
# the neutral view's tag of a wire message (gateway.wires.base.WIRE_KEY, last here).
NOT_PROMPT = ("cache_control", "x-wire-source")


def _digest(value: Any) -> tuple[bytes, int]:
    """(8-byte hash, serialized length) of a JSON value, without its cache breakpoints
    (Anthropic ``system`` blocks and tools carry them too: a moved marker is no change)."""
    raw = orjson.dumps(value, default=str)
    if b'"cache_control"' in raw:
        raw = orjson.dumps(_as_prompt(value), default=str)
    return blake2b(raw, digest_size=8).digest(), len(raw)


@dataclass(slots=True)
class _Turn:
    """One session's last turn: its prompt head, and its messages while they are kept (the
    hashes and token estimates of the pieces once they are let go)."""

    head: PromptHead
    tools: bytes
    system: bytes
    system_tokens: int  # the body's own system fields (Responses, Messages)
    sent: Sequence[Message] | None  # what the upstream received, while kept
    client: Sequence[Message] | None  # the client's messages when they differ, while kept
    turns: int = 1
    token: object | None = None  # the edge's name for the body ``sent`` is (not repaired)
    sent_hashes: list[int] | None = None  # once the messages are let go
    cumulative: list[int] | None = None  # tokens before message i (estimate)
    client_hashes: list[int] | None = None

    def let_go(self) -> None:
        """Drop the messages, keeping their hashes and token estimates."""
        if self.sent is not None:
            self.sent_hashes, self.cumulative = _hashes(self.sent)
            if self.client is not None:
                self.client_hashes = _hashes(self.client)[0]
        self.sent = self.client = None


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
    content, extra, size = _prompt_parts(message)
    keys = len(message) - (NOT_PROMPT[-1] in message)
    key = ((message.get("role"), content, keys) if extra is None
           else (message.get("role"), content, extra, keys))
    return hash(key), -(-size // CHARS_PER_TOKEN)


def _prompt_parts(message: Message) -> tuple[Any, bytes | None, int]:
    """What of one message is in the prompt: its content (a string as it is, anything else
    as JSON without what is no part of the prompt), its calls, call id and name as JSON
    (None without any), and their size in characters."""
    content = message.get("content")
    if content.__class__ is str:
        size = len(content)
    else:
        content = orjson.dumps(content, default=str)
        if b'"cache_control"' in content:  # a breakpoint marks the prefix, it is not in it
            content = orjson.dumps(_as_prompt(message.get("content")), default=str)
        size = len(content)
    rest = (message.get("tool_calls"), message.get("tool_call_id"), message.get("name"))
    if rest == (None, None, None):
        return content, None, size
    extra = orjson.dumps(rest, default=str)
    return content, extra, size + len(extra)


def _as_prompt(value: Any) -> Any:
    """``value`` without what is no part of the prompt a provider caches (``NOT_PROMPT``)."""
    if isinstance(value, dict):
        return {k: _as_prompt(v) for k, v in value.items() if k not in NOT_PROMPT}
    if isinstance(value, list | tuple):  # (a prompt head's fields are a tuple)
        return [_as_prompt(v) for v in value]
    return value


def same_prompt(old: Any, new: Any) -> bool:
    """Whether two messages (or any JSON values) are the same prompt: they differ at most in
    what is no part of it (``NOT_PROMPT``: a moved cache breakpoint)."""
    return bool(old == new or _as_prompt(old) == _as_prompt(new))


def _prompt_prefix(old: Sequence[Message], new: Sequence[Message], shared: int) -> int:
    """``shared`` (how many leading messages are equal) extended over the messages that
    differ only in what is no part of the prompt: Claude Code moves its last breakpoint
    forward every turn, and a repaired turn's messages carry the gateway's own tags."""
    n = min(len(old), len(new))
    while shared < n and _as_prompt(old[shared]) == _as_prompt(new[shared]):
        shared += 1
    return shared


def _hashes(messages: Sequence[Message]) -> tuple[list[int], list[int]]:
    """Hashes and cumulative token estimates of ``messages``."""
    hashes: list[int] = []
    cumulative, total = [0], 0
    for message in messages:
        digest, tokens = _message_digest(message)
        hashes.append(digest)
        total += tokens
        cumulative.append(total)
    return hashes, cumulative


def _tokens(messages: Sequence[Message]) -> int:
    """The token estimate of ``messages`` (what a break put out of the cached prefix), as
    :func:`_message_digest` gives it, without hashing them (a 600-message history's texts
    hashed are ~300 KB run through SipHash: a trimmer's every turn puts most of them out)."""
    return sum(-(-_prompt_parts(message)[2] // CHARS_PER_TOKEN) for message in messages)


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
                fingerprint: str | None = None, owner: str | None = None) -> str:
    """The session a request's prompt is compared within: the client's ``owner`` (two teams
    never share a session, even under one session id or one agent's first messages), model
    and session id (or, for a client that sends none, its session ``fingerprint`` when the
    edge computed it while reading, else the same fingerprint computed here: the system
    messages and the first user message, whatever follows and wherever a breakpoint stands,
    so a session's first turn is one with its second)."""
    if session_id:
        return f"{owner or ''}\x00{model}\x00{session_id}"
    return f"{owner or ''}\x00{model}\x00fp-{fingerprint or session_fingerprint(messages)}"


class PrefixTracker:
    """The previous turn of each recent session, and the comparison of the next one."""

    def __init__(self, sessions: int = SESSIONS, keep_messages: int = KEEP_MESSAGES) -> None:
        self._turns: OrderedDict[str, _Turn] = OrderedDict()
        # The sessions whose messages are kept (those seen once in a short probation).
        self._kept: RecentSessions[str] = RecentSessions(keep_messages)
        self._sessions = sessions

    def observe(self, key: str, head: PromptHead, client: Sequence[Message],
                sent: Sequence[Message] | None, edge: EdgeTurn | None = None,
                extends: Sequence[Message] | None = None) -> PrefixBreak:
        """Compare this turn (``sent``: what the upstream received, ``client``: what the
        client sent) with the previous one of session ``key``, and remember it. ``edge``:
        which body the client's messages are, as the edge read them; ``extends``: a list
        whose items (the very objects) begin ``sent``."""
        upstream = client if sent is None else sent
        previous = self._turns.pop(key, None)
        self._kept.pop(key)
        if previous is not None and previous.head.same(head):
            # An agent's next turn read over the previous one shares its fields' objects.
            tools, system, system_tokens = previous.tools, previous.system, previous.system_tokens
        else:
            schemas = serialized_schemas(*head.tools)
            if b'"cache_control"' in schemas:  # a breakpoint on a tool is no part of it
                schemas = orjson.dumps(_as_prompt([t for t in head.tools if t]), default=str)
            tools = blake2b(schemas, digest_size=8).digest()
            system, system_size = _digest(head.system)
            system_tokens = -(-system_size // CHARS_PER_TOKEN)
        turn = self._turns[key] = _Turn(head, tools, system, system_tokens, upstream,
                                        None if upstream is client else client,
                                        previous.turns + 1 if previous is not None else 1)
        if sent is None and edge is not None:
            turn.token = edge.turn
        oldest_key = self._kept.put(key, key, again=turn.turns > 1)
        oldest = self._turns.get(oldest_key) if oldest_key is not None else None
        if oldest is not None and oldest.turns > 1:
            oldest.let_go()
        elif oldest_key is not None:  # seen once: a one-off request is not worth its hashes
            self._turns.pop(oldest_key, None)
        while len(self._turns) > self._sessions:
            self._kept.pop(self._turns.popitem(last=False)[0])
        if previous is None:
            return PrefixBreak("first")
        if previous.tools != tools:  # everything after the tools (the tools are new anyway)
            return PrefixBreak("tools", lost_tokens=_all_tokens(previous))
        if previous.system != system:
            return PrefixBreak("system", lost_tokens=_all_tokens(previous))
        if previous.sent is not None:
            if ((sent is None and previous.client is None and edge is not None
                 and edge.reused_after(previous.token) == len(previous.sent))
                    or (sent is not None and previous.sent is extends)):
                # Read over the previous turn's very body, or laid out over its sent list:
                # its messages, then new ones.
                return PrefixBreak("unchanged" if len(upstream) == len(previous.sent)
                                   else "appended")
            return _compare_kept(previous, upstream, client)
        hashed = previous.sent_hashes
        if (sent is None and previous.client_hashes is None and edge is not None
                and hashed is not None and edge.reused_after(previous.token) == len(hashed)):
            # Read over the previous turn's body, whose messages were let go: the same
            # verdict without hashing this turn's (which may not even be parsed).
            return PrefixBreak("unchanged" if len(upstream) == len(hashed) else "appended")
        return _compare_hashed(previous, upstream, client)


def _all_tokens(turn: _Turn) -> int:
    """The previous prompt's messages and system fields, in tokens (estimate)."""
    if turn.sent is not None:
        return _tokens(turn.sent) + turn.system_tokens
    return (turn.cumulative[-1] if turn.cumulative else 0) + turn.system_tokens


def _compare_kept(previous: _Turn, upstream: Sequence[Message],
                  client: Sequence[Message]) -> PrefixBreak:
    """The break between the kept previous messages and this turn's."""
    old = previous.sent
    assert old is not None
    index = _prompt_prefix(old, upstream, common_prefix(old, upstream))
    if index == len(old):
        return PrefixBreak("unchanged" if len(upstream) == len(old) else "appended")
    old_client = previous.client if previous.client is not None else old
    client_index = _prompt_prefix(old_client, client, common_prefix(old_client, client))
    extends = client_index == len(old_client)
    lost = _after(old, index, upstream)
    return _break(index, _tokens(lost), lost[0],
                  upstream[index] if index < len(upstream) else None,
                  extends or client_index > index)


def _after(old: Sequence[Message], index: int, new: Sequence[Message]) -> Sequence[Message]:
    """``old[index:]``: when ``new`` is ``old`` cut after its first ``index`` messages and
    both are unparsed (an agent that starts over from an earlier turn), parsed from the
    bytes after the cut alone."""
    if (index == len(new) and isinstance(old, LazyMessages) and isinstance(new, LazyMessages)
            and (rest := old.after_cut(new)) is not None):
        return rest
    return old[index:]


def _compare_hashed(previous: _Turn, upstream: Sequence[Message],
                    client: Sequence[Message]) -> PrefixBreak:
    """The break between the previous turn's hashes and this turn's messages."""
    old, cumulative = previous.sent_hashes or [], previous.cumulative or [0]
    hashes = _hashes(upstream)[0]
    index = _first_difference(old, hashes)
    if index is None:
        return PrefixBreak("unchanged" if len(hashes) == len(old) else "appended")
    old_client = previous.client_hashes if previous.client_hashes is not None else old
    new_client = _hashes(client)[0] if client is not upstream else hashes
    client_index = _first_difference(old_client, new_client)
    return _break(index, cumulative[-1] - cumulative[index], None,
                  upstream[index] if index < len(upstream) else None,
                  client_index is None or client_index > index)


def _break(index: int, lost: int, old: Message | None, new: Message | None,
           gateway_only: bool) -> PrefixBreak:
    """The break at message ``index``: the gateway's when the client's messages kept their
    prefix there, else the client's (``system`` for a system message)."""
    before = None if old is None else _shown(old.get("content"))
    after = None if new is None else _shown(new.get("content"))
    what = _field(old, new) if old is not None and new is not None else None
    if gateway_only:
        return PrefixBreak("gateway", index, what, lost, before, after)
    role = new.get("role") if new is not None else None
    cause = "system" if role in SYSTEM_ROLES else "message"
    return PrefixBreak(cause, index, what, lost, before, after)
