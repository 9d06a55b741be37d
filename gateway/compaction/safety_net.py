"""The window-trimming safety net as the compaction service applies it (SPEC §5).

When no summary can be made (the summarizer failed, its circuit is open, or the summary
would not fit), the oldest messages are dropped instead (``trim.trim_to_fit``), archived
like any compaction and stored as a ``trimmed`` compaction record, so later turns of the
session reuse it. Reported as ``x-gateway-compaction: trimmed; ...`` with the summary's
failure in ``x-gateway-compaction-summary-failed`` (the driver renders both).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Protocol
from urllib.parse import quote

from gateway.compaction.outcome import PreparedHistory
from gateway.compaction.recovery_io import SessionWrites
from gateway.compaction.session_index import SessionIndex
from gateway.compaction.session_view import SessionView
from gateway.compaction.shape import ARCHIVE_ENDPOINT
from gateway.compaction.tokens import token_counter
from gateway.compaction.trim import Trimmed, trim_to_fit
from gateway.compaction.window import Budgets
from gateway.projection import project
from gateway.projection.anomalies import Message
from gateway.sessions import KIND_TRIMMED, Archive, CompactionRecord, SessionStore
from gateway.sessions.errors import store_errors

log = logging.getLogger("gateway.compaction")


class Stores(Protocol):
    """What the safety net needs of the compaction service."""

    store: SessionStore
    archive: Archive
    writes: SessionWrites
    index: SessionIndex


def prepared(record: CompactionRecord) -> PreparedHistory:
    """A stored compaction as the history to send (all of it as stored)."""
    return PreparedHistory(list(record.replacement), len(record.replacement))


def projected(history: list[Message], frozen: int) -> list[Message]:
    """The history made wire-valid for sending as stored; its first ``frozen`` messages (a
    stored compaction, valid by construction) are left as they are."""
    return history[:frozen] + project(history[frozen:]).messages


async def trim_and_store(
    service: Stores, req: Any, session: SessionView, history: list[Message], frozen: int,
    budgets: Budgets,
) -> tuple[Trimmed, PreparedHistory] | None:
    """Trim ``history`` to the window, archive and store it: what was trimmed and the
    history to send; None when trimming cannot reduce it (the caller reports the failed
    compaction). ``req`` is the chat request (its ``route``)."""
    count = token_counter(req.route.upstream_model)
    # The trimmed history is sent as stored: it is built from the projected history so it
    # is wire-valid (a stored compaction at its head is valid already).
    source = projected(history, frozen)
    archived_upto = session.applied.prefix_len if session.applied else 0
    todo = session.original[archived_upto:]
    count_now = await service.archive.line_count(session.key)
    path = ARCHIVE_ENDPOINT.format(session_id=quote(session.session_id, safe=""))

    def trimmed_for(first: int, last: int) -> Trimmed | None:
        where = (f"They are kept read-only in the session archive: GET "
                 f"{path}?from={first}&to={last}" if last >= first else "")
        return trim_to_fit(source, budgets.trim_target, count, where=where)

    guess = (count_now + 1, count_now + len(todo))
    trimmed = await asyncio.to_thread(trimmed_for, *guess)
    if trimmed is None or trimmed.tokens_after >= trimmed.tokens_before:
        return None
    n = len(session.original)

    async def record_for(first: int, last: int) -> CompactionRecord:
        built: Any = trimmed if (first, last) == guess else trimmed_for(first, last)
        return CompactionRecord.create(
            session_id=session.key, prefix_len=n, prefix_hash=session.chain_at(n),
            replacement=built.messages, tokens_before=built.tokens_before,
            tokens_after=built.tokens_after, archive_from=first, archive_to=last,
            kind=KIND_TRIMMED,
        )

    try:
        if session.owner is not None:
            await service.store.claim_owner(session.key, session.owner)
        record = await service.writes.write_together(session.key, todo, record_for,
                                                     service.store.put_compaction)
    except store_errors():
        log.exception("session store unavailable: trimming session %s without storing",
                      session.session_id)
        return trimmed, PreparedHistory(trimmed.messages, len(trimmed.messages))
    assert record is not None
    service.index.note(session.key, has_records=True)
    log.warning("session %s trimmed to fit the window of %s (%s): %d messages omitted",
                session.session_id, req.route.name, session.failure or "no summary",
                len(trimmed.omitted))
    return trimmed, prepared(record)
