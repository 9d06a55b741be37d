"""The cheap reductions and the window-trimming safety net as the compaction service
applies them (SPEC §5).

Before anything is summarized or dropped, superseded and old long tool results are
replaced by short notes (``reduce``); when that is enough it is stored as a ``reduced``
compaction (``x-gateway-compaction: reduced; ...``).

When no summary can be made (the summarizer failed, its circuit is open, or the summary
would not fit), the oldest messages are dropped instead (``trim.trim_to_fit``), archived
like any compaction and stored as a ``trimmed`` compaction record, so later turns of the
session reuse it. Reported as ``x-gateway-compaction: trimmed; ...`` with the summary's
failure in ``x-gateway-compaction-summary-failed`` (the driver renders both).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any
from urllib.parse import quote

from gateway.compaction.inputs import Request
from gateway.compaction.outcome import PreparedHistory
from gateway.compaction.reduce import reduce_history
from gateway.compaction.session_view import SessionView
from gateway.compaction.shape import ARCHIVE_ENDPOINT
from gateway.compaction.stores import Stores
from gateway.compaction.tokens import token_counter
from gateway.compaction.trim import Trimmed, trim_to_fit
from gateway.compaction.window import Budgets
from gateway.projection import project
from gateway.projection.anomalies import Message
from gateway.sessions import KIND_REDUCED, KIND_TRIMMED, CompactionRecord
from gateway.sessions.errors import store_errors

log = logging.getLogger("gateway.compaction")

# The reductions alone count as a compaction when they leave this share of the trim target
# at most (room for a few more turns before the next compaction).
REDUCED_ENOUGH = 0.8
# A tool result is long enough to fold from this many tokens (or a 16th of the window).
FOLD_MIN = 2_000


def prepared(record: CompactionRecord) -> PreparedHistory:
    """A stored compaction as the history to send (all of it as stored)."""
    return PreparedHistory(list(record.replacement), len(record.replacement))


def projected(history: list[Message], frozen: int) -> list[Message]:
    """The history made wire-valid for sending as stored; its first ``frozen`` messages (a
    stored compaction, valid by construction) are left as they are."""
    return history[:frozen] + project(history[frozen:]).messages


async def store_replacement(
    stores: Stores, session: SessionView, built: Callable[[int, int], Any | None], kind: str,
) -> tuple[Any, CompactionRecord] | None:
    """Archive the session's messages since its last compaction and store the compaction
    ``built(first, last)`` makes (``messages``, ``tokens_before``, ``tokens_after``; None:
    nothing to store) for the archive lines ``first..last``. While the store is down it is
    kept in memory (``session.unstored``). What was built and its record."""
    archived_upto = session.applied.prefix_len if session.applied else 0
    todo = session.original[archived_upto:]
    try:
        count_now: int | None = await stores.archive.line_count(session.key)
    except store_errors():
        count_now = None
    guess = (1, 0) if count_now is None else (count_now + 1, count_now + len(todo))
    first_built = await asyncio.to_thread(built, *guess)
    if first_built is None or first_built.tokens_after >= first_built.tokens_before:
        return None
    n = len(session.original)

    async def record_for(first: int, last: int) -> CompactionRecord:
        made: Any = first_built if (first, last) == guess else built(first, last)
        return CompactionRecord.create(
            session_id=session.key, prefix_len=n, prefix_hash=session.chain_at(n),
            replacement=made.messages, tokens_before=made.tokens_before,
            tokens_after=made.tokens_after, archive_from=first, archive_to=last, kind=kind,
        )

    if count_now is not None:
        try:
            if session.owner is not None:
                await stores.store.claim_owner(session.key, session.owner)
            record = await stores.writes.write_together(session.key, todo, record_for,
                                                        stores.store.put_compaction)
        except store_errors():
            pass
        else:
            assert record is not None
            stores.index.note(session.key, has_records=True)
            return first_built, record
    made = first_built if guess == (1, 0) else await asyncio.to_thread(built, 1, 0)
    made = first_built if made is None else made
    record = CompactionRecord.create(
        session_id=session.key, prefix_len=n, prefix_hash=session.chain_at(n),
        replacement=made.messages, tokens_before=made.tokens_before,
        tokens_after=made.tokens_after, archive_from=1, archive_to=0, kind=kind)
    kept = stores.keep_unstored(session, record, todo)
    assert kept is not None
    return made, kept


async def trim_and_store(
    stores: Stores, req: Request, session: SessionView, history: list[Message], frozen: int,
    budgets: Budgets,
) -> tuple[Trimmed, PreparedHistory] | None:
    """Trim ``history`` to the window, archive and store it: what was trimmed and the
    history to send; None when trimming cannot reduce it (the caller reports the failed
    compaction)."""
    count = token_counter(req.route.upstream_model)
    # The trimmed history is sent as stored: it is built from the projected history so it
    # is wire-valid (a stored compaction at its head is valid already).
    source = projected(history, frozen)
    path = ARCHIVE_ENDPOINT.format(session_id=quote(session.session_id, safe=""))

    def trimmed_for(first: int, last: int) -> Trimmed | None:
        where = (f"They are kept read-only in the session archive: GET "
                 f"{path}?from={first}&to={last}" if last >= first else
                 "They are kept in the session archive.")
        return trim_to_fit(source, budgets.trim_target, count, where=where)

    stored = await store_replacement(stores, session, trimmed_for, KIND_TRIMMED)
    if stored is None:
        return None
    trimmed, record = stored
    log.warning("session %s trimmed to fit the window of %s (%s): %d messages omitted%s",
                session.session_id, req.route.name, session.failure or "no summary",
                len(trimmed.omitted), " (unstored)" if session.unstored else "")
    return trimmed, prepared(record)


async def reduce_and_store(
    stores: Stores, req: Request, session: SessionView, history: list[Message], frozen: int,
    budgets: Budgets, where: str,
) -> tuple[list[Message], PreparedHistory | None]:
    """The cheap reductions (``reduce``): superseded tool results replaced by a note, then,
    if that is not enough, old long ones folded to cards. When they bring the history well
    below the trim target it is archived and stored as a ``reduced`` compaction: the history
    to send. Else (None) the reduced messages are what the summary or the trimming starts
    from."""
    count = token_counter(req.route.upstream_model)
    reduced = await asyncio.to_thread(
        reduce_history, history, count, int(budgets.trim_target * REDUCED_ENOUGH),
        recent_tokens=budgets.trim_target // 2, min_tokens=max(FOLD_MIN, budgets.window // 16),
        where=lambda index: where)
    if not reduced.changed:
        return history, None

    def built(first: int, last: int) -> Trimmed | None:
        messages = projected(reduced.messages, frozen)
        after = count(messages)
        if after > budgets.trim_target * REDUCED_ENOUGH:
            return None
        return Trimmed(messages, [], count(history), after)

    stored = await store_replacement(stores, session, built, KIND_REDUCED)
    if stored is None:
        return reduced.messages, None
    log.info("session %s reduced: %d superseded and %d folded tool results%s",
             session.session_id, reduced.superseded, reduced.folded,
             " (unstored)" if session.unstored else "")
    return reduced.messages, prepared(stored[1])
