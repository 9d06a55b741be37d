"""The one loop that drives a request: prepare the history, then climb the pure ladder.

The pure pieces (projection, classifier, ladder state machine, compaction shape) decide; the
driver runs them in order, does the I/O between them and writes what happened into the
request's :class:`~gateway.flow.flow.Flow`. Compaction is a ladder step like the others: it
returns a new history or the reason it could not make one. Everything, the blocking
compaction before the first attempt included, runs inside the request's deadline.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import orjson
from opentelemetry import trace
from opentelemetry.trace import INVALID_SPAN, Span, SpanKind, Status, StatusCode, Tracer

from gateway.compaction.outcome import CompactionOutcome, Prepared, PreparedHistory
from gateway.config import GatewayConfig
from gateway.errors import ClientError
from gateway.flow import render
from gateway.flow.flow import AttemptKind, ChatRequest, Flow, Refusal
from gateway.flow.screen import as_sent_messages, as_sent_native, screen
from gateway.flow.summary import SummaryCalls
from gateway.projection import project, project_strict
from gateway.projection.anomalies import (
    ORPHAN_TOOL_RESULT_DROPPED,
    TOOL_RESULT_REORDERED,
    Anomaly,
    Projection,
)
from gateway.projection.asks import NOTHING_ASKED, StrictAsks
from gateway.projection.condense import Condensed, ToolOutputCondenser
from gateway.projection.exchanges import results_follow_calls
from gateway.projection.invisible import MessageScans
from gateway.projection.lazy_messages import copy_messages, dumps_request
from gateway.projection.media import has_media_parts
from gateway.projection.project import project_with_call_ids
from gateway.providers.base import Provider, UpstreamCall, UpstreamError, UpstreamResponse
from gateway.providers.failure import UpstreamFailure
from gateway.providers.openai_compat import HttpPool
from gateway.providers.prompt_cache import (
    apply_anthropic_breakpoint,
    apply_openai_cache_key,
    wire_style,
)
from gateway.providers.splice import (
    SkeletonCache,
    client_bytes,
    exact_integers,
    with_client_history,
    with_messages_json,
)
from gateway.recall.loop import RecallReport, RecallTool
from gateway.recovery.classifier import Verdict, classify, strict_asks
from gateway.recovery.evidence import failure_texts
from gateway.recovery.ladder import AttemptPlan, GiveUp, Ladder
from gateway.recovery.media_step import degrade_request_media
from gateway.recovery.output_budget import OutputFit, fit_output_budget
from gateway.recovery.settings import RouteRecovery, route_recovery
from gateway.router.fleet import Fleet
from gateway.routing import ModelRoute
from gateway.telemetry.context import ContextMemo
from gateway.telemetry.genai import attempt_attributes, trace_headers
from gateway.telemetry.metrics import Metrics
from gateway.telemetry.repairs import RepairReporter
from gateway.wires.chat_validation import dumps_within_depth
from gateway.wires.codecs import AnthropicCodec, ResponsesCodec
from gateway.wires.native import responses_only, responses_sender

if TYPE_CHECKING:
    from gateway.compaction.service import CompactionService

__all__ = ["Driver"]

log = logging.getLogger("gateway.flow")

# The projection, the upstream body, its bytes, and the tool results condensed in it.
Built = tuple[Projection, dict[str, Any], bytes, Condensed | None]


class Driver:
    """Runs chat requests end to end, up to the first byte of the answer."""

    def __init__(
        self,
        config: GatewayConfig,
        routes: dict[str, ModelRoute],
        tracer: Tracer,
        pool: HttpPool,
        metrics: Metrics | None = None,
    ) -> None:
        self.config = config
        self.routes = routes
        self.tracer = tracer
        self.pool = pool
        self.reporter = RepairReporter()
        self.metrics = metrics or Metrics()
        self.summary_calls = SummaryCalls(tracer, self.metrics, responses=self._summary_sender)
        # The top-level fields of repaired bodies, serialized (an agent's turns share them).
        self.skeletons = SkeletonCache()
        self.compactor: CompactionService | None = None
        self._recovery: dict[str, RouteRecovery] = {}
        self._strict_compacted: set[str] = set()  # routes that refuse the compacted shape
        # deployment -> the translated settings it refused (``ChatRequest.optional_fields``):
        # left out up front from then on, not refused on every request
        self._refused_fields: dict[str, frozenset[str]] = {}
        self.fleet: Fleet | None = None  # deployments, cooldowns, fallbacks (set by the app)
        self.recall = RecallTool(config)
        # Owner id -> the owner's configured name (set by the app from the client keys).
        self.owner_names: dict[str, str] = {}
        self.scans = MessageScans()  # chat messages scanned for invisible characters
        self.condenser = ToolOutputCondenser()  # tool results condensed (by text)
        self.contexts = ContextMemo()  # the last turn's context sums, per session

    async def start(self) -> None:
        """Open the compaction service (session store, archive) when configured."""
        if self.config.compaction.enabled:
            from gateway.compaction.service import CompactionService

            self.compactor = CompactionService.open(self.config, self.routes, self.tracer,
                                                    self.summary_calls, self.metrics)
            self.compactor.condenser = self.condenser

    async def close(self) -> None:
        """Close stores."""
        if self.compactor is not None:
            await self.compactor.close()

    async def read_archive(
        self, session_id: str, first: int, last: int, *, owners: Sequence[str]
    ) -> list[dict[str, Any]] | None:
        """Serve the archive endpoint (None: no archive in any of ``owners``)."""
        if self.compactor is None:
            raise ClientError(404, "session archives are not enabled", code="not_found")
        return await self.compactor.read_archive(session_id, first, last, owners)

    def settings(self, route: ModelRoute) -> RouteRecovery:
        """The ladder settings of a model, resolved from the config once."""
        settings = self._recovery.get(route.name)
        if settings is None:
            settings = self._recovery[route.name] = route_recovery(self.config, route)
        return settings

    def new_flow(self, req: ChatRequest) -> Flow:
        """The record of a request, its deadline starting now."""
        started = time.monotonic()
        deadline = started + min(self.settings(req.route).policy.deadline,
                                 req.options.timeout or float("inf"))
        req.owner_name = owner = self.owner_name(req.owner)
        repair = self.config.repair
        policy, invisible, outputs = repair.resolved(req.route.entry.model_info.repair, owner)
        req.policy = policy if repair.enabled else "repair"
        req.tool_outputs = outputs if repair.enabled else "keep"
        return Flow(request=req, deadline=deadline, started=started, invisible_mode=invisible)

    def owner_name(self, owner: str | None) -> str:
        """The configured name of a client owner (``api_keys[N]`` for a key without one);
        ``anonymous`` without client auth."""
        if owner is None:
            return "anonymous"
        return self.owner_names.get(owner, "other")

    async def run(self, req: ChatRequest | Flow, span: Span | None = None) -> Flow:
        """Send the request, recovering what can be recovered. The returned Flow has a
        ``response``, or a ``give_up`` / ``refusal`` to render for the client.

        ``span`` is the edge's request span (it outlives this call: the answer is relayed
        under it); without one the driver opens its own ``gateway.chat`` span.
        """
        flow = req if isinstance(req, Flow) else self.new_flow(req)
        scope: AbstractContextManager[Span]
        if span is None:
            scope = self.tracer.start_as_current_span("gateway.chat")
        elif span.is_recording() or span.get_span_context().is_valid:
            scope = trace.use_span(span, record_exception=False, set_status_on_exception=False)
        else:  # nothing to record and no client trace to pass on
            flow.traced = False
            scope = nullcontext(span)
        with scope as current:
            if current.is_recording():
                current.set_attributes(render.span_start(flow))
            if screen(flow, self.scans) and await self._prepare(flow):
                await self._climb(flow, current)
            if current.is_recording():
                current.set_attributes(render.span_end(flow))
        if log.isEnabledFor(logging.DEBUG):
            fields = render.log_fields(flow)
            log.debug("chat %s", " ".join(f"{k}={v}" for k, v in fields.items()),
                      extra=fields)
        return flow

    # -- preparing the history --------------------------------------------------------

    def _learned(self) -> Callable[[str], int | None] | None:
        """The windows learned from overflow refusals, by group (None: compaction off)."""
        return self.compactor.windows.book.learned if self.compactor is not None else None

    async def _prepare(self, flow: Flow) -> bool:
        """Stored compactions applied, blocking compaction done (within the deadline).
        False when the request cannot be sent (``flow.refusal`` says why)."""
        req = flow.request
        if self.fleet is not None and req.wire is None:
            # A larger context-window fallback loses nothing; a summary does.
            fitted = await self.fleet.fit_window(req.route, req, self._learned())
            if fitted is not req.route:
                if fitted.name != req.route.name:  # (a larger deployment of the group is no
                    flow.moved_from = req.route.name  # fallback)
                req.route = fitted
        flow.history = PreparedHistory(req.messages)
        if self.compactor is None or provider_truncates(req):
            return True
        prepared = self.compactor.prepare_now(req)  # the usual case: nothing to wait for
        if prepared is None:
            prepared = await self._prepare_waiting(flow)
            if prepared is None:
                return False
        flow.history = prepared.history
        flow.context_level = prepared.level
        if self.config.gateway.telemetry.context_report:
            flow.context = self.contexts.breakdown(
                req.session_key(), prepared.history.messages, req.body,
                frozen=prepared.history.frozen,
                edge=req.edge_turn if prepared.history.messages is req.messages else None,
                level=prepared.level, used=prepared.ratio)
        if prepared.outcome is not None:
            flow.compactions.append(prepared.outcome)
        if prepared.too_big is not None:
            tokens, window = prepared.too_big
            why = (prepared.outcome.failed if prepared.outcome and prepared.outcome.failed
                   else "no summary was produced")
            flow.refusal = Refusal(
                400, f"The conversation needs about {tokens} tokens but {req.route.name} has "
                f"a context window of {window}; compaction was tried and failed ({why}).",
                code="context_length_exceeded", param="messages")
            return False
        return True

    async def _prepare_waiting(self, flow: Flow) -> Prepared | None:
        """Prepare when the store, Redis or a summary may be waited for, within the
        deadline; None (``flow.refusal`` set) when the deadline passed."""
        assert self.compactor is not None
        calls = self.summary_calls.bound(flow)
        scope = asyncio.timeout(flow.remaining())
        try:
            async with scope:
                return await self.compactor.prepare(flow.request, calls, flow.deadline)
        except TimeoutError:
            if not scope.expired():
                raise
            why = self._deadline_note(flow)
            flow.compactions.append(CompactionOutcome(failed=why))
            flow.refusal = Refusal(
                504, f"The request deadline of {self._deadline(flow):g}s passed while the "
                "history was being compacted before sending it.",
                code="deadline_exceeded", reason=why)
            return None

    def _deadline(self, flow: Flow) -> float:
        return flow.deadline - flow.started

    def _deadline_note(self, flow: Flow) -> str:
        flow.note("deadline", "compaction")
        return (f"deadline: compaction did not finish within the request deadline of "
                f"{self._deadline(flow):g}s")

    async def _compact(self, flow: Flow, history: PreparedHistory,
                       failure: UpstreamFailure) -> PreparedHistory | GiveUp:
        """The ladder's ``compact`` step: a new history, or the GiveUp saying why not."""
        outcome: CompactionOutcome
        compacted = None
        if self.compactor is None:
            outcome = CompactionOutcome(failed="compaction is disabled")
        else:
            calls = self.summary_calls.bound(flow)
            scope = asyncio.timeout(flow.remaining())
            try:
                async with scope:
                    result = await self.compactor.on_overflow(flow.request, history.messages,
                                                              calls, flow.deadline, failure)
                compacted, outcome = result.history, result.outcome
            except TimeoutError:
                if not scope.expired():
                    raise
                why = self._deadline_note(flow)
                flow.compactions.append(CompactionOutcome(failed=why))
                return GiveUp(f"{why} after the context overflowed", failure)
        flow.compactions.append(outcome)
        if compacted is None:
            why = f" ({outcome.failed})" if outcome.failed else ""
            return GiveUp("the context overflowed and compaction could not reduce it" + why,
                          failure)
        return compacted

    # -- the ladder -------------------------------------------------------------------

    def _summary_sender(self, route: ModelRoute) -> Provider | None:
        """Where a summary of ``route``'s history is asked when its chat endpoint cannot
        serve it: the Responses endpoint of a model served there alone."""
        return responses_sender(self.config, route, self.pool) if responses_only(route) else None

    def _project(self, req: ChatRequest, history: PreparedHistory,
                 structure: str, asks: StrictAsks = NOTHING_ASKED) -> Projection:
        projection = self._projected(req, history, structure, asks)
        if not history.frozen and any(a.kind == ORPHAN_TOOL_RESULT_DROPPED
                                      and a.tool_call_id is None for a in projection.anomalies):
            # Results without a tool_call_id (clients written for Ollama's API, whose calls
            # have no ids) are not lost: the calls get ids and the results with them.
            return project_with_call_ids(history.messages, structure == "strict", asks)
        return projection

    def _projected(self, req: ChatRequest, history: PreparedHistory,
                   structure: str, asks: StrictAsks = NOTHING_ASKED) -> Projection:
        messages = history.messages
        if not self.config.repair.enabled:
            return Projection(messages)
        if structure == "strict":
            # Strict upstreams may refuse the compacted shape's consecutive user messages.
            return project_strict(messages, asks=asks)
        if not history.frozen:
            known = req.known
            if known is not None and messages is req.messages:
                if known.clean:
                    # (checked while it was read; a copy, unparsed while they are)
                    return Projection(copy_messages(messages))
                if known.layouts is not None:  # over the previous turn's projection
                    return known.layouts.project(messages)
            projection = project(messages)
            if (req.wire is not None and req.wire.results_by_id and projection.anomalies
                    and all(a.kind == TOOL_RESULT_REORDERED for a in projection.anomalies)
                    and results_follow_calls(messages)):
                # Outputs placed later than right after their calls: valid as sent where
                # they pair by call id; a strict upstream's refusal reorders them.
                return Projection(list(messages))
            return projection
        tail = project(messages[history.frozen:])
        return Projection(messages[: history.frozen] + tail.messages, tail.anomalies)

    async def _climb(self, flow: Flow, span: Span) -> None:
        req = flow.request
        route = req.route
        settings = self.settings(route)
        # A native wire (Responses, Messages) goes to the deployments of its group (and of
        # its fallback groups) that speak it natively, and to a fallback group that speaks
        # only chat translated; a history that lives at one provider (previous_response_id)
        # stays with the first.
        codec = req.wire
        speaks = codec.senders.speaks if codec is not None and codec.senders else None
        fleet = self.fleet if codec is None or speaks is not None else None
        ladder = fleet.ladder(route, settings.policy, req.options, self._learned()) \
            if fleet is not None else Ladder(settings.policy)
        sent_to = route  # the deployment the native codec's sender points at
        before = ("fallback",) if flow.moved_from else ()
        failed: set[str] = set()  # deployments that refused this request
        assert flow.history is not None
        history = flow.history
        built: dict[tuple[Any, ...], Built] = {}
        generation = 0  # bumped when compaction replaces the history
        plan: AttemptPlan | GiveUp = ladder.first()
        last_raw: bytes | None = None
        last_body: dict[str, Any] | None = None
        sent_projection: Projection | None = None
        failure: UpstreamFailure | None = None
        verdict = Verdict.FATAL
        while not isinstance(plan, GiveUp):
            if plan.model is not None and plan.model != route.name and fleet is not None:
                req.route = route = fleet.fallback_route(plan.model, route)
                settings = self.settings(route)
                self.metrics.inc("gateway_fallbacks_total", model=route.name)
                if speaks is not None and not any(map(speaks, fleet.deployments_of(plan.model))):
                    # No deployment of this fallback speaks the client's wire: from here on
                    # the request goes as Chat Completions (the edge translates the answer).
                    req = flow.request = as_chat(req)
                    codec = speaks = None
                    history = flow.history = PreparedHistory(req.messages)
                    generation += 1
            if plan.step == "compact":
                assert failure is not None
                lowered = lower_output_budget(req, failure)
                if lowered is not None:  # the budget alone overflowed: no history fits
                    flow.compactions.append(lowered)
                else:
                    compacted = await self._compact(flow, history, failure)
                    if isinstance(compacted, GiveUp):
                        plan = compacted
                        break
                    history = flow.history = compacted
                generation += 1
            if (history.frozen and plan.structure == "default"
                    and route.name in self._strict_compacted):
                # This upstream refused the compacted shape's consecutive user messages
                # before: go strict at once instead of paying a refusal on every turn.
                plan = replace(plan, structure="strict")
            if fleet is not None:
                exclude = frozenset(failed)
                if speaks is not None:
                    exclude |= fleet.others(route, speaks)
                picked = await fleet.pick(route, tokens=len(req.raw) // 4, exclude=exclude,
                                          tags=req.options.tags)
                if isinstance(picked, UpstreamFailure):  # every deployment is resting
                    # (or the request's tags leave none: no wait changes that)
                    failure, verdict = picked, (Verdict.TRANSIENT if picked.status == 429
                                                else Verdict.FATAL)
                    plan = ladder.after_failure(plan, failure, verdict, flow.elapsed())
                    continue
                req.route = picked
                if codec is not None and codec.senders and picked is not sent_to:
                    req.wire = codec = codec.sent_to(picked)
                    sent_to = picked
            if plan.dropped:  # (only what drop_params, or a translation's field, let go)
                req.route = replace(req.route,
                                    drop_fields=req.route.drop_fields | set(plan.dropped))
            refused = (self._refused_fields.get(req.route.deployment_id)
                       if req.optional_fields else None)
            if refused and not refused <= req.route.drop_fields:
                req.route = replace(req.route, drop_fields=req.route.drop_fields | refused)
            # The strict rung reads the refusal: a native wire's own rules; on a chat
            # history what its words ask (the tool call id form, thinking parts left out,
            # identical calls merged, developer messages as system ones).
            refusal = (refusal_text(failure) if plan.structure == "strict"
                       and failure is not None else None)
            asks = (strict_asks(refusal) if refusal is not None and req.wire is None
                    else NOTHING_ASKED)
            key = (generation, plan.structure, plan.media, req.route.upstream_model,
                   req.route.litellm_model, req.route.wire, req.route.drop_fields,
                   req.route.deployment_id if req.route.defaults else "", asks)
            if key not in built:
                # Built once per shape: a plain retry resends the same bytes without
                # projecting, re-fetching or re-encoding anything again.
                built[key] = await self._build(req, history, plan, settings, flow.remaining(),
                                               refusal if req.wire is not None else None,
                                               asks)
            projection, body, raw, condensed = built[key]
            if plan.step not in (None, "retry", "fallback") and (
                    raw == last_raw or body == last_body):
                # This step changes nothing: skip to the next one instead of resending (the
                # same body may be written otherwise: the client's own bytes, then ours).
                assert failure is not None
                plan = ladder.after_unchanged(plan, failure, verdict, flow.elapsed())
                continue
            sent_projection = projection
            if plan.delay > 0 and not (failed and req.route.deployment_id not in failed):
                # (a retry that moved to another deployment does not wait for the first)
                await asyncio.sleep(plan.delay)
                flow.backoff += plan.delay
            last_raw, last_body = raw, body
            outcome = await self._attempt(flow, plan, body, raw)
            flow.steps = before + ladder.steps_taken
            if isinstance(outcome, tuple):
                failure, verdict = outcome
                droppable = (body if drops_params(req, self.config)
                             else req.optional_fields.intersection(body))
                dropping = ladder.drop_param(plan, failure, droppable) if droppable else None
                if dropping is not None:  # resent without the field it does not take
                    plan = dropping
                    continue
                failed.add(req.route.deployment_id)
                if verdict is Verdict.OVERFLOW and self.compactor is not None:
                    # Known before the ladder's next step: a context-window fallback
                    # compares the window the refusal states, not the configured one.
                    await self.compactor.learn_window(req.route, failure, flow.deadline)
                plan = ladder.after_failure(plan, failure, verdict, flow.elapsed())
                continue
            if history.frozen and plan.structure == "strict":
                self._strict_compacted.add(route.name)
            if plan.dropped and req.optional_fields:
                deployment = req.route.deployment_id
                self._refused_fields[deployment] = self._refused_fields.get(
                    deployment, frozenset()) | req.optional_fields.intersection(plan.dropped)
            self.reporter.report(projection, span, session=req.session_id,
                                 request_id=req.request_id, model=route.name,
                                 strict=plan.structure == "strict")
            flow.projection = projection
            flow.condensed = condensed
            flow.strict = plan.structure == "strict"
            flow.sent = body.get("messages")
            flow.sent_input = body.get("input") if isinstance(body.get("input"), list) else None
            if flow.context is not None and (generation or projection.repaired or (
                    condensed is not None and condensed.applied)):
                # What fills the window is what was sent: the repaired (condensed, compacted
                # after a refusal) history, counted over the session's previous sent turn
                # (the same objects), on the window known now.
                sent = (condensed.messages if condensed is not None and condensed.applied
                        else projection.messages)
                level, used = flow.context.level, flow.context.used
                after = flow.compactions[-1].tokens_after if flow.compactions else 0
                if generation and after and self.compactor is not None:
                    level, used = self.compactor.level_of(route, after) or (level, used)
                flow.context = self.contexts.breakdown(
                    req.session_key() + "\x00sent", sent, req.body,
                    frozen=history.frozen, level=level, used=used,
                    extends=req.laid_over(sent))
            flow.response = outcome
            if history.frozen:  # only a history carrying a compaction offers the recall tool
                await self._answer_recalls(flow, body, span)
            return
        flow.steps = before + ladder.steps_taken
        flow.give_up = plan
        flow.refused_projection = sent_projection

    async def _build(
        self, req: ChatRequest, history: PreparedHistory, plan: AttemptPlan,
        settings: RouteRecovery, time_left: float, refusal: str | None = None,
        asks: StrictAsks = NOTHING_ASKED,
    ) -> Built:
        """The projection, upstream body and its bytes for one plan (and the tool results
        condensed in it, when the request asks for that). A media step may use
        half of ``time_left`` (the request deadline's rest): the other half is for sending.
        ``refusal``: on a native wire's strict rung, the provider's words (its own rules);
        ``asks``: on a chat strict rung, what the refusal's words asked of it."""
        # (with repairs off, a native wire's body goes as sent on every rung: its own rules
        # are repairs too)
        as_written = (((req.policy == "report" and plan.structure == "default")
                       or (req.wire is not None and not self.config.repair.enabled))
                      and plan.media == "original" and not history.frozen)
        if as_written:
            # Sent as the client wrote it: a refusal climbs the ladder (the rescue).
            if req.wire is not None:
                return (*as_sent_native(req), None)
            projection = as_sent_messages(req)
        else:
            projection = self._project(req, history, plan.structure, asks)
        if req.wire is not None and req.wire.view.anomalies and history.messages is req.messages:
            # What reading the wire itself repaired (e.g. a Responses item sent twice).
            projection = Projection(projection.messages,
                                    (*req.wire.view.anomalies, *projection.anomalies))
        elif req.read_anomalies and history.messages is req.messages and not as_written:
            # Invisible characters stripped before projecting.
            projection = Projection(projection.messages,
                                    (*req.read_anomalies, *projection.anomalies))
        messages = projection.messages
        condensed = None
        # (a stateful Responses request's history is upstream: nothing here to condense)
        if req.tool_outputs != "keep" and not getattr(req.wire, "stateful", False):
            condensed = self.condenser.condense(messages)
            if not condensed.outputs:
                condensed = None
            elif req.tool_outputs == "condense" and not as_written:
                messages = condensed.messages  # (not the projection's: never its own bytes)
            else:  # ``report``, or a request sent as written: what it would save
                condensed = replace(condensed, applied=False)
        if history.frozen:  # a history carrying a compaction is offered the recall tool
            req = replace(req, body=self.recall.add(req.route, req.body))
        if plan.media != "original":
            limits = settings.media_limits
            budget = max(0.0, time_left / 2)
            if limits.max_seconds is None or budget < limits.max_seconds:
                limits = replace(limits, max_seconds=budget)
            degraded = await degrade_request_media(
                messages, limits, plan.media, self.pool.session,
                allow_private_addresses=settings.fetch_private)
            messages = degraded.messages
        body, wire_repairs = upstream_body(req, messages, refusal)
        if wire_repairs:
            projection = Projection(projection.messages,
                                    (*projection.anomalies, *wire_repairs))
        raw = None
        if (messages is projection.messages and not projection.repaired
                and history.messages is req.messages and not history.frozen):
            # Nothing changed: the client's own bytes (the model spliced in when renamed). A
            # native wire's history is its own list (``messages`` / ``input``), as sent.
            key = "messages" if req.wire is None else req.wire.history_key
            client = messages if req.wire is None else req.body.get(key)
            raw = client_bytes(req.raw, req.body, body, client, key)
            written = req.known.written if req.known is not None else None
            if raw is None and written is not None and client is not None \
                    and body.get(key) is client:
                # (the model renamed where it cannot be spliced in: the rest serialized
                # around the client's history bytes)
                raw = with_client_history(req.raw, body, written, self.skeletons, key)
        elif (req.known is not None and req.known.layouts is not None
              and body.get("messages") is messages
              and (json := req.known.layouts.json_of(messages)) is not None):
            # Repaired over the previous turn: its messages' JSON was extended, not redone.
            raw = exact_integers(req.raw, with_messages_json(body, json, self.skeletons))
        if raw is None:  # (the client's integers past 64 bits as written, not as floats)
            raw = exact_integers(req.raw, dumps_request(body))
        return projection, body, raw, condensed

    async def _attempt(
        self, flow: Flow, plan: AttemptPlan, body: dict[str, Any], raw: bytes, *,
        kind: AttemptKind = "chat",
    ) -> UpstreamResponse | tuple[UpstreamFailure, Verdict]:
        """One upstream call, in its own span: the response, or the failure and verdict.
        Every call of a request goes through here (a recall follow-up is ``kind="recall"``):
        traced, bounded by the request's deadline, counted for its deployment."""
        req = flow.request
        route = flow.served_by = req.route
        step = "recall" if kind == "recall" else plan.step
        attempt = flow.start_attempt(kind, route.name, deployment=route.litellm_model,
                                     number=plan.number, step=step,
                                     structure=plan.structure, media=plan.media,
                                     deployment_id=route.deployment_id)
        with (self.tracer.start_as_current_span("gateway.attempt", kind=SpanKind.CLIENT)
              if flow.traced else nullcontext(INVALID_SPAN)) as span:
            if span.is_recording():
                span.set_attributes({"gateway.attempt": plan.number,
                                     "gateway.policy.structure": plan.structure,
                                     "gateway.policy.media": plan.media,
                                     "gateway.step": step or "initial",
                                     "gateway.deployment": route.deployment_id,
                                     **attempt_attributes(route.provider_name,
                                                          route.upstream_model)})
            call = UpstreamCall(body=body, stream=req.stream, raw=raw, request_id=req.request_id,
                                headers=trace_headers(span), deadline=flow.deadline)
            provider = req.wire.provider if req.wire is not None else route.provider
            slot = self.fleet.slot(route) if self.fleet is not None else None
            try:
                if slot is None:
                    response = await provider.send(call)
                else:
                    response = await self._send_in_slot(flow, provider, call, slot)
            except UpstreamError as err:
                history = body.get("messages") or body.get("input")  # Responses: ``input``
                images = isinstance(history, list) and has_media_parts(history)
                verdict = classify(err.failure, has_images=images)
                attempt.finish(err.failure.status, str(verdict.value))
                span.set_attributes({"gateway.upstream.status": err.failure.status,
                                     "gateway.verdict": str(verdict.value)})
                if self.fleet is not None:
                    attempt.cooldown = self.fleet.failed(route, err.failure.status)
                    if attempt.cooldown:
                        span.set_attribute("gateway.deployment.cooldown", attempt.cooldown)
                        self._cooling(route, attempt.cooldown)
                span.set_status(Status(StatusCode.ERROR, err.failure.message[:200]))
                return err.failure, verdict
            attempt.finish(response.status, "ok")
            span.set_attribute("gateway.upstream.status", response.status)
            if self.fleet is not None:
                response = self.fleet.succeeded(route, time.monotonic() - attempt.started,
                                                response)
            return response

    @staticmethod
    async def _send_in_slot(flow: Flow, provider: Provider, call: UpstreamCall,
                            slot: asyncio.Semaphore) -> UpstreamResponse:
        """Send once the deployment has a free slot (its ``max_parallel_requests``), held
        until its answer begins, as LiteLLM's Router holds its semaphore; the wait is
        bounded by the request's deadline (then a 504-shaped transient failure)."""
        scope = asyncio.timeout(flow.remaining())
        try:
            async with scope:
                await slot.acquire()
        except TimeoutError:
            if not scope.expired():
                raise
            raise UpstreamError(UpstreamFailure(
                status=504, provider="gateway", type="timeout_error", code="deadline_exceeded",
                message=f"no request slot of deployment {flow.request.route.deployment_id!r} "
                        "(max_parallel_requests) came free within the request deadline"),
            ) from None
        try:
            return await provider.send(call)
        finally:
            slot.release()

    def _cooling(self, route: ModelRoute, seconds: float) -> None:
        """Count a cooldown and show it on the deployment's gauges (cooldown, circuit open)
        while it lasts."""
        self.metrics.inc("gateway_deployment_cooldowns_total", model=route.name,
                         deployment=route.litellm_model)
        self.metrics.set_deployment_cooldown(route.name, route.litellm_model, True)
        self.metrics.set_circuit_state(route.name, route.litellm_model, "open")
        asyncio.get_running_loop().call_later(seconds, self.cooldown_over, route)

    def cooldown_over(self, route: ModelRoute) -> None:
        """A cooldown's time is up: the gauges show the deployment's state now (half-open
        until its next answer, or open again if it was cooled down once more meanwhile)."""
        if self.fleet is None:
            return
        circuit = self.fleet.circuit(route)
        self.metrics.set_deployment_cooldown(route.name, route.litellm_model, circuit == "open")
        self.metrics.set_circuit_state(route.name, route.litellm_model, circuit)


    # -- the recall tool ------------------------------------------------------------------

    async def _answer_recalls(self, flow: Flow, body: dict[str, Any], span: Span) -> None:
        """When the answered body offered the recall tool: answer the model's recall calls
        and ask again (``RecallTool.answer``); ``flow.response`` becomes the answer the client
        gets, or ``flow.give_up`` says why there is none."""
        req = flow.request
        compactor = self.compactor
        if compactor is None or flow.response is None:
            return
        offer = self.recall.offered(req.route, req.body, body)
        if offer is None:
            return
        report = flow.recall = RecallReport()

        async def send(follow_up: dict[str, Any]) -> UpstreamResponse:
            outcome = await self._attempt(flow, AttemptPlan(number=report.rounds), follow_up,
                                          orjson.dumps(follow_up), kind="recall")
            if isinstance(outcome, tuple):
                raise UpstreamError(outcome[0])
            return outcome

        try:
            flow.response = await self.recall.answer(
                flow.response, body, offer, stream=req.stream, send=send,
                scope=lambda: compactor.recall_scope(req), deadline=flow.deadline,
                report=report)  # mid-stream calls land in the report: counted at the end
        except UpstreamError as err:
            flow.response = None
            flow.give_up = GiveUp("recall: the model was asked again after its recall calls "
                                  f"and the upstream refused ({err.failure.message[:200]})",
                                  err.failure)
        finally:
            for name, attributes in report.events:
                span.add_event(name, attributes)


