"""The compaction service: reuse stored compactions, compact before or after an overflow,
compact in the background, archive what was removed.

The driver (``gateway.flow.driver``) calls :meth:`CompactionService.prepare` before the first
attempt and :meth:`CompactionService.on_overflow` as the ladder's ``compact`` step; both return
values (:mod:`gateway.compaction.outcome`) and never raise for a compaction that failed. The
summary calls go through the ``SummaryCaller`` the driver passes in (so they are traced and
counted like any upstream call), and every wait here is bounded by the request's deadline.

Compactions are stored against prefixes of the history *as the client sends it* (clients
never see the compacted form and keep resending their full history), so a later request that
begins with a stored prefix is served as the stored replacement plus its new messages: no
summary call, and the same bytes as before so the provider's prompt cache still hits.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Coroutine, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from opentelemetry.trace import Tracer

from gateway.backoff import backoff_delay
from gateway.compaction.breaker import SummaryBreaker
from gateway.compaction.budget import CompactionSettings, budget_level, decide, usage_ratio
from gateway.compaction.inputs import Request, SummaryCaller
from gateway.compaction.outage import (
    GuardedArchive,
    GuardedStore,
    MemoryCompactions,
    StoreOutage,
    Unstored,
    store_deadline,
)
from gateway.compaction.outcome import (
    Compacted,
    CompactionOutcome,
    Prepared,
    PreparedHistory,
    outcome_of,
)
from gateway.compaction.recall_scope import RecallScope, recall_settings
from gateway.compaction.recovery_io import SessionWrites
from gateway.compaction.reuse import Reused, StoredCompactions
from gateway.compaction.route_windows import RouteWindows
from gateway.compaction.safety_net import reduce_and_store, trim_and_store
from gateway.compaction.session_index import SessionIndex
from gateway.compaction.session_view import (
    SessionView,
    head_is,
    media_parts,
    settings_for,
    store_key,
)
from gateway.compaction.shape import ARCHIVE_ENDPOINT
from gateway.compaction.stores import Stores
from gateway.compaction.summary_store import Summarizing, summarize_and_store
from gateway.compaction.tokens import count_tools_tokens, token_counter
from gateway.compaction.trim import Trimmed
from gateway.compaction.window import Budgets, WindowBook, asked_output_tokens
from gateway.compaction.window_share import FileWindows, RedisWindows, SharedWindows
from gateway.config import GatewayConfig
from gateway.projection.anomalies import Message
from gateway.projection.condense import ToolOutputCondenser
from gateway.providers.failure import UpstreamFailure
from gateway.sessions import (
    KIND_BACKGROUND,
    KIND_SUMMARIZED,
    Archive,
    CompactionRecord,
    SessionStore,
    hash_client_key,
    open_store,
    session_fingerprint,
)
from gateway.sessions.errors import StoreUnavailable, store_errors
from gateway.telemetry.metrics import Metrics

if TYPE_CHECKING:
    from gateway.routing import ModelRoute

log = logging.getLogger("gateway.compaction")

# A compaction lock is a lease renewed every LEASE / 3 seconds while its holder works: a
# holder that died on another host (a killed replica) frees it within LEASE, so a session
# stalls for seconds, not minutes; one of this host at once.
LEASE = 6.0
# Waiting for another request's compaction: look again after a backoff from POLL_BASE up
# to POLL_CAP seconds (gateway.backoff), until the result lands or the deadline passes.
POLL_BASE = 0.05
POLL_CAP = 1.0
# Counting takes about 0.25 ms per KiB: bigger requests are counted off the event loop;
# hashing is ~50 times cheaper and leaves it only for very big requests (bytes).
_COUNT_INLINE = 16 * 1024
_HASH_INLINE = 1024 * 1024
# Upper bound of the tokens of one media part (an image at high detail is at most 1,445),
# for the cheap check that skips exact counting: text never has more tokens than bytes.
_PART_TOKENS = 1600
_MAX_RECALL_RECORDS = 32  # stored compactions of one history a recall looks up at most


@dataclass(slots=True)
class CompactionService:
    """Owns the session store and archive; the driver calls ``prepare``/``on_overflow``.

    ``background_call`` sends the summary calls of background compactions (no request
    waits for them); ``metrics`` times those (a request's compactions are timed in its
    :class:`CompactionOutcome` and rendered with the request).
    """

    config: GatewayConfig
    routes: dict[str, ModelRoute]
    tracer: Tracer
    background_call: SummaryCaller
    store: SessionStore
    archive: Archive
    running: set[asyncio.Task[None]] = field(default_factory=set)
    late: dict[str, asyncio.Task[None]] = field(default_factory=dict)  # by session key
    index: SessionIndex = field(default_factory=SessionIndex)
    settings_by_model: dict[str, CompactionSettings] = field(default_factory=dict)
    metrics: Metrics | None = None
    breaker: SummaryBreaker = field(default_factory=SummaryBreaker)
    shared_windows: SharedWindows | None = None
    outage: StoreOutage = field(default_factory=StoreOutage)
    unstored: MemoryCompactions = field(default_factory=MemoryCompactions)
    # The driver's: what it condenses before sending is counted condensed (see _tokens).
    condenser: ToolOutputCondenser | None = None
    writes: SessionWrites = field(init=False)
    windows: RouteWindows = field(init=False)
    stores: Stores = field(init=False, repr=False, compare=False)
    summarizing: Summarizing = field(init=False, repr=False, compare=False)
    stored: StoredCompactions = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        # Every store call goes through the outage tracker: one warning per outage, calls
        # that fail at once while the store is down, a catch-up when it returns.
        self.store = GuardedStore(self.store, self.outage)
        self.archive = GuardedArchive(self.archive, self.outage)
        self.outage.on_recovered = self._catch_up_soon
        self.writes = SessionWrites(self.store, self.archive)
        if self.shared_windows is not None:
            self.shared_windows.on_error = self.outage.failed
        self.windows = RouteWindows(WindowBook(), self.shared_windows)
        # What making a compaction works with: named here, not the whole service.
        self.stores = Stores(self.store, self.archive, self.writes, self.index,
                             self.keep_unstored)
        self.summarizing = Summarizing(
            self.stores, self.routes, self.route_settings, self.recall_tool_name,
            self.windows, self.breaker, self.tracer, self.finish_in_background)
        self.stored = StoredCompactions(self.stores, self.unstored)

    def route_settings(self, route: ModelRoute) -> CompactionSettings:
        """The model's compaction settings, resolved from the config once."""
        settings = self.settings_by_model.get(route.name)
        if settings is None:
            settings = self.settings_by_model[route.name] = settings_for(self.config, route)
        return settings

    @classmethod
    def open(
        cls, config: GatewayConfig, routes: dict[str, ModelRoute], tracer: Tracer,
        background_call: SummaryCaller, metrics: Metrics | None = None,
    ) -> CompactionService:
        """Open the configured store (SQLite under data_dir, or Redis; connected lazily)."""
        store, archive = open_store(config.sessions.data_dir, config.sessions.redis_url)
        url = config.sessions.redis_url
        shared = RedisWindows(url) if url else FileWindows(config.sessions.data_dir)
        return cls(config, routes, tracer, background_call, store, archive, metrics=metrics,
                   shared_windows=shared)

    async def close(self) -> None:
        """Stop background work and close the stores."""
        for task in list(self.running):
            task.cancel()
        await asyncio.gather(*self.running, return_exceptions=True)
        await self.store.close()
        await self.archive.close()
        await self.windows.close()

    async def window(self, route: ModelRoute) -> int:
        """The context window to plan with (configured, else learned)."""
        return await self.windows.window(route)

    async def learn_window(self, route: ModelRoute, failure: UpstreamFailure,
                           deadline: float) -> None:
        """Learn the window an overflow refusal states as soon as it arrives (before the
        ladder picks its next step: a context-window fallback compares windows), waiting
        for the session store at most until ``deadline`` (monotonic)."""
        with store_deadline(deadline):
            await self.windows.learn(route, failure)

    async def budgets(self, req: Request) -> Budgets:
        """Every compaction budget of the request's model (its window's share of them)."""
        return await self.windows.budgets(req.route, req.body, self.route_settings(req.route))

    async def _trim(
        self, req: Request, session: SessionView, history: list[Message], frozen: int,
    ) -> tuple[PreparedHistory, CompactionOutcome] | None:
        """The safety net when no summary could be made (see ``safety_net``)."""
        trimmed: tuple[Trimmed, PreparedHistory] | None = await trim_and_store(
            self.stores, req, session, history, frozen, await self.budgets(req))
        if trimmed is None:
            return None
        done, history_to_send = trimmed
        outcome = CompactionOutcome("trimmed", done.tokens_before, done.tokens_after,
                                    summary_failed=session.failure or "unknown",
                                    unstored=session.unstored)
        return history_to_send, outcome

    async def _make(
        self, req: Request, session: SessionView, history: list[Message], frozen: int,
        call: SummaryCaller, deadline: float,
    ) -> tuple[PreparedHistory | None, CompactionOutcome]:
        """One compaction, each step cheaper than a refusal: the cheap reductions;
        else a summary within its share of the time left before ``deadline``; else the
        trimming safety net. Stored, or kept in memory while the store is down."""
        budgets = await self.budgets(req)
        started = time.monotonic()
        reduced, sent = await reduce_and_store(self.stores, req, session, history, frozen,
                                               budgets, self._archive_note(req, session))
        if sent is not None:
            tokens = await self._tokens(req, sent.messages)
            return sent, CompactionOutcome("reduced", await self._tokens(req, history), tokens,
                                           seconds=time.monotonic() - started,
                                           unstored=session.unstored)
        source = reduced
        share = self.route_settings(req.route).summary_time_share
        until = started + max(0.0, deadline - started) * share
        compacted, outcome = await self._compact_locked(req, session, source, call, until)
        if compacted is not None:
            return PreparedHistory(compacted, len(compacted)), outcome
        trimmed = await self._trim(req, session, source, frozen)
        if trimmed is not None:
            return trimmed
        return None, outcome

    def _archive_note(self, req: Request, session: SessionView) -> str:
        """Where a folded or superseded tool result's full text can be read."""
        path = ARCHIVE_ENDPOINT.format(session_id=quote(session.session_id, safe=""))
        tool = self.recall_tool_name(req)
        return (f"the `{tool}` tool reads it" if tool else f"GET {path}")

    def keep_unstored(self, session: SessionView, record: CompactionRecord,
                      archived: list[Message]) -> CompactionRecord | None:
        """Keep a compaction made while the store is down in memory (this process reuses
        it; it is written to the store when the store returns). Background results are not
        kept (None): the next compaction makes one again."""
        if record.kind == KIND_BACKGROUND:
            return None
        self.unstored.add(session.key, Unstored(record, list(archived)))
        self.index.note(session.key, has_records=True)
        session.unstored = True
        return record

    def finish_in_background(self, session: SessionView,
                             work: Coroutine[Any, Any, None]) -> None:
        """Let a summary that outlived its request finish (its result is parked for the
        session's next turn); one per session, like background compactions: a later turn's
        summary supersedes an earlier one still waiting (only the session's longest history
        can serve its next turn, and one parked result replaces another)."""

        async def run() -> None:
            try:
                await work
            except store_errors():  # the outage tracker logged it
                return
            except Exception:  # background work must never take the gateway down
                log.exception("late summary of session %s failed", session.session_id)

        if (earlier := self.late.get(session.key)) is not None:
            earlier.cancel()
        task = asyncio.create_task(run(), name=session.key)
        self.late[session.key] = task
        self.running.add(task)
        task.add_done_callback(self.running.discard)
        task.add_done_callback(
            lambda done: self.late.pop(session.key) if self.late.get(session.key) is done
            else None)

    def _catch_up_soon(self) -> None:
        """The store is back: write what was kept in memory meanwhile (in the background)."""
        if not len(self.unstored):
            return
        task = asyncio.get_running_loop().create_task(
            self.unstored.catch_up(self.writes, self.outage), name="catch-up")
        self.running.add(task)
        task.add_done_callback(self.running.discard)

    async def store_status(self, timeout: float = 2.0) -> str | None:
        """Why the session store is unavailable (a probe when it was down), None when up."""
        if self.outage.down:
            try:
                async with asyncio.timeout(timeout):
                    await self.store.has_records("gw-readiness")
            except TimeoutError:
                pass
            except store_errors():
                pass
        return self.outage.reason if self.outage.down else None

    def _session(self, req: Request) -> SessionView:
        sid = self._session_id(req)
        return SessionView(sid, store_key(sid, req.owner), req.messages, req.owner)

    def _session_id(self, req: Request) -> str:
        known = req.known
        return req.session_id or "fp-" + (
            known.fingerprint if known is not None else session_fingerprint(req.messages))[:32]

    def _session_key(self, req: Request) -> str:
        return store_key(self._session_id(req), req.owner)

    def level_of(self, route: ModelRoute, tokens: int) -> tuple[str, float] | None:
        """The context level and usage ratio of ``tokens`` on the route's window as known now
        (learned from a refusal, else configured); None when no window is known."""
        window = self.windows.window_now(route)
        if window is None:
            return None
        settings = self.route_settings(route)
        ratio = usage_ratio(tokens, window, settings)
        return _level(ratio, settings), ratio

    def prepare_now(self, req: Request) -> Prepared | None:
        """What :meth:`prepare` would answer, when that needs no waiting: the model's window
        is known here and the history is far below the trigger (then nothing stored for the
        session matters, see :func:`_skips_store`). None otherwise (then call
        :meth:`prepare`)."""
        route = req.route
        window = self.windows.window_now(route)
        if window is None:
            return None
        settings = self.route_settings(route)
        if self.index.needs_lookup(self._session_key(req)) and not _skips_store(window):
            return None
        return self._below_trigger(req, window, settings, req.messages, 0, None)

    def _below_trigger(
        self, req: Request, window: int, settings: CompactionSettings, history: list[Message],
        frozen: int, reused: CompactionOutcome | None,
    ) -> Prepared | None:
        """The answer when the history is certainly below the trigger, else None.

        Tokens never exceed bytes (plus an allowance per image-like part): below the
        trigger, the estimate is enough and the exact (costly) count is skipped."""
        known = req.known
        parts = known.media_parts if known is not None else media_parts(req.messages)
        bound = len(req.raw) + _PART_TOKENS * parts
        if decide(bound, window, settings) != "none":
            return None
        estimate = min(bound, len(req.raw) // 4)
        ratio = usage_ratio(estimate, window, settings)
        return Prepared(PreparedHistory(history, frozen), _level(ratio, settings), reused,
                        ratio=ratio)

    async def prepare(self, req: Request, call: SummaryCaller, deadline: float) -> Prepared:
        """The history to send, with stored compactions applied; compact first at the block
        ratio (waiting at most until ``deadline``, monotonic); start a background compaction
        past the trigger. A store slower than the deadline allows is an outage."""
        with store_deadline(deadline):
            return await self._prepare(req, call, deadline)

    async def _prepare(self, req: Request, call: SummaryCaller, deadline: float) -> Prepared:
        route = req.route
        settings = self.route_settings(route)
        window = await self.window(route)
        session = self._session(req)
        looked = self.index.needs_lookup(session.key)
        history, frozen, reused = req.messages, 0, None
        if looked and _skips_store(window):
            below = self._below_trigger(req, window, settings, history, 0, None)
            if below is not None:
                return below
        if looked:
            # The compaction may have been made after a provider overflow (below the
            # configured window), by another replica, or before a restart: look.
            history, frozen, reused = await self._reuse(req, session)
        below = self._below_trigger(req, window, settings, history, frozen, reused)
        if below is not None:
            return below
        if not looked:
            # About to compact, or close to it: the index may be stale, ask the store.
            history, frozen, reused = await self._reuse(req, session)
        tokens = await self._tokens(req, history)
        ratio = usage_ratio(tokens, window, settings)
        level = _level(ratio, settings)
        decision = decide(tokens, window, settings)
        if decision == "block":
            made, outcome = await self._make(req, session, history, frozen, call, deadline)
            if made is not None:
                after = await self._tokens(req, made.messages)
                ratio = usage_ratio(after, window, settings)
                return Prepared(made, _level(ratio, settings), outcome, ratio=ratio)
            too_big = (tokens, window) if tokens >= window else None
            return Prepared(PreparedHistory(history, frozen), level, outcome, too_big, ratio)
        if (decision == "background" and not self.outage.down
                and session.key not in self._running_ids()):
            self._start_background(req, session, history)
        return Prepared(PreparedHistory(history, frozen), level, reused, ratio=ratio)

    async def on_overflow(
        self, req: Request, history: list[Message], call: SummaryCaller, deadline: float,
        failure: UpstreamFailure | None = None,
    ) -> Compacted:
        """After a provider overflow: learn the window it names (``failure``), compact the
        history that overflowed (the ladder's ``compact`` step; the window-trimming safety
        net when no summary can be made), waiting at most until ``deadline`` (monotonic)."""
        with store_deadline(deadline):
            return await self._on_overflow(req, history, call, deadline, failure)

    async def _on_overflow(
        self, req: Request, history: list[Message], call: SummaryCaller, deadline: float,
        failure: UpstreamFailure | None,
    ) -> Compacted:
        refused = None
        if failure is not None:  # what was refused: a bound when the refusal names no window
            refused = await self._tokens(req, history) + asked_output_tokens(req.body)
        await self.windows.learn(req.route, failure, refused)
        session = self._session(req)
        unstored = False
        try:
            applied = await self.store.find_compaction(session.key, session.full_chain())
        except store_errors():  # the store is down: what this process kept in memory
            applied, unstored = self.unstored.fallback(session.key, session.full_chain())
        if applied is not None:
            replacement = list(applied.replacement)
            if not head_is(history, replacement):
                # Stored by another process after this request was prepared: use it
                # instead of writing a second summary.
                self.index.note(session.key, has_records=True)
                rest = session.original[applied.prefix_len:]
                return Compacted(PreparedHistory(replacement + rest, len(replacement)),
                                 outcome_of("reused", applied, unstored=unstored))
            session.applied = applied  # its messages are archived already
        stored = list(applied.replacement) if applied is not None else []
        frozen = len(stored) if stored and head_is(history, stored) else 0
        made, outcome = await self._make(req, session, history, frozen, call, deadline)
        return Compacted(made, outcome)

    async def read_archive(
        self, session_id: str, first: int, last: int, owners: Sequence[str]
    ) -> list[dict[str, Any]] | None:
        """Archived messages of a session stored under one of ``owners`` (the reader's own
        namespace first); None when none of them holds it."""
        try:
            for owner in owners:
                key = store_key(session_id, owner)
                stored_owner = await self.store.get_owner(key)
                if stored_owner is not None and stored_owner != hash_client_key(owner):
                    continue
                if stored_owner is not None or await self.archive.line_count(key) > 0:
                    lines: list[dict[str, Any]] = await self.archive.read(key, first, last)
                    return lines
        except StoreUnavailable:
            raise
        except store_errors() as exc:
            raise StoreUnavailable(f"the session store is unavailable ({self.outage.reason})"
                                   ) from exc
        return None

    async def recall_scope(self, req: Request) -> RecallScope | None:
        """The archive lines the recall tool may read for ``req``: those of the
        compactions whose prefixes this very request carries, in its owner's namespace."""

        session = self._session(req)
        try:
            if session.owner is not None:
                stored_owner = await self.store.get_owner(session.key)
                if stored_owner is not None and stored_owner != hash_client_key(session.owner):
                    return None
            # Every stored compaction of a prefix of this history archived messages of this
            # history only: their line ranges are what it may read (a fork of the same
            # session id, e.g. another client's fingerprint, archived lines it may not).
            ranges: list[tuple[int, int]] = []
            chain = session.full_chain()
            upto = len(chain)
            for _ in range(_MAX_RECALL_RECORDS):
                record = await self.store.find_compaction(session.key, chain[:upto])
                if record is None:
                    break
                if 1 <= record.archive_from <= record.archive_to:
                    ranges.append((record.archive_from, record.archive_to))
                upto = record.prefix_len - 1
        except store_errors():  # (the outage is logged once, by the outage tracker)
            return None
        if not ranges:
            return None
        return RecallScope(session.session_id, session.key, tuple(sorted(ranges)),
                           self.archive)

    # -- internals ---------------------------------------------------------------------

    def recall_tool_name(self, req: Request) -> str | None:
        """The recall tool the Context Recovery note names (None: the model gets none, as
        on a native Messages / Responses wire, whose upstream body has no recall tool)."""
        if req.wire is not None:
            return None
        settings = recall_settings(self.config, req.route)
        return settings.tool if settings.enabled else None

    def _running_ids(self) -> set[str]:
        return {task.get_name() for task in self.running}

    async def _tokens(self, req: Request, history: list[Message]) -> int:
        """The tokens of ``history`` as it will be sent: with the request's tool results
        condensed when it asks for that (then a history only condensing makes fit is not
        summarized). (Condensed here, on the loop: the condenser's memory is not shared
        with a thread.)"""
        history = self._as_sent(req, history)
        if len(req.raw) > _COUNT_INLINE:
            return await asyncio.to_thread(self._count, req, history)
        return self._count(req, history)

    def _as_sent(self, req: Request, history: list[Message]) -> list[Message]:
        if (self.condenser is None or req.tool_outputs != "condense"
                or req.policy == "report" or getattr(req.wire, "stateful", False)):
            return history
        return self.condenser.condense(history).messages

    def _count(self, req: Request, history: list[Message]) -> int:
        model = req.route.upstream_model
        return token_counter(model)(history) + count_tools_tokens(req.body, model)

    async def _reuse(self, req: Request, session: SessionView) -> Reused:
        """The session's stored compaction applied (see ``reuse``)."""
        return await self.stored.apply(session, large=len(req.raw) > _HASH_INLINE)

    def _start_background(self, req: Request, session: SessionView,
                          history: list[Message]) -> None:
        prefix = session.prefix_key

        async def run() -> None:
            try:
                # One background compaction per session, and never one of a prefix that is
                # being compacted already (across replicas: the locks live in the store).
                async with self.store.lock(session.key, "background", LEASE,
                                           renew=True) as got:
                    if not got:
                        return
                    async with self.store.lock(session.key, prefix, LEASE, renew=True) as mine:
                        if mine and not await self._compacted_already(session):
                            started = time.monotonic()
                            record = await summarize_and_store(
                                self.summarizing, req, session, history, self.background_call,
                                kind=KIND_BACKGROUND)
                            if self.metrics is not None:
                                self.metrics.observe_compaction(
                                    req.route.name, time.monotonic() - started,
                                    ok=record is not None)
            except store_errors():  # the outage tracker logged it: no traceback per request
                return
            except Exception:  # background work must never take the gateway down
                log.exception("background compaction of session %s failed",
                              session.session_id)

        task = asyncio.create_task(run(), name=session.key)
        self.running.add(task)
        task.add_done_callback(self.running.discard)

    async def _compacted_already(self, session: SessionView) -> bool:
        """True when a compaction of exactly this history was stored meanwhile."""
        found = await self.store.find_compaction(session.key, session.full_chain())
        return found is not None and found.prefix_len == len(session.original)

    async def _compact_locked(
        self, req: Request, session: SessionView, history: list[Message],
        call: SummaryCaller, deadline: float,
    ) -> tuple[list[Message] | None, CompactionOutcome]:
        """Summarize now, by ``deadline`` (monotonic); one compaction per session prefix at a
        time (across replicas).

        Another request compacting this very prefix is waited for, polling with backoff
        until its result lands or ``deadline`` passes; a holder that died is detected by
        the store (``gateway.sessions.lease``) and its lock taken over. While the store is
        down there are no locks: this process summarizes on its own.
        """
        key = session.prefix_key
        retry = 0
        while True:
            try:
                async with self.store.lock(session.key, key, LEASE, renew=True) as got:
                    if got:
                        done = await self._done_meanwhile(session, history)
                        if done is not None:
                            return list(done.replacement), outcome_of("reused", done)
                        return await self._summarize(req, session, history, call, deadline)
            except store_errors():
                return await self._summarize(req, session, history, call, deadline)
            # Someone else is compacting this very prefix: use their result when it lands.
            left = deadline - time.monotonic()
            if left <= 0:
                session.failure = ("deadline: another compaction of this history was still "
                                   "running when the summary's share of the time ran out")
                return None, _failed(session.failure)
            delay = backoff_delay(retry, base=POLL_BASE, cap=POLL_CAP) or POLL_BASE
            await asyncio.sleep(min(max(delay, POLL_BASE / 2), left))
            retry += 1
            found = await self._done_meanwhile(session, history, adopt_pending=False)
            if found is not None:
                return list(found.replacement), outcome_of("reused", found)

    async def _summarize(
        self, req: Request, session: SessionView, history: list[Message],
        call: SummaryCaller, until: float,
    ) -> tuple[list[Message] | None, CompactionOutcome]:
        started = time.monotonic()
        record = await summarize_and_store(self.summarizing, req, session, history, call,
                                           kind=KIND_SUMMARIZED, until=until)
        seconds = time.monotonic() - started
        if record is None:
            return None, _failed(session.failure or "unknown", seconds)
        return list(record.replacement), outcome_of("summarized", record, seconds,
                                                     unstored=session.unstored)

    async def _done_meanwhile(self, session: SessionView, history: list[Message], *,
                              adopt_pending: bool = True) -> CompactionRecord | None:
        """A compaction of exactly this history that another request (or a background
        task) stored while we waited, unless it is the one that was just sent."""
        n = len(session.original)
        if n == 0:
            return None
        found = await self.store.find_compaction(session.key, session.full_chain())
        if found is None or found.prefix_len != n:
            found = None
            pending = await self.store.take_pending(session.key) if adopt_pending else None
            if pending is not None:
                if pending.prefix_len == n and pending.prefix_hash == session.chain_at(n):
                    await self.store.put_compaction(pending)
                    found = pending
                else:  # not ours to judge: leave it for the request it may apply to
                    await self.store.put_pending(session.key, pending)
        if found is None or head_is(history, list(found.replacement)):
            return None
        return found


def _failed(why: str, seconds: float | None = None) -> CompactionOutcome:
    return CompactionOutcome(failed=why, seconds=seconds)


def _level(ratio: float, settings: CompactionSettings) -> str:
    """``x-gateway-context``. "blocked" is what compaction prevents: reported as critical."""
    level = budget_level(ratio, settings)
    return "critical" if level == "blocked" else level


def _skips_store(window: int) -> bool:
    """Whether a history far below the trigger of a known ``window`` may skip the store.

    A stored compaction replaces the start of a history that reached the trigger (or
    overflowed) and never adds tokens: a history whose byte count (a bound on its tokens) is
    below the trigger is sent whole just as well, so a session this process does not know is
    not looked up (on SQLite a worker-thread hop per new session, about a fifth of the CPU of
    a never-seen 300 KB body). The one cost: a session compacted elsewhere after an overflow
    the provider did not size may be refused once here, and the ladder's ``compact`` step
    then reuses the stored compaction (:meth:`CompactionService.on_overflow`)."""
    return window > 0

