"""The chat pipeline: project, (re)use compactions, forward, and climb the recovery ladder.

The pure pieces (projection, classifier, ladder state machine, compaction shape) decide; this
module only runs them in order and does the I/O between them.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field, replace
from typing import Any, NoReturn, Protocol

import orjson
from opentelemetry.trace import Status, StatusCode, Tracer

from gateway.config import GatewayConfig
from gateway.projection import project, project_strict
from gateway.projection.anomalies import Message, Projection
from gateway.projection.media import has_image_parts
from gateway.providers.base import UpstreamCall, UpstreamError, UpstreamResponse
from gateway.providers.errors import openai_error_envelope
from gateway.providers.failure import UpstreamFailure
from gateway.providers.openai_compat import HttpPool, relayed_failure_headers
from gateway.providers.prompt_cache import (
    apply_anthropic_breakpoint,
    apply_openai_cache_key,
    prefix_fingerprints,
    wire_style,
)
from gateway.recovery.classifier import Verdict, classify
from gateway.recovery.ladder import AttemptPlan, GiveUp, Ladder
from gateway.recovery.media_step import degrade_request_media
from gateway.recovery.settings import RouteRecovery, route_recovery
from gateway.router.fleet import Fleet
from gateway.router.request_fields import NO_OPTIONS, RequestOptions
from gateway.routing import ModelRoute
from gateway.server.errors import ClientError
from gateway.telemetry.metrics import Metrics
from gateway.telemetry.repairs import RepairReporter, repairs_header


@dataclass(slots=True)
class ChatRequest:
    """One validated client request."""

    body: dict[str, Any]
    raw: bytes
    messages: list[Message]
    route: ModelRoute
    stream: bool
    request_id: str
    session_id: str | None = None
    owner: str | None = None
    options: RequestOptions = NO_OPTIONS  # LiteLLM-only fields the client sent


@dataclass(slots=True)
class ChatResult:
    """A successful upstream answer and the gateway headers that describe it."""

    response: UpstreamResponse
    headers: dict[str, str]


class PipelineFailure(Exception):
    """The ladder gave up: the provider's status and error, with what the gateway tried."""

    def __init__(self, status: int, body: dict[str, Any], headers: dict[str, str]) -> None:
        super().__init__(status)
        self.status = status
        self.body = body
        self.headers = headers


@dataclass(frozen=True, slots=True)
class PreparedHistory:
    """The history to send. Its first ``frozen`` messages are a stored compaction that is
    sent byte-for-byte as stored (the default projection leaves it alone)."""

    messages: list[Message]
    frozen: int = 0


class Compactor(Protocol):
    """The compaction service as the pipeline sees it (see gateway.compaction.service)."""

    async def prepare(self, req: ChatRequest, headers: dict[str, str]) -> PreparedHistory:
        """The history to send: stored compactions applied, compacted first when blocking."""
        ...

    async def on_overflow(
        self, req: ChatRequest, history: list[Message], headers: dict[str, str]
    ) -> PreparedHistory | None:
        """A compacted history after a provider overflow, or None when it cannot help."""
        ...

    async def read_archive(
        self, session_id: str, first: int, last: int, owner: str | None
    ) -> list[dict[str, Any]]:
        """Archived pre-compaction messages (raises ClientError when not allowed)."""
        ...

    async def close(self) -> None:
        """Release stores."""
        ...


def _client_error_object(failure: UpstreamFailure) -> dict[str, Any]:
    """The provider's own OpenAI-style error object when it sent one, else one built from it."""
    try:
        parsed = orjson.loads(failure.body) if failure.body else None
    except orjson.JSONDecodeError:
        parsed = None
    if isinstance(parsed, dict) and isinstance(parsed.get("error"), dict):
        err = parsed["error"]
        if isinstance(err.get("message"), str) and "type" in err:
            return {"error": {"param": None, "code": None, **err}}
    return openai_error_envelope(failure)


@dataclass(slots=True)
class _Attempts:
    """What was sent, for headers, spans and the give-up body (the ladder knows the steps)."""

    ladder: Ladder
    records: list[dict[str, Any]] = field(default_factory=list)
    route: ModelRoute | None = None  # the deployment of the last attempt
    secrets: set[str] = field(default_factory=set)  # upstream keys of every route tried
    before: str = ""  # a step taken before the first attempt (a context-window fallback)

    def headers(self) -> dict[str, str]:
        out = {"x-gateway-attempts": str(len(self.records))}
        steps = ",".join(filter(None, (self.before, self.ladder.header_value())))
        if steps:
            out["x-gateway-recovery"] = steps
        if self.route is not None:
            out["x-gateway-model-used"] = self.route.name
            if self.route.deployment_id:
                out["x-gateway-deployment"] = self.route.deployment_id
        return out


