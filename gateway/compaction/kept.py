"""Which real user messages survive compaction: the HEAD / TAIL budget (SPEC §4.2).

When the real user messages total more than ``limit`` (20,000) tokens, the first ``head``
(2,000) tokens and the last ``tail`` (18,000) are kept, with an elision note between.

Straddling messages (decided): a message that crosses a budget boundary is *truncated*,
not kept or dropped whole. The HEAD exists to keep the original task, which is often one
long first message (a pasted spec or log): dropping it whole would lose the task, keeping it
whole would blow the budget. So the HEAD keeps the beginning of that message, ending with
``TRUNCATION_MARK``; the TAIL keeps the end of its straddling message, starting with the
mark. One huge message can so appear twice, as its beginning and its end, with the elision
note between. Cuts fall on whitespace when there is some near the cut; a remaining budget
under ``MIN_PIECE_TOKENS`` is left unused rather than filled with a scrap. Text content is
truncated; in a list content the parts before the cut are kept whole, the text part at the
cut is truncated and non-text parts beyond it are dropped. The newest user message, when it
is the one the TAIL cuts (a log pasted under a question), keeps its start as well as its
end (a quarter of what is left for it, then the end), one mark between: its ask usually
opens it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from gateway.compaction.shape import KeptUsers
from gateway.compaction.user_input import real_user_messages
from gateway.projection.anomalies import Message

CountTokens = Callable[[Sequence[Message]], int]

HEAD_TOKENS = 2_000
TAIL_TOKENS = 18_000
LIMIT_TOKENS = 20_000
MIN_PIECE_TOKENS = 32
TRUNCATION_MARK = "[…]"
_WORD_BACKOFF = 200  # characters searched for whitespace to cut on


def select_kept_user_messages(
    messages: Sequence[Message],
    count_tokens: CountTokens,
    head: int = HEAD_TOKENS,
    tail: int = TAIL_TOKENS,
    limit: int = LIMIT_TOKENS,
) -> KeptUsers:
    """The real user messages of ``messages`` to keep, within the HEAD / TAIL budget.

    ``count_tokens`` counts a list of messages. Everything is kept when the real user
    messages total ``limit`` tokens or less.
    """
    users = real_user_messages(messages)
    sizes = [count_tokens([m]) for m in users]
    total = sum(sizes)
    if total <= limit:
        return KeptUsers(head=tuple(users))

    head_msgs: list[Message] = []
    used = 0
    split: tuple[int, Message] | None = None  # index of a message HEAD took only partly
    index = 0
    while index < len(users):
        if used + sizes[index] <= head:
            head_msgs.append(users[index])
            used += sizes[index]
            index += 1
            continue
        piece = _truncate(users[index], head - used, count_tokens, keep_start=True)
        if piece is not None:
            head_msgs.append(piece)
            used += count_tokens([piece])
            split = (index, piece)
        break
    head_used = used
    truncated = split is not None
    first_free = index  # messages before this index are wholly in HEAD

    tail_msgs: list[Message] = []
    used = 0
    for back in range(len(users) - 1, first_free - 1, -1):
        if used + sizes[back] <= tail and (split is None or back != split[0]):
            tail_msgs.append(users[back])
            used += sizes[back]
            continue
        piece = None
        if back == len(users) - 1:  # the newest message: its ask often opens a paste
            piece = _start_and_end(users[back], tail - used, count_tokens)
        if piece is None:
            piece = _truncate(users[back], tail - used, count_tokens, keep_start=False)
        if piece is not None:
            tail_msgs.append(piece)
            used += count_tokens([piece])
            truncated = True
        break
    tail_msgs.reverse()
    elided = total - head_used - used
    elided = max(1, elided) if truncated else max(0, elided)
    return KeptUsers(head=tuple(head_msgs), tail=tuple(tail_msgs), elided_tokens=elided)


def _truncate(
    message: Message, budget: int, count_tokens: CountTokens, *, keep_start: bool
) -> Message | None:
    """The start (or end) of ``message`` fitting ``budget`` tokens, or None."""
    if budget < MIN_PIECE_TOKENS:
        return None
    content = message.get("content")
    if isinstance(content, str):
        text = _fit_text(
            content,
            lambda t: {**message, "content": t},
            budget,
            count_tokens,
            keep_start=keep_start,
        )
        return None if text is None else {**message, "content": text}
    if isinstance(content, list):
        parts = _fit_parts(message, content, budget, count_tokens, keep_start=keep_start)
        return None if parts is None else {**message, "content": parts}
    return None


def _start_and_end(message: Message, budget: int, count_tokens: CountTokens) -> Message | None:
    """The newest message cut in the middle: its start (a quarter of ``budget``) and its
    end, one mark between, for a message with text (a string or parts); else None."""
    content = message.get("content")
    if isinstance(content, list) and len(content) > 1:
        return _start_and_end_parts(message, content, budget, count_tokens)
    if isinstance(content, list):
        if len(content) != 1 or not isinstance(content[0], dict) or \
                content[0].get("type") != "text" or not isinstance(content[0].get("text"), str):
            return None
        text: str = content[0]["text"]

        def wrap(t: str) -> Message:
            return {**message, "content": [{**content[0], "text": t}]}
    elif isinstance(content, str):
        text = content

        def wrap(t: str) -> Message:
            return {**message, "content": t}
    else:
        return None
    share = budget // 4
    if share < MIN_PIECE_TOKENS or budget - share < MIN_PIECE_TOKENS:
        return None
    start = _fit_text(text, wrap, share, count_tokens, keep_start=True)
    if start is None:
        return None
    rest = budget - count_tokens([wrap(start)])
    end = _fit_text(text, lambda t: wrap(f"{start}\n{t}"), budget, count_tokens,
                    keep_start=False) if rest >= MIN_PIECE_TOKENS else None
    if end is None:
        return None
    head = start.removesuffix(TRUNCATION_MARK).rstrip()
    tail = end.removeprefix(TRUNCATION_MARK).lstrip()
    if len(head) + len(tail) >= len(text):
        return None  # the two pieces overlap: the message was not that long
    return wrap(f"{head}\n{TRUNCATION_MARK}\n{tail}")


def _start_and_end_parts(
    message: Message, content: list[Any], budget: int, count_tokens: CountTokens,
) -> Message | None:
    """:func:`_start_and_end` for a message of several parts (an ask in one text part, a
    paste in the next): the parts that fit a quarter of ``budget`` from the start, then the
    parts that fit the rest from the end; None when the two would meet."""
    share = budget // 4
    if share < MIN_PIECE_TOKENS or budget - share < MIN_PIECE_TOKENS:
        return None
    start = _fit_parts(message, content, share, count_tokens, keep_start=True) or []
    whole = next((n for n, part in enumerate(start) if part is not content[n]), len(start))
    if whole == 0:
        return None
    start, after = start[:whole], content[whole:]  # the end of a cut part is taken below
    mark = [{"type": "text", "text": TRUNCATION_MARK}]
    rest = budget - count_tokens([{**message, "content": [*start, *mark]}])
    end = _fit_parts(message, after, rest, count_tokens, keep_start=False)
    if end is None or (len(end) >= len(after) and end[0] is after[0]):
        return None  # nothing left out between them: the message was not cut
    if end[0] is not after[0]:
        mark = []  # the end's first part opens with the mark
    kept = {**message, "content": [*start, *mark, *end]}
    return kept if count_tokens([kept]) <= budget else None


def _fit_parts(
    message: Message,
    content: list[Any],
    budget: int,
    count_tokens: CountTokens,
    *,
    keep_start: bool,
) -> list[Any] | None:
    order = content if keep_start else list(reversed(content))
    taken: list[Any] = []

    def as_message(parts: list[Any]) -> Message:
        return {**message, "content": parts if keep_start else list(reversed(parts))}

    for part in order:
        if count_tokens([as_message([*taken, part])]) <= budget:
            taken.append(part)
            continue
        if (
            isinstance(part, dict)
            and part.get("type") == "text"
            and isinstance(part.get("text"), str)
        ):
            text = _fit_text(
                part["text"],
                _part_wrapper(as_message, taken, part),
                budget,
                count_tokens,
                keep_start=keep_start,
            )
            if text is not None:
                taken.append({**part, "text": text})
        break
    has_text = any(isinstance(p, dict) and p.get("type") == "text" for p in taken)
    if not has_text:
        return None
    return taken if keep_start else list(reversed(taken))


def _part_wrapper(
    as_message: Callable[[list[Any]], Message], taken: list[Any], part: dict[str, Any]
) -> Callable[[str], Message]:
    def wrap(text: str) -> Message:
        return as_message([*taken, {**part, "text": text}])

    return wrap


def _fit_text(
    text: str,
    wrap: Callable[[str], Message],
    budget: int,
    count_tokens: CountTokens,
    *,
    keep_start: bool,
) -> str | None:
    """The longest start (or end) of ``text``, with the mark, whose wrapped message fits."""

    def piece(n: int) -> str:
        if keep_start:
            return f"{text[:n].rstrip()}\n{TRUNCATION_MARK}"
        return f"{TRUNCATION_MARK}\n{text[len(text) - n :].lstrip()}"

    def fits(n: int) -> bool:
        return count_tokens([wrap(piece(n))]) <= budget

    if not fits(1):
        return None
    # Grow an upper bound from a 4-chars-per-token guess, then bisect: encodes stay small.
    low, high = 1, min(len(text), max(16, budget * 4))
    while high < len(text) and fits(high):
        low, high = high, min(len(text), high * 2)
    if fits(high):
        low = high
    while high - low > 1:
        mid = (low + high) // 2
        if fits(mid):
            low = mid
        else:
            high = mid
    cut = _word_cut(text, low, keep_start=keep_start)
    return piece(cut)


def _word_cut(text: str, n: int, *, keep_start: bool) -> int:
    """``n`` moved back to a whitespace boundary when one is within reach."""
    if n >= len(text):
        return n
    if keep_start:
        window = text[max(0, n - _WORD_BACKOFF) : n + 1]
        at = max(window.rfind(" "), window.rfind("\n"))
        return n - (len(window) - 1 - at) if at > 0 else n
    start = len(text) - n
    window = text[start - 1 : start + _WORD_BACKOFF]
    found = [i for i in (window.find(" "), window.find("\n")) if i >= 0]
    if not found or min(found) == 0 or min(found) >= n:
        return n
    return n - min(found)
