"""From ``model_list`` entries to routes: which provider serves a model name, and how."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from gateway.config import GatewayConfig, ModelEntry
from gateway.providers.base import Provider
from gateway.providers.capabilities import ModelCapabilities, resolve_capabilities
from gateway.providers.openai_compat import (
    HttpPool,
    OpenAICompatProvider,
    UpstreamLimits,
    UpstreamTimeouts,
)

# LiteLLM provider prefixes whose upstream speaks Chat Completions, with their public base.
OPENAI_COMPATIBLE: dict[str, str | None] = {
    "openai": "https://api.openai.com/v1",
    "hosted_vllm": None,
    "openai_like": None,
    "custom_openai": None,
    "lm_studio": None,
    "llamafile": None,
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
_OPENAI_BARE_PREFIXES = ("gpt-", "o1", "o3", "o4", "chatgpt-", "ft:gpt", "gpt4")

Wire = Literal["openai", "litellm"]


@dataclass(frozen=True, slots=True)
class ModelRoute:
    """How one client-facing model name is served."""

    name: str
    upstream_model: str
    litellm_model: str
    provider_name: str
    wire: Wire
    provider: Provider
    capabilities: ModelCapabilities
    entry: ModelEntry


def split_model(model: str, custom_provider: str | None) -> tuple[str, str]:
    """``openai/gpt-4o`` -> (``openai``, ``gpt-4o``); a bare name -> (guessed provider, name)."""
    if custom_provider:
        prefix = f"{custom_provider}/"
        return custom_provider, model[len(prefix) :] if model.startswith(prefix) else model
    if "/" in model:
        provider, _, rest = model.partition("/")
        return provider, rest
    if model.startswith(_OPENAI_BARE_PREFIXES):
        return "openai", model
    return "", model


def route_wire(provider: str, api_base: str | None) -> Wire:
    """Passthrough for Chat Completions upstreams, litellm for the rest."""
    if provider in OPENAI_COMPATIBLE:
        return "openai"
    if provider == "" and api_base:
        return "openai"  # a bare model name at a custom base: an OpenAI-compatible server
    return "litellm"


def build_route(entry: ModelEntry, config: GatewayConfig, pool: HttpPool) -> ModelRoute:
    """Build the route (and its provider) for one model entry."""
    params = entry.litellm_params
    provider_name, upstream_model = split_model(params.model, params.custom_llm_provider)
    wire = route_wire(provider_name, params.api_base)
    timeouts = config.gateway.timeouts
    provider: Provider
    if wire == "openai":
        api_base = params.api_base or OPENAI_COMPATIBLE.get(provider_name)
        if not api_base:
            raise ValueError(
                f"model_list entry {entry.model_name!r}: provider {provider_name!r} "
                "needs litellm_params.api_base"
            )
        read = params.stream_timeout or params.timeout or timeouts.read
        headers = dict(params.extra_headers or {})
        if params.organization:
            headers["OpenAI-Organization"] = params.organization
        provider = OpenAICompatProvider(
            entry.model_name,
            api_base=api_base,
            api_key=params.api_key,
            pool=pool,
            timeouts=UpstreamTimeouts(connect=timeouts.connect, read=read, total=timeouts.total,
                                      first_byte=_deadline(entry, config)),
            extra_headers=headers,
            limits=UpstreamLimits(**config.gateway.upstream_limits.model_dump()),
        )
    else:
        from gateway.providers.litellm_adapter import LiteLLMProvider

        provider = LiteLLMProvider(entry.model_name, params.model_dump(exclude_none=True))
    litellm_model = params.model if "/" in params.model or not provider_name else (
        f"{provider_name}/{upstream_model}"
    )
    capabilities = resolve_capabilities(
        litellm_model, entry.model_info.model_dump(exclude_none=True)
    )
    return ModelRoute(
        name=entry.model_name,
        upstream_model=upstream_model,
        litellm_model=litellm_model,
        provider_name=provider_name or "openai",
        wire=wire,
        provider=provider,
        capabilities=capabilities,
        entry=entry,
    )


def _deadline(entry: ModelEntry, config: GatewayConfig) -> float:
    """The model's recovery deadline (``model_info.recovery.deadline`` or the global one):
    also the bound on each upstream exchange until its first byte reaches the client."""
    override = entry.model_info.recovery
    if override is not None and "deadline" in override.model_fields_set:
        return override.deadline
    return config.recovery.deadline


def build_routes(config: GatewayConfig, pool: HttpPool) -> dict[str, ModelRoute]:
    """All routes by client-facing model name."""
    return {entry.model_name: build_route(entry, config, pool) for entry in config.model_list}


def needs_litellm(config: GatewayConfig) -> bool:
    """True when some configured model is served through litellm."""
    for entry in config.model_list:
        params = entry.litellm_params
        provider, _ = split_model(params.model, params.custom_llm_provider)
        if route_wire(provider, params.api_base) == "litellm":
            return True
    return False
