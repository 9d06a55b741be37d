"""Choosing a deployment of a model group: routing strategies, cooldowns, rpm/tpm limits.

Pure: no I/O, no clock, no global randomness. The caller passes ``now`` (monotonic seconds),
the usage it knows (this process's, or shared counters read from Redis) and a
``random.Random``. LiteLLM's semantics:

- ``simple-shuffle``: random, weighted by ``weight``, else by ``rpm``, else by ``tpm``;
- ``least-busy``: fewest requests in flight;
- ``latency-based-routing``: lowest average time to the first byte (untried first);
- ``usage-based-routing``: fewest tokens used this minute;
- ``cost-based-routing``: lowest price per token (input + output; a deployment whose price
  is unknown counts as LiteLLM's $5 + $5).

A deployment is skipped while cooled down or when it reached its ``rpm``/``tpm`` for the
current minute. It is cooled down for ``cooldown_time`` after a ``429`` (or an auth / not
found refusal), or once its failures within a minute exceed ``allowed_fails``; a group with
a single deployment is never cooled down (there would be nothing left to route to). Seen as a
circuit breaker, a deployment is open while cooling down, half-open from then until its next
answer, closed otherwise (``DeploymentTable.circuit``).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

CircuitState = Literal["closed", "half_open", "open"]

# Statuses that cool a deployment down at once (LiteLLM: rate limited, bad key, no such model).
_IMMEDIATE = frozenset({401, 403, 404, 429})
# LiteLLM's AllowedFailsPolicy kinds, by the status a failure has here.
FailKind = Literal["authentication", "timeout", "rate_limit", "server_error"]


def fail_kind(status: int) -> FailKind | None:
    """The kind of a deployment's failure (None for one no policy names: 402, 404)."""
    if status in (401, 403):
        return "authentication"
    if status in (408, 504):
        return "timeout"
    if status == 429:
        return "rate_limit"
    return "server_error" if status >= 500 else None


# Other 4xx are the request's fault (a bad parameter, a body too large), not the
# deployment's: as in LiteLLM, they neither count toward allowed_fails nor cool down, or a
# client sending bad requests would take healthy deployments out of rotation.
_COUNTED_4XX = _IMMEDIATE | {402, 408}
_LATENCY_SAMPLES = 10


@dataclass(frozen=True, slots=True)
class Deployment:
    """One ``model_list`` entry of a model group, as the selector sees it."""

    id: str
    group: str
    weight: float | None = None
    rpm: int | None = None
    tpm: int | None = None
    order: int | None = None
    cost: float | None = None  # input + output price per token (cost-based-routing)
    tags: tuple[str, ...] | None = None  # litellm_params.tags (tag-based routing)

    def admits(self, used: Usage, tokens: int) -> bool:
        """Whether a request of ``tokens`` tokens stays within ``rpm`` / ``tpm`` with
        ``used`` counted this minute (a first request of any size passes a tpm, as
        LiteLLM's: an oversized request is not refused forever)."""
        return not ((self.rpm is not None and used.requests >= self.rpm) or (
            self.tpm is not None and used.tokens > 0 and used.tokens + tokens > self.tpm))


def tagged(deployments: list[Deployment], request_tags: tuple[str, ...],
           match_any: bool = True) -> list[Deployment]:
    """The deployments a request's tags may use (LiteLLM's tag-based routing, with
    ``enable_tag_filtering``): with tags, those whose ``tags`` share one with them
    (``match_any``) or hold them all, else those tagged ``default``; without, those tagged
    ``default`` when any is, else every one. Empty: no deployment may serve it."""
    defaults = [d for d in deployments if d.tags and "default" in d.tags]
    if not request_tags:
        return defaults or list(deployments)
    wanted = set(request_tags)
    matching = [d for d in deployments if d.tags and (
        not wanted.isdisjoint(d.tags) if match_any else wanted.issubset(d.tags))]
    return matching or defaults


@dataclass(frozen=True, slots=True)
class FailurePolicy:
    """A deployment's own cooldown settings (LiteLLM's ``cooldown_time`` in ``model_info`` or
    ``litellm_params``, ``model_info.allowed_fails`` and ``model_info.allowed_fails_policy``),
    each replacing the router's for that deployment; None where it sets none."""

    cooldown_time: float | None = None  # 0: never cooled down
    allowed_fails: int | None = None
    allowed_fails_by_kind: tuple[tuple[str, int], ...] = ()


# LiteLLM's price per token (input, and output) of a deployment it cannot price.
UNKNOWN_TOKEN_PRICE = 5.0


