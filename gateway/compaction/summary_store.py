"""Making one compaction: the summary call (through the breaker), the compacted shape, and
the record and archive lines written together."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from opentelemetry.trace import INVALID_SPAN, Span, Status, StatusCode, Tracer

from gateway.compaction.breaker import SummaryBreaker, breaker_keys
from gateway.compaction.budget import CompactionSettings
from gateway.compaction.inputs import Request, SummaryCaller
from gateway.compaction.pipeline import CompactionResult, compact
from gateway.compaction.route_windows import RouteWindows
from gateway.compaction.session_view import SessionView
from gateway.compaction.shape import ArchiveRef
from gateway.compaction.stores import Stores
from gateway.compaction.summarizer import (
    SummaryCallFailed,
    SummaryOutcome,
    SummaryReply,
    summarize,
)
from gateway.compaction.tokens import token_counter
from gateway.compaction.window import Budgets, asked_output_tokens
from gateway.projection.anomalies import Message
from gateway.providers.failure import UpstreamFailure
from gateway.sessions import KIND_BACKGROUND, CompactionRecord
from gateway.sessions.errors import store_errors

if TYPE_CHECKING:
    from gateway.routing import ModelRoute

log = logging.getLogger("gateway.compaction")


@dataclass(frozen=True, slots=True)
class Summarizing:
    """What summarizing and storing a compaction works with, built once by the compaction
    service: where it is stored, the routes a summarizer is picked from, a route's
    compaction settings and recall tool (None: none), the context windows, the
    summarizer's circuit breaker, the tracer, and ``finish_in_background``, which lets a
    summary that outlived its request finish."""

    stores: Stores
    routes: Mapping[str, ModelRoute]
    settings: Callable[[ModelRoute], CompactionSettings]
    recall_tool: Callable[[Request], str | None]
    windows: RouteWindows
    breaker: SummaryBreaker
    tracer: Tracer
    finish_in_background: Callable[[SessionView, Coroutine[Any, Any, None]], None]


async def summarize_and_store(
    parts: Summarizing, req: Request, session: SessionView, history: list[Message],
    call: SummaryCaller, *, kind: str, until: float | None = None,
) -> CompactionRecord | None:
    """Summarize ``history`` and store the compaction (``kind``: summarized in the request,
    or background, stored as pending); None with ``session.failure`` saying why not. The
    removed messages are archived together with the record. The summary calls end by
    ``until`` (monotonic; a timed out summary is a failed one). While the store is down the
    compaction is kept in memory instead (``session.unstored``): this never raises a store
    error."""
    route = req.route
    settings = parts.settings(route)
    summary_route = parts.routes.get(settings.summarizer_model or "", route)
    count = token_counter(route.upstream_model)
    budgets = await parts.windows.budgets(route, req.body, settings)
    if summary_route is not route:  # the summary request fits the summarizer's own window
        own = await parts.windows.budgets(summary_route, {}, settings)
        budgets = replace(budgets, summary_max_tokens=min(budgets.summary_max_tokens,
                                                          own.summary_max_tokens),
                          summary_input=min(budgets.summary_input, own.summary_input))
    keys = breaker_keys(session.key, summary_route.name)
    if not parts.breaker.allows(keys):
        session.failure = ("summarizer skipped: it failed repeatedly for this session or "
                           "model (circuit open)")
        return None
    with parts.tracer.start_as_current_span("gateway.compaction") as span:
        span.set_attributes({"gateway.session": session.session_id,
                             "gateway.compaction.kind": kind,
                             "gateway.compaction.summarizer": summary_route.name,
                             "gateway.compaction.messages": len(history),
                             "gateway.compaction.window": budgets.window})

        async def send(body: dict[str, object]) -> SummaryReply:
            if not parts.breaker.allows(keys):
                raise SummaryCallFailed("circuit_open", UpstreamFailure(
                    status=503, provider=summary_route.provider_name,
                    message="the summarizer failed repeatedly: skipped for a cooldown"))
            try:
                reply = await call(summary_route, body)
            except SummaryCallFailed as failed:
                if failed.verdict == "overflow":  # the summarizer's window, as it states it
                    messages = body.get("messages")
                    refused = (count(messages) if isinstance(messages, list) else 0
                               ) + asked_output_tokens(body)
                    await parts.windows.learn(summary_route, failed.failure, refused)
                if failed.verdict not in ("overflow", "too_large"):  # shrinking handles
                    parts.breaker.failed(keys)
                    if not parts.breaker.allows(keys):  # just opened: stop now
                        raise SummaryCallFailed("circuit_open", failed.failure) from None
                raise
            if reply.text.strip() and reply.finish_reason != "length":
                parts.breaker.succeeded(keys)
            else:
                parts.breaker.failed(keys)
            return reply

        started = time.monotonic()
        left = None if until is None else max(0.0, until - started)
        summary = asyncio.ensure_future(summarize(
            history, send, model=summary_route.upstream_model, count_tokens=count,
            settings=settings, max_tokens=budgets.summary_max_tokens,
            input_budget=budgets.summary_input))
        try:
            outcome = await asyncio.wait_for(asyncio.shield(summary), left)
        except TimeoutError:
            parts.breaker.failed(keys)  # a summarizer this slow is skipped after a few
            session.failure = (f"summary call: no summary within its share "
                               f"({settings.summary_time_share:.0%}) of the time left, "
                               f"{time.monotonic() - started:.1f}s")
            log.warning("compaction of session %s: %s", session.session_id, session.failure)
            span.set_attribute("gateway.compaction.failed", session.failure)
            span.set_status(Status(StatusCode.ERROR, "summary timed out"))
            if kind == KIND_BACKGROUND:
                summary.cancel()
            else:  # this turn is answered without it; the next one may use it
                parts.finish_in_background(session, _later(
                    parts, req, session, history, summary, budgets))
            return None
        except BaseException:
            summary.cancel()
            raise
        span.set_attribute("gateway.compaction.attempts", len(outcome.attempts))
        if not outcome.ok:
            session.failure = f"summary call: {outcome.reason}"
            log.warning("compaction of session %s failed: %s", session.session_id,
                        outcome.reason)
            span.set_attribute("gateway.compaction.failed", session.failure)
            span.set_status(Status(StatusCode.ERROR, outcome.reason or "failed"))
            return None
        return await store_summary(parts, req, session, history, outcome.text, budgets,
                                   kind=kind, span=span)


async def _later(
    parts: Summarizing, req: Request, session: SessionView, history: list[Message],
    summary: asyncio.Future[SummaryOutcome], budgets: Budgets,
) -> None:
    """A summary that came after its request was answered (trimmed): parked as a background
    result of the same history, for the session's next turn (the compaction service's
    reuse)."""
    outcome = await summary
    if outcome.ok:
        session.unstored = False
        await store_summary(parts, req, session, history, outcome.text, budgets,
                            kind=KIND_BACKGROUND, span=INVALID_SPAN)


async def store_summary(
    parts: Summarizing, req: Request, session: SessionView, history: list[Message],
    text: str, budgets: Budgets, *, kind: str, span: Span,
) -> CompactionRecord | None:
    """The compaction of ``history`` around the summary ``text``, archived and stored (or kept
    in memory while the store is down); None with ``session.failure`` when it would not
    reduce the history or not fit the window."""
    route = req.route
    stores = parts.stores
    count = token_counter(route.upstream_model)
    archived_upto = session.applied.prefix_len if session.applied else 0
    todo = session.original[archived_upto:]
    try:
        if session.owner is not None:
            await stores.store.claim_owner(session.key, session.owner)
        earlier = await stores.writes.earlier_ranges(session.key, session.full_chain(),
                                                     session.applied)
        # Checked before anything is written: no archive lines without a record.
        count_now: int | None = await stores.archive.line_count(session.key)
    except store_errors():
        earlier, count_now = (), None
    kept_budget = (budgets.kept_head, budgets.kept_tail, budgets.kept_limit)

    async def build(first: int, last: int) -> CompactionResult:
        ref = (ArchiveRef(session.session_id, first, last, earlier=earlier,
                          recall_tool=parts.recall_tool(req))
               if last >= first else None)
        return await asyncio.to_thread(compact, history, text,
                                       count_tokens=count, archive_ref=ref,
                                       kept_budget=kept_budget)

    # Unstored (the store is down): no archive lines to name yet.
    guess = (1, 0) if count_now is None else (count_now + 1, count_now + len(todo))
    result = await build(*guess)
    span.set_attributes({"gateway.compaction.tokens_before": result.tokens_before,
                         "gateway.compaction.tokens_after": result.tokens_after})
    if result.tokens_after >= result.tokens_before:
        session.failure = (f"no reduction: the compacted history has "
                           f"{result.tokens_after} tokens, the history "
                           f"{result.tokens_before}")
        span.set_attribute("gateway.compaction.failed", session.failure)
        return None
    if result.tokens_after > budgets.fit_limit:
        session.failure = (f"the compacted history ({result.tokens_after} tokens) "
                           f"does not fit the window of {budgets.window}")
        span.set_attribute("gateway.compaction.failed", session.failure)
        return None
    n = len(session.original)

    async def record_for(first: int, last: int) -> CompactionRecord:
        built = result if (first, last) == guess else await build(first, last)
        return CompactionRecord.create(
            session_id=session.key, prefix_len=n, prefix_hash=session.chain_at(n),
            replacement=built.messages, tokens_before=built.tokens_before,
            tokens_after=built.tokens_after, archive_from=first, archive_to=last,
            kind=kind,
        )

    async def put(record: CompactionRecord) -> None:
        if kind == KIND_BACKGROUND:
            await stores.store.put_pending(session.key, record)
        else:
            await stores.store.put_compaction(record)

    if count_now is not None:
        try:
            record = await stores.writes.write_together(session.key, todo, record_for,
                                                        put)
        except store_errors():
            pass
        else:
            stores.index.note(session.key, has_records=True)
            return record
    return stores.keep_unstored(session, await record_for(1, 0), todo)
