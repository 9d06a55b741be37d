"""The fleet: every deployment of every model group, and the one object the pipeline asks
which deployment serves an attempt.

It owns the routes (one per ``model_list`` entry, plus wildcard routes built on first use),
the name resolver, the deployment table (cooldowns, in-flight, latency, usage) and, when
configured, the Redis counters that share rpm/tpm usage across replicas. Selection itself is
the pure :func:`gateway.router.selection.choose`.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections import defaultdict
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from gateway.compaction.budget import decide
from gateway.compaction.session_view import settings_for
from gateway.compaction.tokens import token_counter
from gateway.compaction.window import EffectiveWindows
from gateway.config import GatewayConfig, ModelEntry
from gateway.litellm_settings import CHAT_MODES, deployment_failure_policy
from gateway.providers.base import UpstreamResponse
from gateway.providers.capabilities import lookup_model
from gateway.providers.failure import UpstreamFailure
from gateway.providers.openai_compat import HttpPool
from gateway.recovery.fallback import NO_TAGGED_DEPLOYMENT, FallbackChains
from gateway.recovery.ladder import Ladder
from gateway.recovery.policy import RecoveryPolicy
from gateway.router.names import NameResolver, PrefixedChains, Resolved, Wildcard
from gateway.router.request_fields import RequestOptions
from gateway.router.selection import (
    UNKNOWN_TOKEN_PRICE,
    CircuitState,
    Deployment,
    DeploymentTable,
    FailurePolicy,
    Unavailable,
    Usage,
    choose,
    tagged,
)
from gateway.routing import ModelRoute, build_route, entry_notes

if TYPE_CHECKING:
    from gateway.router.redis_cooldowns import SharedCooldowns
    from gateway.router.redis_usage import RedisUsage

log = logging.getLogger("gateway.router")

# The window learned for a group from its overflow refusals, if any (WindowBook.learned).
Learned = Callable[[str], int | None]
_MAX_WILDCARD_ROUTES = 1024


def _number(value: Any) -> float | None:
    # A string is a number too: ``rpm: os.environ/AZURE_RPM`` resolves to "600" (the config
    # refuses a value that is not a number at all: gateway.config).
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def failure_policy(entry: ModelEntry) -> FailurePolicy | None:
    """The deployment's own ``cooldown_time`` / ``allowed_fails`` / ``allowed_fails_policy``
    (LiteLLM's per-deployment cooldown settings), or None when it sets none (the values
    were checked when the config was loaded)."""
    cooldown, allowed, by_kind = deployment_failure_policy(
        entry.litellm_params.extras(), entry.model_info.model_extra or {}, "")
    if cooldown is None and allowed is None and not by_kind:
        return None
    return FailurePolicy(cooldown, allowed, by_kind)


def deployment_of(entry: ModelEntry, deployment_id: str) -> Deployment:
    """The selector's view of an entry: ``rpm``/``tpm``/``weight``/``order`` from
    ``litellm_params`` or the entry itself, ``rpm``/``tpm`` from ``model_info`` too (LiteLLM
    reads them all, in this order)."""
    params = entry.litellm_params.extras()
    top = entry.model_extra or {}
    info = entry.model_info.model_extra or {}

    def pick(key: str, *, in_info: bool = False) -> float | None:
        for source in (params, top, info) if in_info else (params, top):
            value = _number(source.get(key))
            if value is not None:
                return value
        return None

    rpm, tpm, order = pick("rpm", in_info=True), pick("tpm", in_info=True), pick("order")
    tags = params.get("tags")
    return Deployment(
        id=deployment_id, group=entry.model_name, weight=pick("weight"),
        rpm=int(rpm) if rpm is not None else None, tpm=int(tpm) if tpm is not None else None,
        order=int(order) if order is not None else None, cost=token_price(entry),
        tags=tuple(str(t) for t in tags) if isinstance(tags, list) else None,
    )


def parallel_cap(entry: ModelEntry, default: int | None) -> int | None:
    """Requests the deployment takes at once: its ``litellm_params.max_parallel_requests``,
    else ``router_settings.default_max_parallel_requests`` (None: no cap)."""
    own = _number(entry.litellm_params.extras().get("max_parallel_requests"))
    cap = int(own) if own is not None else default
    return cap if cap is not None and cap > 0 else None


def token_price(entry: ModelEntry) -> float:
    """Input + output price per token, as LiteLLM's cost-based routing reads it: the
    deployment's own ``input_cost_per_token`` / ``output_cost_per_token``
    (``litellm_params``, then ``model_info``), else the bundled model map's for its
    ``base_model`` or model, else LiteLLM's price for an unknown model."""
    params = entry.litellm_params.extras()
    info = entry.model_info.model_extra or {}
    base = info.get("base_model")
    known = lookup_model(base if isinstance(base, str) and base
                         else entry.litellm_params.model) or {}
    total = 0.0
    for key in ("input_cost_per_token", "output_cost_per_token"):
        price = next((p for p in (_number(params.get(key)), _number(info.get(key)),
                                  _number(known.get(key))) if p is not None),
                     UNKNOWN_TOKEN_PRICE)
        total += price
    return total