def provider_truncates(req: ChatRequest) -> bool:
    """True for a native Responses request asking the provider to truncate what does not
    fit (``truncation: "auto"``): it goes as sent, never compacted before sending (a refusal
    still climbs the ladder)."""
    return (req.wire is not None and req.client_wire == "responses"
            and req.body.get("truncation") == "auto")


def drops_params(req: ChatRequest, config: GatewayConfig) -> bool:
    """True when a chat request to a deployment the gateway sends to itself may leave out
    a field the upstream refuses as unsupported: LiteLLM's ``drop_params``
    (``litellm_settings`` or the deployment's ``litellm_params``)."""
    if req.wire is not None or req.route.wire != "openai":
        return False
    own = req.route.entry.litellm_params.extras().get("drop_params")
    return bool(own) if isinstance(own, bool) else config.router.drop_params


# The chat body's output budget fields (``max_tokens`` and its newer name).
OUTPUT_BUDGET_FIELDS = ("max_tokens", "max_completion_tokens")


def lower_output_budget(req: ChatRequest, failure: UpstreamFailure) -> CompactionOutcome | None:
    """The overflow rung when the client's output budget alone overflowed the window (see
    ``recovery.output_budget``): the budget it set lowered in ``req``'s body to what the
    window leaves beside the prompt; None when that is not the case (then compact)."""
    fit = fit_output_budget(failure_texts(failure))
    if fit is None:
        return None
    wire = req.wire
    if wire is not None:
        return _lower_native_budget(wire, fit)
    asked = {name: value for name in OUTPUT_BUDGET_FIELDS
             if isinstance(value := req.body.get(name), int) and value > fit.lowered}
    if not asked:
        return None
    req.body = {**req.body, **dict.fromkeys(asked, fit.lowered)}
    return CompactionOutcome("output_lowered", fit.prompt + fit.budget, fit.prompt + fit.lowered)


