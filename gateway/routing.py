"""From ``model_list`` entries to routes: which provider serves a model name, and how."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from gateway.config import GatewayConfig, ModelEntry
from gateway.litellm_settings import OPENAI_BARE_PREFIXES, SELF_HOSTED_OPENAI_PROVIDERS
from gateway.providers.base import REQUEST_DEFAULTS, Provider
from gateway.providers.capabilities import (
    ModelCapabilities,
    lookup_model,
    resolve_capabilities,
)
from gateway.providers.openai_compat import (
    HttpPool,
    OpenAICompatProvider,
    UpstreamLimits,
    UpstreamTimeouts,
)

# LiteLLM provider prefixes whose upstream speaks Chat Completions, with their public base.
OPENAI_COMPATIBLE: dict[str, str | None] = {
    "openai": "https://api.openai.com/v1",
    **dict.fromkeys(SELF_HOSTED_OPENAI_PROVIDERS),  # no public endpoint: api_base required
    "deepseek": "https://api.deepseek.com/v1",
    "groq": "https://api.groq.com/openai/v1",
    "together_ai": "https://api.together.xyz/v1",
    "fireworks_ai": "https://api.fireworks.ai/inference/v1",
    "openrouter": "https://openrouter.ai/api/v1",
    "xai": "https://api.x.ai/v1",
    "deepinfra": "https://api.deepinfra.com/v1/openai",
    "perplexity": "https://api.perplexity.ai",
    "cerebras": "https://api.cerebras.ai/v1",
    "nvidia_nim": "https://integrate.api.nvidia.com/v1",
}

Wire = Literal["openai", "litellm"]


# litellm_params keys that steer the router, never sent to a provider or to litellm (retries
# are the ladder's: litellm and the SDKs under it are told 0; a deployment's budget is named
# at start-up, gateway.litellm_settings).
ROUTER_PARAMS = frozenset({"rpm", "tpm", "weight", "order", "max_parallel_requests",
                           "num_retries", "max_retries", "mock_response", "cooldown_time",
                           "max_budget", "budget_duration", "tags"})

# What an OpenAI-compatible deployment uses of its litellm_params (sent as the gateway sends
# it); any other key means something to litellm only and is named as ignored there.
_OPENAI_ROUTE_PARAMS = frozenset({
    "model", "api_base", "api_key", "custom_llm_provider", "organization", "extra_headers",
    "timeout", "stream_timeout", "additional_drop_params", "extra_body", "headers",
    "drop_params",
}) | ROUTER_PARAMS | REQUEST_DEFAULTS


@dataclass(frozen=True, slots=True)
class ModelRoute:
    """How one deployment of a client-facing model name is served."""

    name: str
    upstream_model: str
    litellm_model: str
    provider_name: str
    wire: Wire
    provider: Provider
    capabilities: ModelCapabilities
    entry: ModelEntry
    deployment_id: str = ""
    # Body fields removed before sending (litellm_params.additional_drop_params).
    drop_fields: frozenset[str] = frozenset()
    # Request fields set for the client when it did not (litellm_params defaults such as
    # temperature or max_tokens, and extra_body's fields), on Chat Completions upstreams.
    defaults: tuple[tuple[str, Any], ...] = ()
    # A fallback that names one deployment (its model_info.id): served by it alone.
    pinned: bool = False


def split_model(model: str, custom_provider: str | None) -> tuple[str, str]:
    """``openai/gpt-4o`` -> (``openai``, ``gpt-4o``); a bare name -> (guessed provider, name)."""
    if custom_provider:
        prefix = f"{custom_provider}/"
        return custom_provider, model[len(prefix) :] if model.startswith(prefix) else model
    if "/" in model:
        provider, _, rest = model.partition("/")
        return provider, rest
    if model.startswith(OPENAI_BARE_PREFIXES):
        return "openai", model
    return "", model


def route_wire(provider: str, api_base: str | None) -> Wire:
    """Passthrough for Chat Completions upstreams, litellm for the rest."""
    if provider in OPENAI_COMPATIBLE:
        return "openai"
    if provider == "" and api_base:
        return "openai"  # a bare model name at a custom base: an OpenAI-compatible server
    return "litellm"


def build_route(
    entry: ModelEntry,
    config: GatewayConfig,
    pool: HttpPool,
    *,
    name: str | None = None,
    model: str | None = None,
    deployment_id: str = "",
) -> ModelRoute:
    """Build the route (and its provider) for one model entry. ``name`` and ``model``
    replace the entry's ``model_name`` and ``litellm_params.model`` (a wildcard entry
    serving one concrete name)."""
    params = entry.litellm_params
    name = name or entry.model_name
    model = model or params.model
    provider_name, upstream_model = split_model(model, params.custom_llm_provider)
    wire = route_wire(provider_name, params.api_base)
    bridged = responses_bridged(entry, provider_name, upstream_model)
    if bridged:
        upstream_model = upstream_model.removeprefix("responses/")
    router = config.router
    provider: Provider
    if wire == "openai" and not bridged:
        api_base = params.api_base or OPENAI_COMPATIBLE.get(provider_name)
        if not api_base:
            raise ValueError(
                f"model_list entry {entry.model_name!r}: provider {provider_name!r} "
                "needs litellm_params.api_base"
            )
        plain_timeouts, stream_timeouts = upstream_timeouts(entry, config)
        # litellm takes a request's headers as ``headers`` or ``extra_headers`` (the latter
        # wins on a name both set).
        plain = params.extras().get("headers")
        # (a value read from a file loses its trailing newline, as extra_headers' do)
        headers = {str(k): str(v).strip() for k, v in plain.items()} if isinstance(
            plain, dict) else {}
        headers.update(params.extra_headers or {})
        if params.organization:
            headers["OpenAI-Organization"] = params.organization
        provider = OpenAICompatProvider(
            name,
            api_base=api_base,
            api_key=params.api_key,
            pool=pool,
            timeouts=plain_timeouts,
            stream_timeouts=stream_timeouts,
            extra_headers=headers,
            limits=UpstreamLimits(**config.gateway.upstream_limits.model_dump()),
        )
    else:
        from gateway.providers.litellm_adapter import LiteLLMProvider

        litellm_params = {k: v for k, v in params.model_dump(exclude_none=True).items()
                          if k not in ROUTER_PARAMS}
        # A model served at the Responses endpoint alone: litellm's bridge sends a chat
        # request there (as the proxy does); the route stays OpenAI's for native requests.
        litellm_params["model"] = f"openai/responses/{upstream_model}" if bridged else model
        base = litellm_params.get("api_base")
        if provider_name == "anthropic" and isinstance(base, str):
            # (LiteLLM appends /v1/messages to a base that does not end with it)
            litellm_params["api_base"] = anthropic_root(base)
        if router.timeout is not None:
            litellm_params.setdefault("timeout", router.timeout)
        if router.stream_timeout is not None:
            litellm_params.setdefault("stream_timeout", router.stream_timeout)
        if router.drop_params:
            litellm_params.setdefault("drop_params", True)
        provider = LiteLLMProvider(name, litellm_params, upstream_timeouts(entry, config))
    litellm_model = model if ("/" in model and not bridged) or not provider_name else (
        f"{provider_name}/{upstream_model}"
    )
    capabilities = resolve_capabilities(
        litellm_model, entry.model_info.model_dump(exclude_none=True)
    )
    dropped = params.extras().get("additional_drop_params")
    defaults = request_defaults(entry) if wire == "openai" else ()
    return ModelRoute(
        name=name,
        upstream_model=upstream_model,
        litellm_model=litellm_model,
        provider_name=provider_name or "openai",
        wire=wire,
        provider=provider,
        capabilities=capabilities,
        entry=entry,
        deployment_id=deployment_id,
        drop_fields=frozenset(str(f) for f in dropped) if isinstance(dropped, list)
        else frozenset(),
        defaults=defaults,
    )


def responses_bridged(entry: ModelEntry, provider: str, upstream_model: str) -> bool:
    """True for an OpenAI deployment served at the Responses endpoint alone, where LiteLLM
    bridges Chat Completions requests to ``/responses``: a model written ``openai/responses/
    NAME``, or whose ``model_info.mode`` (else litellm's model map) says ``responses``
    (OpenAI's codex and pro models answer 404 on ``/chat/completions``)."""
    if provider != "openai" or "*" in upstream_model:
        return False
    if upstream_model.startswith("responses/"):
        return True
    mode = (entry.model_info.model_extra or {}).get("mode")
    if mode is None:
        mode = (lookup_model(f"openai/{upstream_model}") or {}).get("mode")
    return mode == "responses"


def request_defaults(entry: ModelEntry) -> tuple[tuple[str, Any], ...]:
    """The request fields a deployment's ``litellm_params`` set (LiteLLM passes them to every
    call): the Chat Completions parameters among its keys, then ``extra_body``'s fields."""
    extras = entry.litellm_params.extras()
    found = [(key, value) for key, value in extras.items()
             if key in REQUEST_DEFAULTS and value is not None]
    extra_body = extras.get("extra_body")
    if isinstance(extra_body, dict):
        found += [(str(k), v) for k, v in extra_body.items() if k not in ("model", "messages")]
    return tuple(found)


def anthropic_root(api_base: str) -> str:
    """An Anthropic ``api_base`` as the API's root: configs write it with or without
    ``/v1`` (or ``/v1/messages``), and every path is built from the root."""
    base = api_base.rstrip("/")
    return base.removesuffix("/messages").removesuffix("/v1") if base.endswith(
        ("/v1", "/v1/messages")) else base


def upstream_timeouts(entry: ModelEntry,
                      config: GatewayConfig) -> tuple[UpstreamTimeouts, UpstreamTimeouts]:
    """The timeouts of a deployment's upstream exchanges, (non-stream, stream), at LiteLLM's
    levels: the deployment's ``timeout`` / ``stream_timeout``, then ``router_settings.timeout``
    (or ``litellm_settings.request_timeout``) / ``router_settings.stream_timeout``, then the
    gateway's; a stream timeout applies to streams only and falls back to the plain one."""
    params = entry.litellm_params
    timeouts = config.gateway.timeouts
    read = params.timeout or config.router.timeout or timeouts.read
    stream_read = params.stream_timeout or config.router.stream_timeout or read
    first_byte = request_deadline(entry, config)
    return (UpstreamTimeouts(connect=timeouts.connect, read=read, total=timeouts.total,
                             first_byte=first_byte),
            UpstreamTimeouts(connect=timeouts.connect, read=stream_read, total=timeouts.total,
                             first_byte=first_byte))


def request_deadline(entry: ModelEntry, config: GatewayConfig) -> float:
    """The model's request deadline: ``model_info.recovery.deadline`` or ``recovery.deadline``
    when the config sets one; else the default, raised to the deployment's LiteLLM
    ``timeout`` (``litellm_params.timeout``, then ``router_settings.timeout`` /
    ``litellm_settings.request_timeout``) when that is longer: a LiteLLM config that waits
    300 s for a slow model keeps waiting 300 s. Also the bound on each upstream exchange
    until its first byte reaches the client."""
    override = entry.model_info.recovery
    if override is not None and "deadline" in override.model_fields_set:
        return override.deadline
    if "deadline" in config.recovery.model_fields_set:
        return config.recovery.deadline
    litellm = entry.litellm_params.timeout or config.router.timeout
    return max(config.recovery.deadline, litellm or 0.0)


def needs_litellm(config: GatewayConfig) -> bool:
    """True when some configured model is served through litellm."""
    for entry in config.model_list:
        params = entry.litellm_params
        provider, _ = split_model(params.model, params.custom_llm_provider)
        if "*" in params.model and provider in ("", "*"):
            return True  # a catch-all wildcard may route to any provider
        if route_wire(provider, params.api_base) == "litellm":
            return True
        if responses_bridged(entry, provider, split_model(params.model,
                                                           params.custom_llm_provider)[1]):
            return True
    return False


def entry_notes(config: GatewayConfig) -> tuple[list[str], list[str]]:
    """What start-up tells about the ``model_list``: the ``litellm_params`` keys that
    OpenAI-compatible deployments ignore (by key path), and the deployments without an
    ``api_base`` that go to a provider's public endpoint (with that endpoint)."""
    ignored: list[str] = []
    endpoints: list[str] = []
    used = _OPENAI_ROUTE_PARAMS
    if config.router.routing_strategy == "cost-based-routing":  # the prices pick deployments
        used = used | {"input_cost_per_token", "output_cost_per_token"}
    if not config.router.enable_tag_filtering:  # (the tags choose deployments only with it)
        used = used - {"tags"}
    for i, entry in enumerate(config.model_list):
        params = entry.litellm_params
        provider, _ = split_model(params.model, params.custom_llm_provider)
        if route_wire(provider, params.api_base) != "openai":
            if params.api_base is None and provider not in ("", "*"):
                endpoints.append(f"{entry.model_name}: {provider}'s default endpoint (litellm)")
            continue
        ignored += [f"model_list[{i}].litellm_params.{key}" for key in params.extras()
                    if key not in used]
        if params.api_base is None:
            endpoints.append(f"{entry.model_name}: {OPENAI_COMPATIBLE.get(provider)}")
    # (drop_params on a deployment the gateway sends to itself: the client's fields go as
    # sent, and a field the upstream refuses as unsupported is left out on a resend)
    return ignored, endpoints
