"""Client authentication: keys and their owners, the failed-auth limiter, and the check that
guards every endpoint serving stored session data.

Sessions (compactions, archives) belong to an *owner*, not to a key. A plain
``gateway.api_keys`` entry is its own owner (a stable id derived from the key, the same as
before owners existed); ``{key: ..., owner: name}`` entries of one name share an owner, so a
key can be rotated without orphaning its sessions. Owner ids are hex digests: they never
contain a key and never contain ``.`` (the store joins ``owner.session_id``).

Handlers that read stored session data call :func:`session_reader` (or are wrapped with
:func:`owner_only`): without client auth they answer ``403``; with it they get the reader's
:class:`Principal`, whose ``owner_ids`` are the only store namespaces it may read.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import logging
import math
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from functools import wraps
from typing import Protocol

from aiohttp import web

from gateway.access import HEALTH_ROUTES, AccessRules, is_model_route
from gateway.config import ApiKeyEntry, GatewayConfig
from gateway.redact import register_credential_headers
from gateway.server.auth_limit import Limit, LocalLimit, shared_limit
from gateway.server.errors import ClientError
from gateway.server.keys import CLIENT
from gateway.server.ui_auth import basic_password, challenge, is_ui_path

log = logging.getLogger("gateway.auth")

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

AUTH_FAILURES_METRIC = "gateway_auth_failures_total"
# The header LiteLLM's proxy reads a client key from besides ``Authorization`` (its Claude
# Code guide sends it through ANTHROPIC_CUSTOM_HEADERS).
LITELLM_KEY_HEADER = "x-litellm-api-key"


def forwarded_for(request: web.Request) -> str | None:
    """``X-Forwarded-For`` as one list: a balancer that appends its own header line (not
    the client's) is read as the last address, as when it extends the one line."""
    lines = request.headers.getall("X-Forwarded-For", ())
    return ", ".join(lines) if lines else None


def client_owner(key: str) -> str:
    """The owner id of a plain key: a stable, non-reversible id (sessions are stored under it)."""
    return hashlib.sha256(key.encode()).hexdigest()[:32]


def named_owner(name: str) -> str:
    """The owner id of a named owner (``{key: ..., owner: name}`` entries)."""
    return hashlib.sha256(b"gw-owner\x00" + name.encode()).hexdigest()[:32]


@dataclass(frozen=True, slots=True)
class Principal:
    """Who a request authenticated as.

    ``owner`` is the store namespace of its sessions; ``legacy`` are the namespaces its keys
    used before they were given an owner name (read only, so no session is orphaned when a
    plain key becomes a named one); ``name`` is for logs (never a key).
    """

    owner: str
    name: str
    legacy: tuple[str, ...] = ()
    key_id: str = ""  # the first 8 hex of the key's SHA-256 (the access log's ``client``)

    @property
    def owner_ids(self) -> tuple[str, ...]:
        """Every namespace this principal may read, its own first."""
        return (self.owner, *self.legacy)


@dataclass(frozen=True, slots=True)
class KeyRing:
    """The configured client keys and the principal each one authenticates as."""

    entries: tuple[tuple[bytes, Principal], ...] = ()

    @classmethod
    def from_keys(cls, keys: Sequence[str | ApiKeyEntry], *,
                  master: str | None = None) -> KeyRing:
        """Build the ring from ``gateway.api_keys`` (plain strings or key/owner objects).
        LiteLLM's ``master`` key, when it is one of them without an owner, is named
        ``master_key`` in reports (not the index it was appended at)."""
        by_name: dict[str, list[str]] = {}
        for item in keys:
            if isinstance(item, ApiKeyEntry) and item.owner is not None:
                by_name.setdefault(item.owner, []).append(item.key)
        entries: list[tuple[bytes, Principal]] = []
        for index, item in enumerate(keys):
            key = item if isinstance(item, str) else item.key
            name = None if isinstance(item, str) else item.owner
            if name is None:
                label = "master_key" if key == master else f"api_keys[{index}]"
                principal = Principal(client_owner(key), label, key_id=client_owner(key)[:8])
            else:
                legacy = tuple(dict.fromkeys(client_owner(k) for k in by_name[name]))
                principal = Principal(named_owner(name), name, legacy,
                                      key_id=client_owner(key)[:8])
            entries.append((key.encode(), principal))
        return cls(tuple(entries))

    def owner_names(self) -> dict[str, str]:
        """Owner id -> the name reports use: the configured owner, ``api_keys[N]`` for a
        key without one (bounded: every value comes from the config)."""
        return {principal.owner: principal.name for _key, principal in self.entries}

    def __bool__(self) -> bool:
        return bool(self.entries)

    def match(self, supplied: bytes) -> Principal | None:
        """The principal of ``supplied``, compared against every key (no early exit)."""
        found: Principal | None = None
        for key, principal in self.entries:
            if hmac.compare_digest(supplied, key):
                found = principal
        return found


def client_keys(config: GatewayConfig) -> list[str | ApiKeyEntry]:
    """Every client key of the config (``gateway.api_keys``, and LiteLLM's master key)."""
    return config.client_keys()


class FailedAuthLimiter:
    """A token bucket of failed authentications per source address.

    Each failure takes a token; tokens come back at ``per_minute``. While an address has no
    token left, all its requests that need a key are refused with ``429`` before the key is
    looked at (so a limited address learns nothing about the keys it tries). Memory is
    bounded: the least recently seen addresses are forgotten first.
    """

    def __init__(self, burst: int, per_minute: float, *, max_addresses: int = 10_000,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._burst = float(burst)
        self._rate = per_minute / 60.0
        self._max = max_addresses
        self._clock = clock
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()

    def _tokens(self, address: str, now: float) -> float:
        entry = self._buckets.get(address)
        if entry is None:
            return self._burst
        tokens, at = entry
        return min(self._burst, tokens + (now - at) * self._rate)

    def retry_after(self, address: str) -> int:
        """Seconds until ``address`` may try again (0: it may now)."""
        now = self._clock()
        tokens = self._tokens(address, now)
        if tokens >= 1.0:
            return 0
        return max(1, math.ceil((1.0 - tokens) / self._rate))

    def fail(self, address: str) -> bool:
        """Take a token for a failure; True when this failure used the address's last one."""
        now = self._clock()
        tokens = max(0.0, self._tokens(address, now) - 1.0)
        self._buckets[address] = (tokens, now)
        self._buckets.move_to_end(address)
        while len(self._buckets) > self._max:
            self._buckets.popitem(last=False)
        return tokens < 1.0


class Counter(Protocol):
    """Where auth failures are counted (the gateway's metrics)."""

    def inc(self, name: str, amount: int = 1, **labels: str) -> None: ...


@dataclass(slots=True)
class AuthState:
    """The app's auth settings, built once from the config."""

    keyring: KeyRing
    limiter: Limit  # this process's, or shared by the workers (and replicas: Redis)
    metrics_auth: bool = False
    metrics: Counter | None = None
    public_paths: frozenset[str] = field(default_factory=frozenset)
    # LiteLLM's key headers, read before ``Authorization`` (see :func:`supplied_key`).
    key_headers: tuple[str, ...] = (LITELLM_KEY_HEADER,)
    # general_settings' narrowing rules (addresses, routes, parallel model requests).
    access: AccessRules = field(default_factory=AccessRules)
    parallel: int = 0  # model requests being served (counted with access.max_parallel)

    @classmethod
    def from_config(cls, config: GatewayConfig) -> AuthState:
        """Keys, limiter and public paths of ``config``."""
        section = config.gateway
        limit = section.failed_auth_limit
        public = {"/healthz", "/health/liveliness", "/health/liveness", "/health/readiness"}
        if not section.metrics_auth:
            public.add("/metrics")
        local = LocalLimit(FailedAuthLimiter(limit.burst, limit.per_minute))
        redis_url = config.router.redis_url or config.sessions.redis_url
        register_credential_headers([config.router.key_header_name])
        return cls(KeyRing.from_keys(client_keys(config), master=config.router.master_key),
                   shared_limit(local, limit.burst, limit.per_minute, redis_url),
                   section.metrics_auth, None, frozenset(public),
                   key_headers(config.router.key_header_name), config.router.access)

    @property
    def checks_nothing(self) -> bool:
        """No key, no access rule and no metrics auth: every request is let through as no
        one (the edge then skips :func:`guard`)."""
        return (not self.keyring and not self.metrics_auth
                and not self.access.narrows_requests and self.access.max_parallel is None)

    def count(self, reason: str) -> None:
        """Count one refused authentication."""
        if self.metrics is not None:
            self.metrics.inc(AUTH_FAILURES_METRIC, reason=reason)


AUTH = web.AppKey("gateway_auth", AuthState)


async def close_auth(app: web.Application) -> None:
    """Release the failed-auth budget's file or connections (app cleanup), within 10 s."""
    try:
        await asyncio.wait_for(app[AUTH].limiter.close(), 10.0)
    except TimeoutError:
        log.warning("closing the failed-auth budget took more than 10s: left behind")
PRINCIPAL: web.RequestKey[Principal | None] = web.RequestKey("client_principal")


def key_headers(custom: str | None) -> tuple[str, ...]:
    """The LiteLLM key headers a client key may come in: ``general_settings.
    litellm_key_header_name`` when set, then ``x-litellm-api-key``."""
    return (custom, LITELLM_KEY_HEADER) if custom else (LITELLM_KEY_HEADER,)


def supplied_key(request: web.Request,
                 litellm_headers: Sequence[str] = (LITELLM_KEY_HEADER,)) -> bytes:
    """The client key: a LiteLLM key header (``x-litellm-api-key``, or the one the config
    names; a ``Bearer`` prefix is allowed), then ``Authorization: Bearer``, or the
    ``api-key`` / ``x-api-key`` headers that Azure- and Anthropic-style clients send. The
    LiteLLM headers come first, as in LiteLLM: a client (Claude Code with its own Anthropic
    login) may send another credential in ``Authorization`` next to its proxy key."""
    for name in litellm_headers:
        value = request.headers.get(name, "").strip()
        scheme, _, token = value.partition(" ")
        if scheme.lower() == "bearer" and token.strip():
            value = token.strip()
        if value:
            return _raw(value)
    header = request.headers.get("Authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() == "bearer" and token.strip():
        return _raw(token.strip())
    if scheme.lower() == "basic" and is_ui_path(request.path):
        return basic_password(token)  # browsers on the inspector: the key as the password
    other = request.headers.get("x-api-key") or request.headers.get("api-key") or ""
    return _raw(other.strip())


def _raw(value: str) -> bytes:
    # A header value's bytes as sent: aiohttp decodes bytes that are not UTF-8 (a Latin-1
    # key) as surrogate escapes, which a plain encode() refuses (a 500 instead of a 401).
    return value.encode("utf-8", "surrogateescape")


def _too_many(request: web.Request, wait: int) -> web.Response:
    """``429`` in the wire format of the route called (Anthropic clients get theirs)."""
    from gateway.server.errors import wire_error_response

    refusal = ClientError(
        429, f"too many failed authentications from this address; retry in {wait} s",
        code="too_many_failed_authentications")
    return wire_error_response(request.path, refusal, {"Retry-After": str(wait)})


async def guard(request: web.Request, handler: Handler,
                auth: AuthState) -> web.StreamResponse:
    """Run ``handler`` for a request the config admits. When client keys are configured,
    every route but the public ones needs one; failed attempts are limited per source
    address, counted and logged (never with the key). The access rules (addresses, routes,
    parallel model requests) apply first."""
    request[PRINCIPAL] = None
    request[CLIENT] = None
    access = auth.access
    if access.narrows_requests and request.path not in HEALTH_ROUTES:
        refused = _narrowed(request, access)
        if refused is not None:
            raise refused
    if access.max_parallel is not None and is_model_route(request.path):
        return await _counted(request, handler, auth, access.max_parallel)
    return await _authenticated(request, handler, auth)


def _narrowed(request: web.Request, access: AccessRules) -> ClientError | None:
    """The ``403`` for an address or a route the config does not serve, or None."""
    address = access.client_address(request.remote, forwarded_for(request))
    if not access.address_allowed(address):
        return ClientError(403, f"Access forbidden: IP address {address or 'unknown'} not allowed "
                           "(general_settings.allowed_ips)", code="ip_not_allowed")
    if not access.route_allowed(request.path):
        return ClientError(403, f"Route {request.path} is not allowed on this gateway "
                           "(general_settings.allowed_routes)", code="route_not_allowed")
    return None


async def _counted(request: web.Request, handler: Handler, auth: AuthState,
                   cap: int) -> web.StreamResponse:
    """A model request within ``general_settings.global_max_parallel_requests`` (a ``429``
    past it, as LiteLLM's parallel request limiter answers)."""
    if auth.parallel >= cap:
        from gateway.server.errors import wire_error_response

        refusal = ClientError(
            429, f"Max parallel request limit reached: this gateway serves at most {cap} "
            "model requests at once (general_settings.global_max_parallel_requests); "
            "retry shortly", code="max_parallel_requests_reached")
        return wire_error_response(request.path, refusal, {"Retry-After": "1"})
    auth.parallel += 1
    try:
        return await _authenticated(request, handler, auth)
    finally:
        auth.parallel -= 1


async def _authenticated(request: web.Request, handler: Handler,
                         auth: AuthState) -> web.StreamResponse:
    if request.path in auth.public_paths:
        return await handler(request)
    if not auth.keyring:
        if request.path == "/metrics":  # metrics_auth without any key to give
            raise ClientError(403, "metrics need a client key (gateway.metrics_auth) but no "
                              "gateway.api_keys are configured", code="metrics_need_auth")
        return await handler(request)
    # (the client's address as the config says to believe it: behind a balancer with
    # use_x_forwarded_for, one client's stale key must not lock every client out)
    address = auth.access.client_address(
        request.remote, forwarded_for(request)) or request.remote or "unknown"
    wait = await auth.limiter.wait(address)
    if wait:
        auth.count("rate_limited")
        return _too_many(request, wait)
    supplied = supplied_key(request, auth.key_headers)
    principal = auth.keyring.match(supplied) if supplied else None
    if principal is None:
        # Taken atomically: a concurrent attempt (another worker's included) may have used
        # the last token since the check above; then this one is refused like it.
        took, wait = await auth.limiter.fail(address)
        if not took:
            auth.count("rate_limited")
            return _too_many(request, wait)
        reason = "invalid_key" if supplied else "missing_key"
        auth.count(reason)
        log.info("authentication failed from %s on %s %s: %s", address, request.method,
                 request.path, "unknown key" if supplied else "no key")
        if wait:
            log.warning("%s is refused (429) for %d s after repeated failed authentications",
                        address, wait)
        if is_ui_path(request.path):
            return challenge()
        raise ClientError(401, "missing or invalid API key; send 'Authorization: Bearer "
                          "<key>'", code="invalid_api_key")
    request[PRINCIPAL] = principal
    request[CLIENT] = principal.owner
    return await handler(request)


NO_AUTH_MESSAGE = (
    "stored session data (archives, the inspector) is not served without client "
    "authentication: anyone could read any conversation by its id. Add a key to "
    "gateway.api_keys (e.g. os.environ/GATEWAY_KEY) and send it as 'Authorization: Bearer "
    "<key>'"
)


def session_reader(request: web.Request) -> Principal:
    """The principal allowed to read stored session data, or a ``403`` saying why not.

    Every endpoint serving archives, compaction records or captured bodies calls this first,
    then reads only the namespaces in ``principal.owner_ids``.
    """
    principal: Principal | None = request.get(PRINCIPAL)
    if principal is None:
        raise ClientError(403, NO_AUTH_MESSAGE, code="session_data_needs_auth")
    return principal


def owner_only(handler: Handler) -> Handler:
    """Decorate a handler of stored session data: it runs only for an authenticated client
    (``request[PRINCIPAL]`` is then set), else ``403``."""

    @wraps(handler)
    async def guarded(request: web.Request) -> web.StreamResponse:
        session_reader(request)
        return await handler(request)

    return guarded


def not_readable(session_id: str) -> ClientError:
    """The answer for a session the reader does not own. The same whether the session does
    not exist or belongs to someone else, so ids cannot be probed."""
    return ClientError(403, f"no session {session_id!r} of this key's owner; a session is "
                       "readable only by the owner whose key created it",
                       code="session_not_owned")