def _lower_native_budget(wire: object, fit: OutputFit) -> CompactionOutcome | None:
    """:func:`lower_output_budget` on a native wire: the Messages ``max_tokens`` or the
    Responses ``max_output_tokens`` of the codec's body. An extended-thinking budget must
    stay below ``max_tokens``: it is lowered with it, or the rung is not taken when that
    leaves it under Anthropic's least (1,024)."""
    if not isinstance(wire, AnthropicCodec | ResponsesCodec):
        return None
    name = "max_tokens" if isinstance(wire, AnthropicCodec) else "max_output_tokens"
    body = wire.body
    asked = body.get(name)
    if not isinstance(asked, int) or asked <= fit.lowered:
        return None
    lowered: dict[str, Any] = {name: fit.lowered}
    thinking = body.get("thinking")
    if isinstance(wire, AnthropicCodec) and isinstance(thinking, dict):
        budget = thinking.get("budget_tokens")
        if isinstance(budget, int) and budget >= fit.lowered:
            if fit.lowered - 1 < 1024:
                return None
            lowered["thinking"] = {**thinking, "budget_tokens": fit.lowered - 1}
    wire.body = {**body, **lowered}
    return CompactionOutcome("output_lowered", fit.prompt + fit.budget, fit.prompt + fit.lowered)