class ChatPipeline:
    """Runs one chat request end to end, up to the first byte of the answer."""

    def __init__(
        self,
        config: GatewayConfig,
        routes: dict[str, ModelRoute],
        tracer: Tracer,
        pool: HttpPool,
    ) -> None:
        self.config = config
        self.routes = routes
        self.tracer = tracer
        self.pool = pool
        self.reporter = RepairReporter()
        self.compactor: Compactor | None = None
        self._recovery: dict[str, RouteRecovery] = {}
        self._strict_compacted: set[str] = set()  # routes that refuse the compacted shape
        self.metrics = Metrics()
        self.fleet: Fleet | None = None  # deployments, cooldowns, fallbacks (set by the app)

    async def start(self) -> None:
        """Open the compaction service (session store, archive) when configured."""
        if self.config.compaction.enabled:
            from gateway.compaction.service import CompactionService

            self.compactor = await CompactionService.open(self.config, self, self.tracer)

    async def close(self) -> None:
        """Close stores."""
        if self.compactor is not None:
            await self.compactor.close()

    async def read_archive(
        self, session_id: str, first: int, last: int, *, owner: str | None
    ) -> list[dict[str, Any]]:
        """Serve the archive endpoint."""
        if self.compactor is None:
            raise ClientError(404, "session archives are not enabled", code="not_found")
        return await self.compactor.read_archive(session_id, first, last, owner)

    def upstream_body(self, req: ChatRequest, messages: list[Message]) -> dict[str, Any]:
        """The body to send: the client's fields, the upstream model, the given messages."""
        body = dict(req.body)
        for name in req.route.drop_fields:
            body.pop(name, None)
        body["model"] = req.route.upstream_model
        body["messages"] = messages
        style = wire_style(req.route.litellm_model)
        if style == "anthropic":
            body = apply_anthropic_breakpoint(body)
        elif req.session_id and req.route.wire == "openai":
            body = apply_openai_cache_key(body, req.session_id)
        return body

    async def run(self, req: ChatRequest) -> ChatResult:
        """Send the request, recovering what can be recovered. Raises PipelineFailure."""
        route = req.route
        with self.tracer.start_as_current_span("gateway.chat") as span:
            if span.is_recording():
                system_hash, tools_hash = prefix_fingerprints(req.body)
                span.set_attributes({
                    "gateway.request_id": req.request_id,
                    "gateway.model": route.name,
                    "gateway.upstream_model": route.upstream_model,
                    "gateway.provider": route.provider_name,
                    "gateway.stream": req.stream,
                    "gateway.messages": len(req.messages),
                    "gateway.prompt.system_hash": system_hash,
                    "gateway.prompt.tools_hash": tools_hash,
                })
            headers: dict[str, str] = {}
            try:
                if self.fleet is not None:
                    # A larger context-window fallback loses nothing; a summary does.
                    req.route = await self.fleet.fit_window(req.route, req, headers)
                history = PreparedHistory(req.messages)
                if self.compactor is not None:
                    history = await self.compactor.prepare(req, headers)
                result = await self._climb(req, history, headers, span)
            except PipelineFailure as failed:
                self._count(req, failed.status, failed.headers)
                raise
            self._count(req, result.response.status, result.headers)
            span.set_attribute("gateway.attempts", int(result.headers["x-gateway-attempts"]))
            return result

    def _project(self, history: PreparedHistory, structure: str) -> Projection:
        messages = history.messages
        if not self.config.repair.enabled:
            return Projection(messages)
        if structure == "strict":
            # Strict upstreams may refuse the compacted shape's consecutive user messages.
            return project_strict(messages)
        if not history.frozen:
            return project(messages)
        tail = project(messages[history.frozen:])
        return Projection(messages[: history.frozen] + tail.messages, tail.anomalies)

    async def _climb(
        self, req: ChatRequest, history: PreparedHistory, headers: dict[str, str], span: Any
    ) -> ChatResult:
        route = req.route
        settings = self._route_recovery(route)
        fleet = self.fleet
        ladder = fleet.ladder(route, settings.policy, req.options) if fleet is not None \
            else Ladder(settings.policy)
        built: dict[tuple[Any, ...], tuple[Projection, dict[str, Any], bytes]] = {}
        failed: set[str] = set()  # deployments that refused this request
        generation = 0  # bumped when compaction replaces the history
        plan: AttemptPlan | GiveUp = ladder.first()
        attempts = _Attempts(ladder)
        if headers.pop("x-gateway-context-fallback", None):
            attempts.before = "fallback"
        started = time.monotonic()
        last_raw: bytes | None = None
        failure: UpstreamFailure | None = None
        verdict = Verdict.FATAL
        while not isinstance(plan, GiveUp):
            if plan.model is not None and plan.model != req.route.name and fleet is not None:
                req.route = route = fleet.fallback_route(plan.model, req.route)
                settings = self._route_recovery(route)
                self.metrics.inc("gateway_fallbacks_total", model=route.name)
            if plan.step == "compact":
                assert failure is not None
                compacted = None
                if self.compactor is not None:
                    compacted = await self.compactor.on_overflow(req, history.messages, headers)
                if compacted is None:
                    why = headers.get("x-gateway-compaction-failed")
                    plan = GiveUp("the context overflowed and compaction could not reduce it"
                                  + (f" ({why})" if why else ""), failure)
                    break
                history = compacted
                generation += 1
            if (history.frozen and plan.structure == "default"
                    and route.name in self._strict_compacted):
                # This upstream refused the compacted shape's consecutive user messages
                # before: go strict at once instead of paying a refusal on every turn.
                plan = replace(plan, structure="strict")
            if fleet is not None:
                picked = await fleet.pick(route, tokens=len(req.raw) // 4,
                                          exclude=frozenset(failed))
                if isinstance(picked, UpstreamFailure):  # every deployment is resting
                    attempts.records.append({"number": plan.number, "step": plan.step,
                                             "model": route.name, "status": picked.status,
                                             "verdict": "transient", "sent": False})
                    failure, verdict = picked, Verdict.TRANSIENT
                    plan = ladder.after_failure(plan, failure, verdict,
                                                time.monotonic() - started)
                    continue
                req.route = picked
            key = (generation, plan.structure, plan.media, req.route.upstream_model,
                   req.route.litellm_model, req.route.wire, req.route.drop_fields)
            if key not in built:
                # Built once per shape: a plain retry resends the same bytes without
                # projecting, re-fetching or re-encoding anything again.
                built[key] = await self._build(req, history, plan, settings)
            projection, body, raw = built[key]
            if plan.step not in (None, "retry", "fallback") and raw == last_raw:
                # This step changes nothing: skip to the next one instead of resending.
                assert failure is not None
                plan = ladder.after_unchanged(plan, failure, verdict, time.monotonic() - started)
                continue
            if plan.delay > 0 and not (failed and req.route.deployment_id not in failed):
                # (a retry that moved to another deployment does not wait for the first)
                await asyncio.sleep(plan.delay)
            last_raw = raw
            outcome = await self._attempt(req, plan, body, raw, attempts)
            if isinstance(outcome, tuple):
                failure, verdict = outcome
                failed.add(req.route.deployment_id)
                plan = ladder.after_failure(plan, failure, verdict, time.monotonic() - started)
                continue
            if history.frozen and plan.structure == "strict":
                self._strict_compacted.add(route.name)
            self.reporter.report(projection, span, session=req.session_id,
                                 request_id=req.request_id, model=route.name,
                                 strict=plan.structure == "strict")
            if projection.repaired:
                headers["x-gateway-repairs"] = repairs_header(projection.counts())
            headers.update(attempts.headers())
            return ChatResult(outcome, headers)
        self._give_up(req, plan, attempts, headers)

    def _count(self, req: ChatRequest, status: int, headers: dict[str, str]) -> None:
        m = self.metrics
        m.inc("gateway_requests_total", model=req.route.name, status=str(status))
        for kind_count in filter(None, headers.get("x-gateway-repairs", "").split(",")):
            kind, _, count = kind_count.partition("=")
            m.inc("gateway_repairs_total", int(count), kind=kind)
        for step in filter(None, headers.get("x-gateway-recovery", "").split(",")):
            m.inc("gateway_recovery_steps_total", step=step)
        compaction = headers.get("x-gateway-compaction")
        if compaction:
            m.inc("gateway_compactions_total", how=compaction.split(";")[0])

    async def _build(
        self, req: ChatRequest, history: PreparedHistory, plan: AttemptPlan,
        settings: RouteRecovery,
    ) -> tuple[Projection, dict[str, Any], bytes]:
        """The projection, upstream body and its bytes for one plan."""
        projection = self._project(history, plan.structure)
        messages = projection.messages
        if plan.media != "original":
            degraded = await degrade_request_media(
                messages, settings.media_limits, plan.media, self.pool.session,
                allow_private_addresses=settings.fetch_private)
            messages = degraded.messages
        body = self.upstream_body(req, messages)
        return projection, body, orjson.dumps(body)

    def _route_recovery(self, route: ModelRoute) -> RouteRecovery:
        settings = self._recovery.get(route.name)
        if settings is None:
            settings = self._recovery[route.name] = route_recovery(self.config, route)
        return settings

    async def _attempt(
        self, req: ChatRequest, plan: AttemptPlan, body: dict[str, Any], raw: bytes,
        attempts: _Attempts,
    ) -> UpstreamResponse | tuple[UpstreamFailure, Verdict]:
        """One upstream call, in its own span: the response, or the failure and verdict."""
        route = req.route
        record: dict[str, Any] = {"number": plan.number, "step": plan.step,
                                  "structure": plan.structure, "media": plan.media,
                                  "model": route.name, "deployment": route.deployment_id}
        attempts.records.append(record)
        attempts.route = route
        if route.entry.litellm_params.api_key:
            attempts.secrets.add(route.entry.litellm_params.api_key)
        with self.tracer.start_as_current_span("gateway.attempt") as span:
            span.set_attributes({"gateway.attempt": plan.number,
                                 "gateway.policy.structure": plan.structure,
                                 "gateway.policy.media": plan.media,
                                 "gateway.step": plan.step or "initial",
                                 "gateway.model": route.name,
                                 "gateway.deployment": route.deployment_id})
            call = UpstreamCall(body=body, stream=req.stream, raw=raw, request_id=req.request_id)
            sent = time.monotonic()
            try:
                response = await route.provider.send(call)
            except UpstreamError as err:
                verdict = classify(err.failure, has_images=has_image_parts(body["messages"]))
                record.update(status=err.failure.status, verdict=str(verdict.value))
                self.metrics.inc("gateway_upstream_attempts_total", model=route.name,
                                 outcome=str(verdict.value))
                span.set_attributes({"gateway.upstream.status": err.failure.status,
                                     "gateway.verdict": str(verdict.value)})
                if self.fleet is not None:
                    cooldown = self.fleet.failed(route, err.failure.status)
                    if cooldown:
                        record["cooldown"] = cooldown
                        span.set_attribute("gateway.deployment.cooldown", cooldown)
                        self.metrics.inc("gateway_deployment_cooldowns_total", model=route.name,
                                         deployment=route.deployment_id)
                span.set_status(Status(StatusCode.ERROR, err.failure.message[:200]))
                return err.failure, verdict
            span.set_attribute("gateway.upstream.status", response.status)
            record["status"] = response.status
            self.metrics.inc("gateway_upstream_attempts_total", model=route.name,
                             outcome="ok")
            if self.fleet is not None:
                self.metrics.inc("gateway_deployment_answers_total", model=route.name,
                                 deployment=route.deployment_id)
                response = self.fleet.succeeded(route, time.monotonic() - sent, response)
            return response

    def _give_up(
        self, req: ChatRequest, give_up: GiveUp, attempts: _Attempts, headers: dict[str, str]
    ) -> NoReturn:
        failure = give_up.failure
        body = _client_error_object(failure)
        body["gateway"] = {"attempts": attempts.records, "gave_up": give_up.reason,
                           "request_id": req.request_id}
        for secret in attempts.secrets | {req.route.entry.litellm_params.api_key or ""}:
            if secret and len(secret) >= 8:
                # A provider may echo the key it was given; it must never reach the client.
                raw = orjson.dumps(body)
                if secret.encode() in raw:
                    body = orjson.loads(raw.replace(secret.encode(), b"***"))
        out = dict(relayed_failure_headers(failure.headers))
        out.update(headers)
        out.update(attempts.headers())
        if failure.retry_after is not None:
            out["Retry-After"] = str(max(1, round(failure.retry_after)))
        raise PipelineFailure(failure.status, body, out)

