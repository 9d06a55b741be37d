"""Paths and behaviours clients written for LiteLLM or Azure OpenAI expect: the model list
(with aliases and wildcards), one model, the LiteLLM health probes, the Azure deployment path,
and CORS for browser clients (``gateway.cors_origins``)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from gateway.access import AccessRules
from gateway.config import SECRET_NAME
from gateway.projection.lazy_messages import dumps_request
from gateway.providers.litellm_loader import loaded_litellm
from gateway.providers.splice import exact_integers
from gateway.router.fleet import Fleet
from gateway.router.request_fields import (
    NO_OPTIONS,
    TAGS_HEADER,
    RequestOptions,
    take_litellm_fields,
)
from gateway.routing import ModelRoute
from gateway.server.auth import AUTH
from gateway.server.errors import ClientError, json_response
from gateway.server.keys import STATE
from gateway.wires.errors import is_anthropic_path

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

_EXPOSED = ", ".join((
    "x-request-id", "x-upstream-request-id", "x-gateway-repairs", "x-gateway-attempts",
    "x-gateway-recovery", "x-gateway-compaction", "x-gateway-context",
    "x-gateway-compaction-failed", "x-gateway-compaction-summary-failed", "x-gateway-recall",
    "x-gateway-would-repair", "x-gateway-invisible", "x-gateway-condensed",
    "x-gateway-would-condense",
    "x-gateway-model-used", "x-gateway-deployment",
    "x-litellm-model-id", "x-litellm-model-group", "x-litellm-attempted-retries",
    "x-litellm-attempted-fallbacks",
    "x-ratelimit-limit-requests", "x-ratelimit-remaining-requests",
    "x-ratelimit-limit-tokens", "x-ratelimit-remaining-tokens", "retry-after", "request-id",
    "x-should-retry",
))


def resolve_chat_model(fleet: Fleet, model: str) -> ModelRoute:
    """The route serving ``model`` for chat; a 404 when nothing serves it, a 400 when it is
    configured for another mode (embedding, image, audio)."""
    route = fleet.resolve(model)
    if route is None:
        raise ClientError(404, f"The model '{model}' does not exist or is not served by this "
                          "gateway; GET /v1/models lists the models", param="model",
                          code="model_not_found")
    if not fleet.is_chat(route):
        mode = fleet.modes.get(route.name, "non-chat")
        raise ClientError(400, f"The model '{model}' is configured as an {mode} model "
                          "(model_info.mode), not a chat model", param="model",
                          code="model_not_supported")
    return route


def request_options(request: web.Request, body: dict[str, Any],
                    raw: bytes) -> tuple[RequestOptions, bytes]:
    """A model request's LiteLLM side, on every wire: the fields the config requires
    checked (``general_settings.enforce_user_param`` / ``enforced_params``: a ``400`` as
    LiteLLM's proxy gives), the LiteLLM-only fields taken out of ``body`` (with the routing
    tags of ``x-litellm-tags``) and its own ``fallbacks`` checked; with the bytes to send
    (rebuilt only when fields were taken out: the client's still carry them)."""
    check_required_fields(request.app[AUTH].access, body)
    options = take_litellm_fields(body, request.headers.get(TAGS_HEADER, ""))
    if options is NO_OPTIONS:
        return options, raw
    if options.edited:
        raw = exact_integers(raw, dumps_request(body))
    fleet = request.app[STATE].fleet
    assert fleet is not None
    check_fallbacks(fleet, options.fallbacks)
    return options, raw


def check_required_fields(rules: AccessRules, body: dict[str, Any]) -> None:
    """A ``400`` for a model request without a field the config requires
    (``general_settings.enforce_user_param`` / ``enforced_params``), as LiteLLM's proxy
    refuses it."""
    missing = rules.missing_text(body) if rules.needs_params else None
    if missing is not None:
        raise ClientError(400, missing[1], param=missing[0], code="missing_required_param")


def check_fallbacks(fleet: Fleet, fallbacks: tuple[str, ...] | None) -> None:
    """A request's own ``fallbacks`` must name served chat models (a 400 naming the first
    that is not, instead of a fallback that could never answer)."""
    for name in fallbacks or ():
        route = fleet.resolve(name)
        if route is None or not fleet.is_chat(route):
            raise ClientError(400, f"'fallbacks' names '{name}', which is not a chat model "
                              "served by this gateway", param="fallbacks",
                              code="model_not_found")


def _model_card(fleet: Fleet, route: ModelRoute, name: str,
                windows: Any = None) -> dict[str, Any]:
    card: dict[str, Any] = {"id": name, "object": "model", "created": 0,
                            "owned_by": route.provider_name}
    mode = fleet.modes.get(route.name, "chat")
    if fleet.is_chat(route):
        caps = route.capabilities
        window, source = caps.context_window, str(caps.source)
        if windows is not None:  # a window learned from the provider's own overflow errors
            learned = windows.learned(route.name)
            configured = route.entry.model_info.max_input_tokens
            window = windows.effective(route.name, caps.context_window,
                                       stated=configured is not None)
            if learned is not None and window == learned:
                source = "learned"
                if configured is not None and configured > learned:  # the provider won
                    card["context_window_configured"] = configured
        card.update(context_window=window, context_window_source=source,
                    max_output_tokens=caps.max_output_tokens,
                    supports_images=caps.supports_images, supports_tools=caps.supports_tools)
    else:
        card["mode"] = mode
    if name != route.name:
        card["alias_of"] = route.name
    deployments = len(fleet.groups.get(route.name, ()))
    if deployments > 1:
        card["deployments"] = deployments
    return card


def _wildcard_card(pattern: str, model: str) -> dict[str, Any]:
    provider = model.split("/", 1)[0] if "/" in model else "any"
    return {"id": pattern, "object": "model", "created": 0, "owned_by": provider,
            "wildcard": True,
            "description": f"any model name matching {pattern!r} is routed to {model!r}"}


def _compactor(request: web.Request) -> Any:
    driver = request.app[STATE].driver
    return driver.compactor if driver is not None else None


def _windows(request: web.Request) -> Any:
    """The compaction service's book of learned context windows (None without one)."""
    compactor = _compactor(request)
    return compactor.windows.book if compactor is not None else None


async def list_models(request: web.Request) -> web.Response:
    """``GET /v1/models``: model groups, visible aliases, then wildcard entries as such.
    A chat model's ``context_window`` is the one the provider stated in an overflow refusal
    when that is smaller (``context_window_source: learned``; read from the session store,
    so every replica shows it), else the configured one or the default guess."""
    state = request.app[STATE]
    fleet = state.fleet
    assert fleet is not None
    compactor = _compactor(request)
    if compactor is not None:
        for routes in fleet.groups.values():
            if fleet.is_chat(routes[0]):
                await compactor.windows.window(routes[0])
    windows = _windows(request)
    # (a group's name an alias took over is shown as that alias: requests go to its target)
    data = [_model_card(fleet, fleet.resolve(name) or routes[0], name, windows)
            for name, routes in fleet.groups.items()]
    for alias, group in fleet.resolver.aliases.items():
        if alias not in fleet.hidden_aliases and alias not in fleet.groups:
            target = fleet.resolve(group)
            if target is not None:
                data.append(_model_card(fleet, target, alias, windows))
    # One card per pattern: several entries of one pattern are deployments of it.
    patterns: dict[str, str] = {}
    for wildcard in fleet.wildcards:
        patterns.setdefault(wildcard.pattern, wildcard.model)
    data += [_wildcard_card(pattern, model) for pattern, model in patterns.items()]
    if not _anthropic_client(request):
        return json_response({"object": "list", "data": data})
    data = [_anthropic_card(card) for card in data]
    return json_response({"object": "list", "data": data, "has_more": False,
                          "first_id": data[0]["id"] if data else None,
                          "last_id": data[-1]["id"] if data else None})


async def retrieve_model(request: web.Request) -> web.Response:
    """``GET /v1/models/{id}``: one model (an alias or a name a wildcard serves included)."""
    fleet = request.app[STATE].fleet
    assert fleet is not None
    name = request.match_info["model_id"]
    route = fleet.resolve(name)
    if route is None:
        raise ClientError(404, f"The model '{name}' does not exist or is not served by this "
                          "gateway", param="model", code="model_not_found")
    card = _model_card(fleet, route, name, _windows(request))
    if route.name not in fleet.groups and route.deployment_id:
        card["wildcard_of"] = route.deployment_id
    return json_response(_anthropic_card(card) if _anthropic_client(request) else card)


def _anthropic_client(request: web.Request) -> bool:
    """True for a client of the Anthropic API (its SDKs send ``anthropic-version``)."""
    return "anthropic-version" in request.headers


def _anthropic_card(card: dict[str, Any]) -> dict[str, Any]:
    """A model card with the fields of Anthropic's model list too (``type``,
    ``display_name``, ``created_at``), which its SDK's ``ModelInfo`` and clients read."""
    return {**card, "type": "model", "display_name": card["id"],
            "created_at": "1970-01-01T00:00:00Z"}


# model_info keys a deployment may carry that are never shown (LiteLLM's internal ones, and
# the gateway's own per-model sections).
_HIDDEN_INFO = frozenset({"key", "compaction", "recovery", "media", "repair"})


def _deployment_info(fleet: Fleet, route: ModelRoute) -> dict[str, Any]:
    """One ``/model/info`` row: the deployment's name, its model (never a key, an endpoint
    or a header) and its model_info with the limits the gateway uses."""
    caps = route.capabilities
    own = {k: v for k, v in route.entry.model_info.model_dump(exclude_none=True).items()
           if k not in _HIDDEN_INFO and not SECRET_NAME.search(k)}
    info: dict[str, Any] = {
        "id": route.deployment_id, "mode": fleet.modes.get(route.name, "chat"),
        "max_input_tokens": caps.context_window, "max_output_tokens": caps.max_output_tokens,
        "max_tokens": caps.max_output_tokens, "supports_vision": caps.supports_images,
        "supports_function_calling": caps.supports_tools, **own}
    info["id"] = route.deployment_id
    return {"model_name": route.name,
            "litellm_params": {"model": route.entry.litellm_params.model},
            "model_info": info}


async def model_info(request: web.Request) -> web.Response:
    """``GET /model/info`` (and ``/v1/model/info``): LiteLLM's list of deployments with
    their model_info, which clients with a LiteLLM provider (Roo Code, Cline...) read for
    names and context windows. ``?litellm_model_id=`` narrows it to one deployment."""
    fleet = request.app[STATE].fleet
    assert fleet is not None
    wanted = request.query.get("litellm_model_id")
    rows = [_deployment_info(fleet, route) for routes in fleet.groups.values()
            for route in routes if wanted is None or route.deployment_id == wanted]
    return json_response({"data": rows})


async def liveliness(request: web.Request) -> web.Response:
    """``GET /health/liveliness`` (and ``/health/liveness``): LiteLLM's answer, no checks."""
    return json_response("I'm alive!")


async def readiness(request: web.Request) -> web.Response:
    """``GET /health/readiness``: 200 once the routes are built and the driver is open.
    While the session store is down the status is ``degraded`` (still 200: requests are
    answered, compactions are kept in memory) and ``session_store`` says why."""
    state = request.app[STATE]
    ready = state.driver is not None and state.fleet is not None
    compactor = _compactor(request)
    down = await compactor.store_status() if compactor is not None else None
    status = ("degraded" if down else "healthy") if ready else "unhealthy"
    body = {"status": status, "db": "Not connected",
            "cache": "redis" if state.config.sessions.redis_url else None,
            "session_store": (None if compactor is None
                              else f"unavailable ({down})" if down else "ok"),
            "litellm_version": None, "gateway": "llm-repair-gateway",
            "litellm_loaded": loaded_litellm() is not None}
    return json_response(body, status=200 if ready else 503)


async def health(request: web.Request) -> web.Response:
    """``GET /health``: every deployment, healthy unless cooling down after failures. No
    upstream call is made (LiteLLM's version spends a completion per model)."""
    fleet = request.app[STATE].fleet
    assert fleet is not None
    rows = fleet.health()
    healthy = [r for r in rows if r["healthy"]]
    unhealthy = [r for r in rows if not r["healthy"]]
    return json_response({"healthy_endpoints": healthy, "unhealthy_endpoints": unhealthy,
                          "healthy_count": len(healthy), "unhealthy_count": len(unhealthy)})


def register_compat(app: web.Application, chat: Handler) -> None:
    """Attach the model, health, Azure and engines routes."""
    for prefix in ("/v1", ""):
        app.router.add_get(f"{prefix}/models", list_models)
        app.router.add_get(f"{prefix}/models/{{model_id:.+}}", retrieve_model)
        app.router.add_get(f"{prefix}/model/info", model_info)
    app.router.add_get("/health", health)
    app.router.add_get("/health/liveliness", liveliness)
    app.router.add_get("/health/liveness", liveliness)
    app.router.add_get("/health/readiness", readiness)
    app.router.add_post("/openai/deployments/{deployment}/chat/completions", chat)
    # (LiteLLM's proxy serves the legacy engines path too: the model named in the path)
    app.router.add_post("/engines/{deployment}/chat/completions", chat)


# --- CORS ------------------------------------------------------------------------------

def _allowed_origin(request: web.Request) -> str | None:
    origin = request.headers.get("Origin")
    if not origin:
        return None
    allowed = request.app[STATE].config.gateway.cors_origins
    if "*" in allowed:
        return "*"
    return origin if origin in allowed else None


def is_preflight(request: web.Request) -> bool:
    """An ``OPTIONS`` request a browser sends before a cross-origin call."""
    return request.method == "OPTIONS" and "Access-Control-Request-Method" in request.headers


def preflight(request: web.Request) -> web.Response:
    """The answer to a CORS preflight (given before authentication: browsers send them
    without credentials), or a ``403`` for an origin the config does not allow."""
    origin = _allowed_origin(request)
    if origin is None:
        raise ClientError(403, f"origin {request.headers.get('Origin')!r} is not allowed; "
                          "add it to gateway.cors_origins", code="cors_origin_not_allowed")
    requested = request.headers.get("Access-Control-Request-Headers", "")
    return web.Response(status=204, headers={
        "Access-Control-Allow-Origin": origin,
        "Access-Control-Allow-Methods": "GET, POST, OPTIONS",
        "Access-Control-Allow-Headers": requested or "authorization, content-type",
        "Access-Control-Max-Age": "600",
        "Vary": "Origin",
    })


async def on_prepare_headers(request: web.Request, response: web.StreamResponse) -> None:
    """The headers every answer gets as it is prepared (streams and errors included):

    - on the Anthropic Messages routes, the gateway's request id also as ``request-id``: the
      header Anthropic sends and its SDK reads (``message._request_id``,
      ``APIStatusError.request_id``);
    - CORS headers on every answer to an allowed origin (``gateway.cors_origins``).
    """
    headers = response.headers
    if is_anthropic_path(request.path):
        request_id = headers.get("x-request-id")
        if request_id and "request-id" not in headers:
            headers["request-id"] = request_id
    if request.method == "OPTIONS" or "Origin" not in request.headers:
        return
    origin = _allowed_origin(request)
    if origin is not None:
        headers["Access-Control-Allow-Origin"] = origin
        headers["Access-Control-Expose-Headers"] = _EXPOSED
        headers["Vary"] = "Origin"