def refusal_text(failure: UpstreamFailure) -> str:
    """Every string of a refusal, for a wire's strict rules to read what was refused."""
    return " | ".join(failure_texts(failure))


def as_chat(req: ChatRequest) -> ChatRequest:
    """A native request (Responses, Messages) as the Chat Completions request it translates
    to, for a deployment that speaks only chat; what reading its wire repaired goes with it."""
    assert req.wire is not None
    body = req.wire.to_chat()
    raw = exact_integers(req.raw, dumps_within_depth(body, "sent on as Chat Completions"))
    return replace(req, body=body, raw=raw,
                   messages=body["messages"], wire=None, known=None,
                   read_anomalies=(*req.read_anomalies, *req.wire.view.anomalies))


def upstream_body(req: ChatRequest, messages: list[Any], refusal: str | None = None,
                  ) -> tuple[dict[str, Any], tuple[Anomaly, ...]]:
    """The body to send: the client's fields, the upstream model, the given messages; and
    what a native wire's own rules repaired on it (``refusal``: see ``refusal_text``)."""
    if req.wire is not None:
        return req.wire.upstream_body(messages, refusal)
    body = dict(req.body)
    for name, value in req.route.defaults:  # the deployment's litellm_params defaults
        body.setdefault(name, value)
    for name in req.route.drop_fields:  # litellm_params.additional_drop_params
        body.pop(name, None)
    body["model"] = req.route.upstream_model
    body["messages"] = messages
    style = wire_style(req.route.litellm_model)
    if style == "anthropic":
        body = apply_anthropic_breakpoint(body)
    elif req.session_id and req.route.wire == "openai":
        body = apply_openai_cache_key(body, req.session_id)
    return body, ()