@dataclass(frozen=True, slots=True)
class Usage:
    """A deployment's requests and tokens in the current minute."""

    requests: int = 0
    tokens: int = 0


@dataclass(slots=True)
class _Health:
    fails: list[float] = field(default_factory=list)
    kind_fails: dict[str, list[float]] = field(default_factory=dict)
    cooled_until: float = 0.0
    probing: bool = False  # cooled down since its last answer: half-open once the time is up
    in_flight: int = 0
    latencies: list[float] = field(default_factory=list)
    minute: int = -1
    requests: int = 0
    tokens: int = 0


@dataclass(frozen=True, slots=True)
class Unavailable:
    """No deployment of the group can take the request now; ``retry_after`` in seconds."""

    reason: str
    retry_after: float


_NO_POLICY = FailurePolicy()


class DeploymentTable:
    """Cooldowns, in-flight counts, latencies and per-minute usage of every deployment."""

    def __init__(self, *, allowed_fails: int = 3, cooldown_time: float = 5.0,
                 cooldowns: bool = True,
                 allowed_fails_by_kind: Mapping[str, int] | None = None,
                 policies: Mapping[str, FailurePolicy] | None = None) -> None:
        self.allowed_fails = allowed_fails
        # Deployments with their own cooldown settings, by deployment id.
        self.policies = dict(policies or {})
        # LiteLLM's allowed_fails_policy: failures of one kind allowed in a minute before a
        # cooldown, replacing allowed_fails (and the at-once cooldown) for that kind.
        self.allowed_fails_by_kind = dict(allowed_fails_by_kind or {})
        self.cooldown_time = cooldown_time
        self.cooldowns = cooldowns
        self._health: dict[str, _Health] = {}

    def _get(self, deployment_id: str) -> _Health:
        health = self._health.get(deployment_id)
        if health is None:
            health = self._health[deployment_id] = _Health()
        return health

    # --- what happened ---------------------------------------------------------------

    def started(self, deployment_id: str, tokens: int, now: float) -> None:
        """A request was sent to the deployment (counts toward rpm/tpm and in-flight)."""
        health = self._get(deployment_id)
        self._roll(health, now)
        health.requests += 1
        health.tokens += tokens
        health.in_flight += 1

    def finished(self, deployment_id: str) -> None:
        """The request's answer was relayed (or it failed): no longer in flight."""
        health = self._get(deployment_id)
        health.in_flight = max(0, health.in_flight - 1)

    def succeeded(self, deployment_id: str, latency: float) -> bool:
        """An answer arrived after ``latency`` seconds (time to the first byte); True when it
        closed the deployment's circuit (its first answer since a cooldown)."""
        health = self._get(deployment_id)
        samples = health.latencies
        samples.append(latency)
        del samples[:-_LATENCY_SAMPLES]
        closed, health.probing = health.probing, False
        return closed

    def failed(self, deployment_id: str, status: int, now: float, *, alone: bool) -> float:
        """Record a failure; returns the cooldown it started (0.0 when none). ``alone``: the
        deployment is its group's only one, which is never cooled down."""
        if 400 <= status < 500 and status not in _COUNTED_4XX:
            return 0.0
        health = self._get(deployment_id)
        kind = fail_kind(status)
        policy = self.policies.get(deployment_id, _NO_POLICY)
        by_kind = {**self.allowed_fails_by_kind, **dict(policy.allowed_fails_by_kind)}
        own = kind is not None and kind in by_kind
        # A kind with its own allowance is counted apart (a policy tolerating 429s does not
        # let them add up toward the general allowed_fails).
        fails = health.kind_fails.setdefault(str(kind), []) if own else health.fails
        fails[:] = [t for t in fails if now - t < 60.0]
        fails.append(now)
        seconds = self.cooldown_time if policy.cooldown_time is None else policy.cooldown_time
        if alone or not self.cooldowns or seconds <= 0:
            return 0.0
        # A deployment's own allowed_fails counts every kind, a 429 too (as LiteLLM's).
        counted = own or policy.allowed_fails is not None
        allowed = by_kind[str(kind)] if own else (
            self.allowed_fails if policy.allowed_fails is None else policy.allowed_fails)
        if len(fails) <= allowed and (counted or status not in _IMMEDIATE):
            return 0.0
        health.kind_fails.clear()
        health.cooled_until = now + seconds
        health.probing = True
        health.fails.clear()
        return seconds

    def cool(self, deployment_id: str, seconds: float, now: float) -> bool:
        """Cool the deployment down for ``seconds`` (another replica's cooldown) unless it
        already is for as long; True when this started or lengthened one."""
        health = self._get(deployment_id)
        until = now + seconds
        if not self.cooldowns or health.cooled_until >= until:
            return False
        started = health.cooled_until <= now
        health.cooled_until = until
        health.probing = True
        return started

    # --- what is known ---------------------------------------------------------------

    def cooled_for(self, deployment_id: str, now: float) -> float:
        """Seconds of cooldown left (0.0 when available)."""
        health = self._health.get(deployment_id)
        return max(0.0, health.cooled_until - now) if health is not None else 0.0

    def circuit(self, deployment_id: str, now: float) -> CircuitState:
        """``open`` while cooling down, ``half_open`` from the cooldown's end to the next
        answer (the deployment is back in rotation on trial), else ``closed``."""
        health = self._health.get(deployment_id)
        if health is None or not health.probing:
            return "closed"
        return "open" if health.cooled_until > now else "half_open"

    def usage(self, deployment_id: str, now: float) -> Usage:
        """This process's usage of the deployment in the current minute."""
        health = self._health.get(deployment_id)
        if health is None:
            return Usage()
        self._roll(health, now)
        return Usage(health.requests, health.tokens)

    def in_flight(self, deployment_id: str) -> int:
        """Requests sent to the deployment whose answers are not finished."""
        health = self._health.get(deployment_id)
        return health.in_flight if health is not None else 0

    def latency(self, deployment_id: str) -> float | None:
        """Average time to the first byte of the last answers (None when untried)."""
        health = self._health.get(deployment_id)
        if health is None or not health.latencies:
            return None
        return sum(health.latencies) / len(health.latencies)

    @staticmethod
    def _roll(health: _Health, now: float) -> None:
        minute = int(now // 60)
        if minute != health.minute:
            health.minute, health.requests, health.tokens = minute, 0, 0


def choose(
    strategy: str,
    deployments: Sequence[Deployment],
    table: DeploymentTable,
    usage: dict[str, Usage],
    now: float,
    rng: random.Random,
    *,
    tokens: int = 0,
    exclude: frozenset[str] = frozenset(),
    minute_left: float | None = None,
) -> Deployment | Unavailable:
    """Pick the deployment for one attempt. ``usage`` is the current-minute usage by id
    (shared across replicas when configured); ``exclude`` holds deployments that already
    failed this request (used only while others remain); ``minute_left`` is the seconds
    until ``usage``'s minute ends when it is not ``now``'s (the shared counters count
    wall-clock minutes)."""
    open_: list[Deployment] = []
    waits: list[float] = []
    for dep in deployments:
        cooled = table.cooled_for(dep.id, now)
        if cooled > 0:
            waits.append(cooled)
            continue
        if not dep.admits(usage.get(dep.id, Usage()), tokens):
            waits.append(60.0 - now % 60.0 if minute_left is None else minute_left)
            continue
        open_.append(dep)
    if not open_:
        wait = min(waits) if waits else 1.0
        return Unavailable(f"no deployment of {deployments[0].group!r} is available "
                           "(all cooling down or at their rpm/tpm limit)", wait)
    fresh = [d for d in open_ if d.id not in exclude] or open_
    orders = [d.order for d in fresh if d.order is not None]
    if orders:
        first = min(orders)
        fresh = [d for d in fresh if d.order is None or d.order == first]
    if len(fresh) == 1:
        return fresh[0]
    if strategy == "least-busy":
        return _lowest(fresh, lambda d: float(table.in_flight(d.id)), rng)
    if strategy == "latency-based-routing":
        return _lowest(fresh, lambda d: table.latency(d.id) or 0.0, rng)
    if strategy == "cost-based-routing":
        return _lowest(fresh, lambda d: d.cost if d.cost is not None
                       else 2 * UNKNOWN_TOKEN_PRICE, rng)
    if strategy == "usage-based-routing":
        return _lowest(fresh, lambda d: float(usage.get(d.id, Usage()).tokens), rng)
    return rng.choices(fresh, weights=_weights(fresh))[0]


def _weights(deployments: Sequence[Deployment]) -> list[float]:
    for attr in ("weight", "rpm", "tpm"):
        values = [getattr(d, attr) for d in deployments]
        if any(v is not None for v in values):
            weights = [max(0.0, float(v)) if v is not None else 0.0 for v in values]
            if sum(weights) > 0:
                return weights
    return [1.0] * len(deployments)


def _lowest(
    deployments: Sequence[Deployment], key: Callable[[Deployment], float], rng: random.Random
) -> Deployment:
    score = [key(d) for d in deployments]
    best = min(score)
    tied = [d for d, s in zip(deployments, score, strict=True) if s == best]
    return tied[0] if len(tied) == 1 else rng.choice(tied)