def entry_mode(entry: ModelEntry) -> str:
    """``model_info.mode`` (LiteLLM's default is chat)."""
    mode = (entry.model_info.model_extra or {}).get("mode")
    return mode if isinstance(mode, str) and mode else "chat"


class _Tracked:
    """An answer whose end is reported to the fleet (in-flight counts for least-busy)."""

    def __init__(self, inner: UpstreamResponse, done: Callable[[], None]) -> None:
        self._inner = inner
        self._done: Callable[[], None] | None = done
        self.status = inner.status
        self.content_type = inner.content_type
        self.relay_headers = inner.relay_headers

    async def chunks(self) -> AsyncIterator[bytes]:
        """The inner answer's chunks."""
        async for chunk in self._inner.chunks():
            yield chunk

    async def aclose(self) -> None:
        """Close the inner answer and report it finished (once)."""
        try:
            await self._inner.aclose()
        finally:
            done, self._done = self._done, None
            if done is not None:
                done()


class Fleet:
    """Deployments by model group; picks one per attempt and learns from the outcome."""

    def __init__(
        self,
        config: GatewayConfig,
        pool: HttpPool,
        *,
        rng: random.Random | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.config = config
        self.pool = pool
        self.settings = config.router
        self.rng = rng or random.Random()
        self.clock = clock
        # Told when a deployment's circuit closes again (its first answer after a cooldown).
        self.on_circuit: Callable[[ModelRoute, CircuitState], None] | None = None
        self.groups: dict[str, list[ModelRoute]] = defaultdict(list)
        self.deployments: dict[str, Deployment] = {}
        # Deployments with a model_info.id, by that id: a fallback may name one.
        self.by_id: dict[str, ModelRoute] = {}
        self.modes: dict[str, str] = {}
        wildcards: list[Wildcard] = []
        counts: dict[str, int] = defaultdict(int)
        policies: dict[str, FailurePolicy] = {}
        # Wildcard entries by pattern: several entries of one pattern are deployments of
        # every name it serves, balanced and limited as a group's (as LiteLLM's pattern
        # router); each keeps its deployment id (and its rpm/tpm) across those names.
        self.wildcard_ids: dict[int, str] = {}
        # Deployments with a cap on requests sent at once (LiteLLM's max_parallel_requests):
        # one semaphore each, by deployment id.
        self.slots: dict[str, asyncio.Semaphore] = {}
        for index, entry in enumerate(config.model_list):
            if "*" in entry.model_name:
                wildcards.append(Wildcard(entry.model_name, entry.litellm_params.model, index))
                counts[entry.model_name] += 1
                explicit = (entry.model_info.model_extra or {}).get("id")
                n = counts[entry.model_name]
                dep_id = str(explicit) if explicit else (
                    entry.model_name if n == 1 else f"{entry.model_name}#{n}")
                self.wildcard_ids[index] = dep_id
                self.deployments[dep_id] = deployment_of(entry, dep_id)
                self._cap(dep_id, entry)
                policy = failure_policy(entry)
                if policy is not None:
                    policies[dep_id] = policy
                continue
            counts[entry.model_name] += 1
            explicit = (entry.model_info.model_extra or {}).get("id")
            dep_id = str(explicit) if explicit else f"{entry.model_name}#{counts[entry.model_name]}"
            built = build_route(entry, config, pool, deployment_id=dep_id)
            self.groups[entry.model_name].append(built)
            if explicit:
                self.by_id.setdefault(dep_id, replace(built, pinned=True))
            self.deployments[dep_id] = deployment_of(entry, dep_id)
            self._cap(dep_id, entry)
            policy = failure_policy(entry)
            if policy is not None:
                policies[dep_id] = policy
            self.modes.setdefault(entry.model_name, entry_mode(entry))
        self.wildcards = wildcards
        ignored, endpoints = entry_notes(config)
        if ignored:
            log.warning("ignoring litellm_params that OpenAI-compatible deployments do not "
                        "use: %s", ", ".join(ignored))
        for line in endpoints:
            log.info("no api_base: %s", line)
        aliases = {alias: group for alias, group, _hidden in self.settings.model_group_alias}
        self.hidden_aliases = {a for a, _g, hidden in self.settings.model_group_alias if hidden}
        self.resolver = NameResolver(set(self.groups), aliases, wildcards)
        self._wildcard_routes: dict[str, list[ModelRoute]] = {}
        self.table = DeploymentTable(allowed_fails=self.settings.allowed_fails,
                                     cooldown_time=self.settings.cooldown_time,
                                     cooldowns=not self.settings.disable_cooldowns,
                                     allowed_fails_by_kind=dict(
                                         self.settings.allowed_fails_policy),
                                     policies=policies)
        limited = any(d.rpm is not None or d.tpm is not None for d in self.deployments.values())
        url = self.settings.redis_url or config.sessions.redis_url
        self.shared: RedisUsage | None = None
        if url and (limited or self.settings.routing_strategy == "usage-based-routing"):
            from gateway.router.redis_usage import RedisUsage  # (Redis only when needed)

            self.shared = RedisUsage(url)
        self.cooldowns: SharedCooldowns | None = None
        if url and not self.settings.disable_cooldowns and any(
                len(routes) > 1 for routes in self.groups.values()):
            from gateway.router.redis_cooldowns import SharedCooldowns

            self.cooldowns = SharedCooldowns(url, clock)
        windows = {dep_id: route.capabilities.context_window
                   for dep_id, route in self.by_id.items()}
        windows.update({name: routes[0].capabilities.context_window
                        for name, routes in self.groups.items()})
        s = self.settings

        def by_group(pairs: tuple[tuple[str, tuple[str, ...]], ...],
                     ) -> tuple[tuple[str, tuple[str, ...]], ...]:
            # A chain written for an alias is the aliased group's (the ladder follows the
            # chains of the group a request resolved to).
            return tuple((aliases.get(source, source), targets) for source, targets in pairs)

        chains = FallbackChains.build(
            by_group(s.fallbacks), by_group(s.context_window_fallbacks),
            by_group(s.content_policy_fallbacks),
            default=s.default_fallbacks, max_fallbacks=s.max_fallbacks, windows=windows)
        self.chains = replace(chains, general=PrefixedChains(chains.general),
                              context_window=PrefixedChains(chains.context_window),
                              content_policy=PrefixedChains(chains.content_policy))
        # (the lookup of learned windows, the chains it was made for, the chains with them)
        self._learning: tuple[Learned, FallbackChains, FallbackChains] | None = None

    async def close(self) -> None:
        """Close the Redis connections, if any."""
        if self.shared is not None:
            await self.shared.close()
        if self.cooldowns is not None:
            await self.cooldowns.close()

    # --- names ---------------------------------------------------------------------------

    def resolve(self, name: str) -> ModelRoute | None:
        """A route serving ``name`` (its group's first deployment), or None."""
        found = self.resolver.resolve(name)
        if found is None:
            return None
        if found.wildcard is None:
            return self.groups[found.group][0]
        return self._wildcard_route(found)

    def _wildcard_route(self, found: Resolved) -> ModelRoute | None:
        routes = self._wildcard_routes.get(found.group)
        if routes is None:
            assert found.wildcard is not None
            if len(self._wildcard_routes) >= _MAX_WILDCARD_ROUTES:
                self._wildcard_routes.clear()
            routes = []
            for wildcard in self.wildcards:
                if wildcard.pattern != found.wildcard.pattern:
                    continue
                matched = wildcard.match(found.group)
                try:
                    routes.append(build_route(
                        self.config.model_list[wildcard.index], self.config, self.pool,
                        name=found.group,
                        model=wildcard.upstream_model(found.group, matched or ""),
                        deployment_id=self.wildcard_ids[wildcard.index]))
                except ValueError:  # e.g. a provider that needs an api_base the entry lacks
                    continue
            if not routes:
                return None
            self._wildcard_routes[found.group] = routes
        return routes[0]

    def _group(self, name: str) -> list[ModelRoute] | None:
        """The deployments serving the group ``name``: a model group's, or those of the
        wildcard entries serving that name (once it was resolved)."""
        return self.groups.get(name) or self._wildcard_routes.get(name)

    def is_chat(self, route: ModelRoute) -> bool:
        """False for entries whose ``model_info.mode`` is embedding, image, audio, ..."""
        return entry_mode(route.entry) in CHAT_MODES

    # --- selection -----------------------------------------------------------------------

    async def pick(
        self, route: ModelRoute, *, tokens: int = 0, exclude: frozenset[str] = frozenset(),
        tags: tuple[str, ...] = (),
    ) -> ModelRoute | UpstreamFailure:
        """The deployment of ``route``'s group for this attempt, or a 429-shaped failure when
        none is available (all cooling down or at their limits); with tag filtering on, a
        400-shaped one when the request's ``tags`` leave no deployment of the group."""
        routes = [route] if route.pinned else self._group(route.name)
        if self.settings.enable_tag_filtering and routes:
            routes = self._tag_allowed(routes, tags)
            if not routes:
                return UpstreamFailure(
                    status=400, provider="gateway", type="invalid_request_error",
                    code=NO_TAGGED_DEPLOYMENT,
                    message="Not allowed to access model due to tags configuration. Passed "
                            f"model={route.name} and tags={list(tags)}")
        if not routes or (len(routes) == 1 and not self._limited(routes[0])):
            chosen = routes[0] if routes else route
            self.table.started(chosen.deployment_id, tokens, self.clock())
            return chosen
        now = self.clock()
        deployments = [self.deployments[r.deployment_id] for r in routes]
        # LiteLLM's pre-call checks: a deployment whose window is smaller than the request
        # is passed over while one it fits is available.
        too_small = frozenset(r.deployment_id for r in routes
                              if 0 < r.capabilities.context_window < tokens)
        if too_small and len(too_small) < len(routes):
            exclude = exclude | too_small
        # A deployment at its max_parallel_requests is passed over while another of the
        # group has a free slot (the request would wait there while a sibling sits idle);
        # when every one is full, the request waits for the one picked.
        if self.slots:
            full = frozenset(r.deployment_id for r in routes if (
                s := self.slots.get(r.deployment_id)) is not None and s.locked())
            if full and not {r.deployment_id for r in routes} <= exclude | full:
                exclude = exclude | full
        if self.cooldowns is not None and len(routes) > 1:
            await self._other_replicas_cooldowns(route.name, routes, now)
        usage, minute_left = await self._usage(deployments, now)
        candidates = list(deployments)
        while True:
            picked = choose(self.settings.routing_strategy, candidates, self.table, usage, now,
                            self.rng, tokens=tokens, exclude=exclude, minute_left=minute_left)
            if isinstance(picked, Unavailable):
                return UpstreamFailure(
                    status=429, provider="gateway", message=picked.reason,
                    type="rate_limit_error", code="no_deployments_available",
                    retry_after=round(picked.retry_after, 3))
            # The shared counters are the authority: the read above only ranks. Reserving
            # checks and counts in one step, so replicas racing for a minute's last slot
            # cannot all pass; a deployment another replica filled meanwhile is skipped.
            reserved = None if self.shared is None else await self.shared.reserve(
                picked.id, picked.rpm, picked.tpm, tokens)
            # Redis unavailable: this process's own counts decide, read again now (requests
            # that waited on Redis together must not all pass on the count read before).
            if reserved is True or (reserved is None and picked.admits(
                    self.table.usage(picked.id, self.clock()), tokens)):
                break
            candidates.remove(picked)
            if not candidates:
                return UpstreamFailure(
                    status=429, provider="gateway", type="rate_limit_error",
                    message=f"no deployment of {route.name!r} is available (all cooling "
                            "down or at their rpm/tpm limit)",
                    code="no_deployments_available",
                    retry_after=round(self.shared.seconds_left() if reserved is False
                                      and self.shared is not None else 60.0 - now % 60.0, 3))
        # (counted in the minute it was checked in: ``now`` is from before the awaits, and a
        # minute that turned meanwhile would have reset the count the check just read)
        self.table.started(picked.id, tokens, self.clock())
        return routes[deployments.index(picked)]

    async def _other_replicas_cooldowns(self, group: str, routes: list[ModelRoute],
                                        now: float) -> None:
        """Cool down here what another replica cooled down (looked at once a second)."""
        assert self.cooldowns is not None
        found = await self.cooldowns.remaining(group, [r.deployment_id for r in routes])
        for route in routes:
            seconds = (found or {}).get(route.deployment_id)
            if seconds and self.table.cool(route.deployment_id, seconds, now):
                log.info("deployment %s of %s cooled down for %.3gs by another replica",
                         route.deployment_id, group, seconds)
                if self.on_circuit is not None:
                    self.on_circuit(route, "open")

    def _limited(self, route: ModelRoute) -> bool:
        dep = self.deployments.get(route.deployment_id)
        return dep is not None and (dep.rpm is not None or dep.tpm is not None)

    async def _usage(self, deployments: list[Deployment], now: float,
                     ) -> tuple[dict[str, Usage], float | None]:
        # The shared counters' minutes are wall-clock ones: a refusal's retry-after is
        # what is left of that minute, not of this process's clock's.
        if self.shared is not None:
            shared = await self.shared.read([d.id for d in deployments], now)
            if shared is not None:
                return shared, self.shared.seconds_left()
        return {d.id: self.table.usage(d.id, now) for d in deployments}, None

    def succeeded(self, route: ModelRoute, latency: float,
                  response: UpstreamResponse) -> UpstreamResponse:
        """Record an answer; returns it wrapped so its end is counted (least-busy)."""
        if self.table.succeeded(route.deployment_id, latency) and self.on_circuit is not None:
            self.on_circuit(route, "closed")
        if self.settings.routing_strategy != "least-busy":
            self.table.finished(route.deployment_id)
            return response
        return _Tracked(response, lambda: self.table.finished(route.deployment_id))

    def tagged_route(self, route: ModelRoute, tags: tuple[str, ...]) -> ModelRoute:
        """The first deployment of ``route``'s group the request's ``tags`` allow (``route``
        itself without tag filtering, or when none does: its pick then says so). For a
        request that cannot move between deployments once sent (a history held upstream)."""
        if not self.settings.enable_tag_filtering or route.pinned:
            return route
        allowed = self._tag_allowed(self._group(route.name) or [route], tags)
        return allowed[0] if allowed else route

    def _tag_allowed(self, routes: list[ModelRoute], tags: tuple[str, ...]
                     ) -> list[ModelRoute]:
        """The ``routes`` a request's ``tags`` may use, in their order."""
        allowed = {d.id for d in tagged([self.deployments[r.deployment_id] for r in routes],
                                        tags, self.settings.tag_filtering_match_any)}
        return [r for r in routes if r.deployment_id in allowed]

    def _cap(self, deployment_id: str, entry: ModelEntry) -> None:
        cap = parallel_cap(entry, self.settings.default_max_parallel_requests)
        if cap is not None:
            self.slots[deployment_id] = asyncio.Semaphore(cap)

    def slot(self, route: ModelRoute) -> asyncio.Semaphore | None:
        """The deployment's cap on requests sent at once, or None when it has none."""
        return self.slots.get(route.deployment_id) if self.slots else None

    def circuit(self, route: ModelRoute) -> CircuitState:
        """The deployment's circuit now: ``open`` (cooling down), ``half_open``, ``closed``."""
        return self.table.circuit(route.deployment_id, self.clock())

    def failed(self, route: ModelRoute, status: int) -> float:
        """Record a refusal; returns the cooldown it started in seconds (0.0 when none)."""
        self.table.finished(route.deployment_id)
        alone = len(self._group(route.name) or ()) <= 1
        cooldown = self.table.failed(route.deployment_id, status, self.clock(), alone=alone)
        if cooldown:
            log.warning("deployment %s of %s cooled down for %gs after HTTP %d",
                        route.deployment_id, route.name, cooldown, status)
            if self.cooldowns is not None:
                self.cooldowns.publish(route.deployment_id, cooldown)
        return cooldown

    # --- fallbacks -----------------------------------------------------------------------

    def ladder(self, route: ModelRoute, policy: RecoveryPolicy,
               options: RequestOptions, learned: Learned | None = None) -> Ladder:
        """The recovery ladder of one request: its policy with the request's own
        ``num_retries``/``timeout``, and the fallback chains (the request's ``fallbacks``
        replacing the group's general chain; with ``learned``, the windows learned from
        overflow refusals, context-window fallbacks compare those when smaller)."""
        if options.num_retries is not None:
            policy = replace(policy, max_transient_retries=options.num_retries)
        if options.timeout is not None:
            policy = replace(policy, deadline=min(policy.deadline, options.timeout))
        chains = self.chains
        if options.fallbacks is not None:
            chains = chains.with_request(route.name, options.fallbacks)
        if learned is not None:
            chains = (self._learning_chains(learned) if chains is self.chains
                      else replace(chains, windows=self._windows(learned)))
        return Ladder(policy, fallbacks=chains, group=route.name)

    def _learning_chains(self, learned: Learned) -> FallbackChains:
        """The configured chains comparing the windows ``learned`` lowers. Built once per
        lookup: the windows are read live, so one object serves every request."""
        cached = self._learning
        if cached is not None and cached[0] == learned and cached[1] is self.chains:
            return cached[2]
        chains = replace(self.chains, windows=self._windows(learned))
        self._learning = (learned, self.chains, chains)
        return chains

    def _windows(self, learned: Learned) -> Mapping[str, int]:
        """The chains' windows (by group, or deployment id) lowered to the learned ones,
        live: a window learned during a request counts for its next rung (windows are
        learned per group: a deployment named by its id has its group's)."""
        def of(name: str) -> int | None:
            pinned = self.by_id.get(name)
            return learned(pinned.name if pinned is not None and name not in self.groups
                           else name)

        return EffectiveWindows(self.chains.windows, of)

    def deployments_of(self, name: str) -> list[ModelRoute]:
        """The deployments a fallback target names: a model group's, or the one deployment
        of that ``model_info.id`` (none when it does not resolve)."""
        target = self._fallback_target(name)
        if target is None:
            return []
        return [target] if target.pinned else self._group(target.name) or [target]

    def others(self, route: ModelRoute, speaks: Callable[[ModelRoute], bool]) -> frozenset[str]:
        """The deployment ids of ``route``'s group that ``speaks`` says no to (a native
        request never goes to them)."""
        return frozenset(r.deployment_id for r in self._group(route.name) or ()
                         if not speaks(r))

    def fallback_route(self, name: str, current: ModelRoute) -> ModelRoute:
        """The route of fallback ``name``: a model group, or one deployment named by its
        ``model_info.id`` (as LiteLLM); ``current`` when it no longer resolves."""
        return self._fallback_target(name) or current

    def _fallback_target(self, name: str) -> ModelRoute | None:
        return self.resolve(name) or self.by_id.get(name)

    async def fit_window(self, route: ModelRoute, req: Any,
                         learned: Learned | None = None) -> ModelRoute:
        """Before compaction: when the request would not fit ``route``'s window but fits
        another deployment of its group with a larger one, or else a context-window
        fallback, that one serves it (nothing is summarized). Cheap when the request is far
        below the window (bytes bound tokens). ``learned``: the windows learned from
        overflow refusals (by group), which win over the configured ones when smaller."""
        def size(r: ModelRoute) -> int:
            configured = r.capabilities.context_window
            found = learned(r.name) if learned is not None else None
            return configured if found is None else min(configured, found)

        window = size(route)
        chains = self._learning_chains(learned) if learned is not None else self.chains
        chain = chains.chain(route.name, "context_window") if chains else ()
        # A deployment of the same group with a larger window comes first (LiteLLM's
        # pre-call checks pass over the deployments a request does not fit).
        # (a window learned for the group lowers the route's own, not its siblings': one
        # deployment's refusal says nothing of a larger one)
        larger = sorted((r for r in self.groups.get(route.name, ()) if not route.pinned
                         and r.deployment_id != route.deployment_id
                         and r.capabilities.context_window > window),
                        key=lambda r: r.capabilities.context_window)
        if not (chain or larger) or window <= 0:
            return route
        settings = settings_for(self.config, route)
        if len(req.raw) < window * settings.trigger_ratio:
            return route
        tokens = await asyncio.to_thread(token_counter(route.upstream_model), req.messages)
        if decide(tokens, window, settings) != "block":
            return route
        for sibling in larger:
            if decide(tokens, sibling.capabilities.context_window,
                      settings_for(self.config, sibling)) != "block":
                return sibling
        for name in chain:
            target = self._fallback_target(name)
            if target is None or size(target) <= 0:
                continue
            if decide(tokens, size(target), settings_for(self.config, target)) != "block":
                return target
        return route

    def health(self) -> list[dict[str, Any]]:
        """Every deployment with its cooldown state (no upstream call is made)."""
        now = self.clock()
        out = []
        for group, routes in self.groups.items():
            for route in routes:
                cooled = self.table.cooled_for(route.deployment_id, now)
                out.append({"model": group, "deployment": route.deployment_id,
                            "provider": route.provider_name, "mode": self.modes[group],
                            "healthy": cooled == 0.0, "cooldown_remaining": round(cooled, 3),
                            "circuit": self.table.circuit(route.deployment_id, now)})
        return out
