"""The LiteLLM proxy sections a fleet config carries: what the gateway honours, what it names
as ignored, and which client-auth settings it refuses to start with.

``router_settings``, ``litellm_settings`` and ``general_settings`` are read key by key. A key
the gateway honours is typed here; every other key is collected as a key path for the one
start-up warning. A key that would protect the gateway in LiteLLM but that the gateway
cannot honour (custom auth, JWT, key management systems) stops start-up instead: the gateway
never serves more openly than the config says.
"""

from __future__ import annotations

import ast
import difflib
import ipaddress
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal
from urllib.parse import quote

from gateway.access import ROUTE_GROUPS, AccessRules

RoutingStrategy = Literal[
    "simple-shuffle", "least-busy", "latency-based-routing", "usage-based-routing",
    "cost-based-routing",
]
ROUTING_STRATEGIES: tuple[str, ...] = (
    "simple-shuffle", "least-busy", "latency-based-routing", "usage-based-routing",
    "cost-based-routing",
)
# LiteLLM's names for the same strategies.
_STRATEGY_ALIASES = {"usage-based-routing-v2": "usage-based-routing", "shuffle": "simple-shuffle"}

# Keys read from each section (anything else is named in the start-up warning).
_FALLBACK_KEYS = ("fallbacks", "context_window_fallbacks", "content_policy_fallbacks",
                  "default_fallbacks")
_ROUTER_KEYS = frozenset({
    "routing_strategy", "num_retries", "timeout", "stream_timeout", "allowed_fails",
    "cooldown_time", "model_group_alias", "redis_host", "redis_port", "redis_password",
    "redis_url", "max_fallbacks", "disable_cooldowns", "retry_policy",
    "model_group_retry_policy", "allowed_fails_policy", "retry_after", *_FALLBACK_KEYS,
    "enable_tag_filtering", "tag_filtering_match_any", "default_max_parallel_requests",
})
# LiteLLM's AllowedFailsPolicy names, by the kind a deployment's failure has
# (gateway.router.selection.fail_kind); a bad request or a content-policy refusal is the
# request's fault and never counts toward a cooldown, in LiteLLM as here.
_ALLOWED_FAILS_KINDS = {"AuthenticationErrorAllowedFails": "authentication",
                        "TimeoutErrorAllowedFails": "timeout",
                        "RateLimitErrorAllowedFails": "rate_limit",
                        "InternalServerErrorAllowedFails": "server_error"}
_NEVER_COUNTED = ("BadRequestErrorAllowedFails", "ContentPolicyViolationErrorAllowedFails")
# LiteLLM's RetryPolicy names of the transient failures the gateway retries, by the kind the
# ladder counts (gateway.recovery.policy.transient_kind), and of those it never retries (the
# fallback or the client gets them at once: named when set above 0).
_RETRY_KINDS = {"RateLimitErrorRetries": "rate_limit", "TimeoutErrorRetries": "timeout",
                "InternalServerErrorRetries": "server_error"}
_NEVER_RETRIED = ("BadRequestErrorRetries", "AuthenticationErrorRetries",
                  "ContentPolicyViolationErrorRetries")
# router_settings keys whose behaviour the gateway has whatever they say: named with why.
_ALWAYS_ON = {"enable_pre_call_checks": " (always on: a deployment too small for a request "
                                        "is passed over)"}
_LITELLM_KEYS = frozenset({
    "num_retries", "request_timeout", "drop_params", "allowed_fails", "cooldown_time",
    "json_logs", *_FALLBACK_KEYS,
})
_GENERAL_KEYS = frozenset({"master_key", "max_request_size_mb", "litellm_key_header_name",
                           # enforced by the gateway as LiteLLM's proxy does (AccessRules)
                           "allowed_ips", "allowed_routes", "enforce_user_param",
                           "enforced_params", "global_max_parallel_requests",
                           "reject_clientside_metadata_tags", "use_x_forwarded_for"})
# A header name as HTTP spells one (RFC 9110 token characters).
_HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
# general_settings keys that change who may call the gateway: refused, never ignored.
_AUTH_KEYS_REFUSED = (
    "custom_auth", "enable_jwt_auth", "litellm_jwtauth", "enable_oauth2_auth",
    "enable_oauth2_proxy_auth", "key_management_system", "use_google_kms",
    "use_azure_key_vault", "enable_key_alias_format",
)
# general_settings keys that narrow who may call what, or how much at once: ignoring one
# would serve more openly than the config says, so the gateway refuses to start instead.
# (allowed_ips, allowed_routes, enforce_user_param, enforced_params and
# global_max_parallel_requests are enforced: see AccessRules.)
_NARROWING_KEYS_REFUSED = ("public_routes", "max_parallel_requests", "admin_only_routes")
# (litellm_settings.max_parallel_requests, which some config guides show, is no setting
# LiteLLM reads: named as ignored like any other unknown key.)
# litellm_settings.callbacks LiteLLM's proxy runs as guardrails (they block, mask or moderate
# requests): ignoring one would send what it blocks or masks.
_GUARDRAIL_CALLBACKS = frozenset({
    "presidio", "hide_secrets", "detect_prompt_injection", "lakera_prompt_injection",
    "llamaguard_moderations", "llmguard_moderations", "google_text_moderation",
    "openai_moderations", "azure_content_safety", "aporia_prompt_injection",
    "blocked_user_check", "banned_keywords",
})
# Keys both sections may set: router_settings wins (LiteLLM's Router takes its own argument
# over litellm's module setting), and the litellm_settings value it replaces is named.
_BOTH_SECTIONS = ("num_retries", "allowed_fails", "cooldown_time", *_FALLBACK_KEYS)
_TRUE_WORDS = ("true", "1", "yes", "on")
_FALSE_WORDS = ("false", "0", "no", "off", "")
# Top-level LiteLLM sections the gateway has no use for, named in the start-up warning
# (finetune_settings / files_settings configure LiteLLM's /fine_tuning and /files endpoints,
# which the gateway does not serve).
NAMED_IGNORED_SECTIONS = ("credential_list", "callback_settings", "mcp_servers",
                          "finetune_settings", "files_settings", "assistant_settings")
IGNORED_TOP_LEVEL = (*NAMED_IGNORED_SECTIONS, "guardrails", "general_settings", "litellm_settings",
                     "router_settings")


# LiteLLM providers that speak Chat Completions at a server of the user's own, with no
# public endpoint: a deployment of one needs its api_base (gateway.routing).
SELF_HOSTED_OPENAI_PROVIDERS = ("hosted_vllm", "openai_like", "custom_openai", "lm_studio",
                                "llamafile")


def missing_endpoints(model_list: Any) -> list[str]:
    """Deployments of a self-hosted OpenAI-compatible provider without an ``api_base`` (or
    with an empty one: a variable set to nothing), by key path: nothing could serve them."""
    found = []
    for i, entry in enumerate(model_list if isinstance(model_list, list) else []):
        params = entry.get("litellm_params") if isinstance(entry, Mapping) else None
        if not isinstance(params, Mapping) or "*" in str(entry.get("model_name", "")):
            continue
        model = str(params.get("model") or "")
        provider = params.get("custom_llm_provider") or (
            model.partition("/")[0] if "/" in model else "")
        if provider in SELF_HOSTED_OPENAI_PROVIDERS and not params.get("api_base"):
            found.append(f"model_list[{i}].litellm_params.api_base: provider {provider!r} has "
                         "no public endpoint; set the server's URL (for example "
                         "http://vllm:8000/v1)")
    return found


# Bare model names LiteLLM sends to OpenAI (``gpt-4o``, ``o3-mini``...).
OPENAI_BARE_PREFIXES = ("gpt-", "o1", "o3", "o4", "chatgpt-", "ft:gpt", "gpt4")
# Where LiteLLM reads the key and the endpoint of a provider, in this order, when a
# deployment gives none (``model: gpt-4o`` with OPENAI_API_KEY exported): the gateway reads
# the same for the OpenAI-compatible providers it sends to itself (others go through
# litellm, which reads them there).
PROVIDER_ENV: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "openai": (("OPENAI_API_KEY",), ("OPENAI_BASE_URL", "OPENAI_API_BASE")),
    "hosted_vllm": (("HOSTED_VLLM_API_KEY",), ("HOSTED_VLLM_API_BASE",)),
    "openai_like": (("OPENAI_LIKE_API_KEY",), ("OPENAI_LIKE_API_BASE",)),
    "lm_studio": (("LM_STUDIO_API_KEY",), ("LM_STUDIO_API_BASE",)),
    "llamafile": (("LLAMAFILE_API_KEY",), ("LLAMAFILE_API_BASE",)),
    "deepseek": (("DEEPSEEK_API_KEY",), ("DEEPSEEK_API_BASE",)),
    "groq": (("GROQ_API_KEY",), ("GROQ_API_BASE",)),
    "together_ai": (("TOGETHER_API_KEY", "TOGETHER_AI_API_KEY", "TOGETHERAI_API_KEY",
                     "TOGETHER_AI_TOKEN"), ("TOGETHER_AI_API_BASE",)),
    "fireworks_ai": (("FIREWORKS_API_KEY", "FIREWORKS_AI_API_KEY", "FIREWORKSAI_API_KEY",
                      "FIREWORKS_AI_TOKEN"), ("FIREWORKS_API_BASE",)),
    "openrouter": (("OPENROUTER_API_KEY", "OR_API_KEY"), ("OPENROUTER_API_BASE",)),
    "xai": (("XAI_API_KEY",), ("XAI_API_BASE",)),
    "deepinfra": (("DEEPINFRA_API_KEY",), ("DEEPINFRA_API_BASE",)),
    "perplexity": (("PERPLEXITYAI_API_KEY", "PERPLEXITY_API_KEY"), ("PERPLEXITY_API_BASE",)),
    "cerebras": (("CEREBRAS_API_KEY",), ("CEREBRAS_API_BASE",)),
    "nvidia_nim": (("NVIDIA_NIM_API_KEY",), ("NVIDIA_NIM_API_BASE",)),
}


def provider_of(params: Mapping[str, Any]) -> str:
    """LiteLLM's provider of a deployment: ``custom_llm_provider``, the model's prefix, or
    ``openai`` for a bare OpenAI model name ("" when it cannot tell)."""
    custom = params.get("custom_llm_provider")
    if isinstance(custom, str) and custom:
        return custom
    model = str(params.get("model") or "")
    if "/" in model:
        return model.partition("/")[0]
    return "openai" if model.startswith(OPENAI_BARE_PREFIXES) else ""


def with_provider_env(model_list: Any, env: Mapping[str, str]) -> Any:
    """``model_list`` with the key and endpoint LiteLLM would read from the environment
    filled in (as ``os.environ/NAME`` references) where a deployment of an OpenAI-compatible
    provider gives none."""
    if not isinstance(model_list, list):
        return model_list
    out = []
    for entry in model_list:
        params = entry.get("litellm_params") if isinstance(entry, Mapping) else None
        names = PROVIDER_ENV.get(provider_of(params)) if isinstance(params, Mapping) else None
        if names is None or not isinstance(params, Mapping):
            out.append(entry)
            continue
        added = {}
        for key, candidates in zip(("api_key", "api_base"), names, strict=True):
            found = next((n for n in candidates if env.get(n)), None)
            if not params.get(key) and found is not None:
                added[key] = f"os.environ/{found}"
        out.append({**entry, "litellm_params": {**params, **added}} if added else entry)
    return out


# model_info.mode values the gateway serves (chat completions and the wires built on it);
# entries of another mode (embedding, image_generation, audio_transcription, rerank...) are
# listed in /v1/models but not served, and named in the start-up warning.
CHAT_MODES = frozenset({"chat", "completion", "responses"})


def unserved_entries(model_list: Any) -> list[str]:
    """The ``model_list`` entries whose ``model_info.mode`` the gateway does not serve, by
    key path with the model name."""
    found = []
    for i, entry in enumerate(model_list if isinstance(model_list, list) else []):
        info = entry.get("model_info") if isinstance(entry, Mapping) else None
        mode = info.get("mode") if isinstance(info, Mapping) else None
        if isinstance(mode, str) and mode and mode not in CHAT_MODES:
            found.append(f"model_list[{i}].model_info.mode={mode} ({entry.get('model_name')}: "
                         "listed, not served: the gateway serves chat)")
    return found


# Keys of a model_list entry whose misspelling would change where a request goes, with
# which key, or what window is assumed: an unknown key this close to one of them is a typo
# and stops start-up ("did you mean"). Other unknown keys are LiteLLM's many options.
_ENTRY_KEYS = ("model_name", "litellm_params", "model_info", "rpm", "tpm", "weight", "order")
_PARAM_KEYS = ("model", "api_base", "api_key", "api_version", "custom_llm_provider",
               "organization", "extra_headers", "extra_body", "timeout", "stream_timeout",
               "additional_drop_params")
_INFO_KEYS = ("id", "mode", "base_model", "max_input_tokens", "max_output_tokens")
_INFO_OTHERS = frozenset({"model", "key"})  # keys of LiteLLM's own model info
_TYPO_CUTOFF = 0.85


def _typos(node: Any, known: tuple[str, ...], path: str,
           others: frozenset[str] = frozenset()) -> list[str]:
    if not isinstance(node, Mapping):
        return []
    found = []
    for key in node:
        if not isinstance(key, str) or key in known or key in others:
            continue
        close = difflib.get_close_matches(key, known, n=1, cutoff=_TYPO_CUTOFF)
        if close:
            found.append(f"{path}.{key}: unknown key (did you mean {close[0]}?)")
    return found


def model_entry_typos(model_list: Any) -> list[str]:
    """Misspelt keys of ``model_list`` entries (``api_bsae``, ``organisation``), by key
    path with the key meant: a typo there would silently send a request to the provider's
    public endpoint, without the intended header, or with the wrong window."""
    if not isinstance(model_list, list):
        return []
    found = []
    for i, entry in enumerate(model_list):
        if not isinstance(entry, Mapping):
            continue
        found += _typos(entry, _ENTRY_KEYS, f"model_list[{i}]")
        found += _typos(entry.get("litellm_params"), _PARAM_KEYS,
                        f"model_list[{i}].litellm_params")
        found += _typos(entry.get("model_info"), _INFO_KEYS, f"model_list[{i}].model_info",
                        _INFO_OTHERS)
    return found


def _secretless_url(url: str) -> str:
    scheme, sep, rest = url.partition("://")
    creds, at, host = rest.rpartition("@")
    return f"{scheme}{sep}***@{host}" if at and creds else url


class LiteLLMSettingsError(ValueError):
    """A LiteLLM setting the gateway cannot honour safely; the message names its key path."""


@dataclass(frozen=True, slots=True)
class RouterSettings:
    """What the gateway takes from ``router_settings`` / ``litellm_settings`` /
    ``general_settings`` (router values win over litellm_settings, as in LiteLLM's proxy)."""

    routing_strategy: RoutingStrategy = "simple-shuffle"
    num_retries: int | None = None
    timeout: float | None = None
    stream_timeout: float | None = None
    allowed_fails: int = 3
    cooldown_time: float = 5.0
    disable_cooldowns: bool = False
    fallbacks: tuple[tuple[str, tuple[str, ...]], ...] = ()
    context_window_fallbacks: tuple[tuple[str, tuple[str, ...]], ...] = ()
    content_policy_fallbacks: tuple[tuple[str, tuple[str, ...]], ...] = ()
    default_fallbacks: tuple[str, ...] = ()
    max_fallbacks: int = 5
    model_group_alias: tuple[tuple[str, str, bool], ...] = ()  # (alias, group, hidden)
    redis_url: str | None = None
    drop_params: bool = False
    master_key: str | None = None
    # general_settings.litellm_key_header_name: one more header a client key may come in
    # (lower case), as LiteLLM reads it.
    key_header_name: str | None = None
    # The literal URLs under general_settings.alert* (Slack/Teams webhooks): secrets.
    alert_urls: tuple[str, ...] = ()
    # litellm_settings.json_logs and general_settings.max_request_size_mb: the gateway's
    # log_format and max_body_bytes when its own section does not set them.
    json_logs: bool = False
    max_request_bytes: int | None = None
    # router_settings.retry_policy and model_group_retry_policy: retries by transient kind.
    retry_policy: tuple[tuple[str, int], ...] = ()
    allowed_fails_policy: tuple[tuple[str, int], ...] = ()
    retry_after: float = 0.0  # the shortest wait before a retry, in seconds
    group_retry_policy: tuple[tuple[str, tuple[tuple[str, int], ...]], ...] = ()
    access: AccessRules = field(default_factory=lambda: AccessRules())
    # Tag-based routing: a request's tags (metadata.tags, tags, x-litellm-tags) choose among
    # the deployments by their litellm_params.tags (gateway.router.selection.tagged).
    enable_tag_filtering: bool = False
    tag_filtering_match_any: bool = True
    # Requests sent to a deployment at once (its litellm_params.max_parallel_requests wins);
    # more wait for a slot, within their deadline, as LiteLLM's Router's semaphore.
    default_max_parallel_requests: int | None = None
    ignored: tuple[str, ...] = field(default=())
    # The section each fallback key was read from (errors name where the user wrote it).
    sources: tuple[tuple[str, str], ...] = field(default=())

    def section_of(self, key: str) -> str:
        """``router_settings`` or ``litellm_settings``: where ``key`` was set."""
        return dict(self.sources).get(key, "router_settings")

    def describe(self) -> dict[str, Any]:
        """The honoured settings as LiteLLM sections, secrets masked (``check-config``)."""
        router: dict[str, Any] = {
            "routing_strategy": self.routing_strategy, "num_retries": self.num_retries,
            "timeout": self.timeout, "stream_timeout": self.stream_timeout,
            "allowed_fails": self.allowed_fails, "cooldown_time": self.cooldown_time,
            "disable_cooldowns": self.disable_cooldowns, "max_fallbacks": self.max_fallbacks,
        }
        for key in ("fallbacks", "context_window_fallbacks", "content_policy_fallbacks"):
            chains: tuple[tuple[str, tuple[str, ...]], ...] = getattr(self, key)
            router[key] = [{source: list(targets)} for source, targets in chains]
        router["default_fallbacks"] = list(self.default_fallbacks)
        router["model_group_alias"] = {a: ({"model": g, "hidden": True} if hidden else g)
                                       for a, g, hidden in self.model_group_alias}
        router["redis_url"] = _secretless_url(self.redis_url) if self.redis_url else None
        router["retry_policy"] = dict(self.retry_policy)
        router["allowed_fails_policy"] = dict(self.allowed_fails_policy)
        router["retry_after"] = self.retry_after
        router["model_group_retry_policy"] = {g: dict(p) for g, p in self.group_retry_policy}
        general: dict[str, Any] = {"master_key": "***" if self.master_key else None}
        if self.key_header_name:
            general["litellm_key_header_name"] = self.key_header_name
        general.update(self.access.describe())
        if self.default_max_parallel_requests is not None:
            router["default_max_parallel_requests"] = self.default_max_parallel_requests
        if self.enable_tag_filtering:
            router["enable_tag_filtering"] = True
            router["tag_filtering_match_any"] = self.tag_filtering_match_any
        return {"router_settings": router,
                "litellm_settings": {"drop_params": self.drop_params},
                "general_settings": general}


def _as_int(value: Any, path: str, *, minimum: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise LiteLLMSettingsError(f"{path}: must be an integer")
    try:
        number = int(value)
    except ValueError:
        raise LiteLLMSettingsError(f"{path}: must be an integer") from None
    if number < minimum:
        raise LiteLLMSettingsError(f"{path}: must be >= {minimum}")
    return number


def _as_float(value: Any, path: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise LiteLLMSettingsError(f"{path}: must be a number")
    try:
        number = float(value)
    except ValueError:
        raise LiteLLMSettingsError(f"{path}: must be a number") from None
    if not number > 0:
        raise LiteLLMSettingsError(f"{path}: must be > 0")
    return number


def _is_tag_list(value: Any) -> bool:
    """True for a list of tags (strings, or numbers written bare in YAML)."""
    return isinstance(value, list) and all(
        isinstance(t, str | int) and not isinstance(t, bool) and str(t).strip() for t in value)


def _as_bool(value: Any, path: str) -> bool:
    """A YAML boolean, or one written as a word (``"false"``, an ``os.environ/`` value):
    ``bool("false")`` would turn a setting on that the config turns off."""
    if isinstance(value, bool) or value is None:
        return bool(value)
    if isinstance(value, int | float):
        return value != 0
    if isinstance(value, str) and value.strip().lower() in _TRUE_WORDS + _FALSE_WORDS:
        return value.strip().lower() in _TRUE_WORDS
    raise LiteLLMSettingsError(f"{path}: must be true or false")


def deployment_failure_policy(
    params: Mapping[str, Any], info: Mapping[str, Any], path: str,
) -> tuple[float | None, int | None, tuple[tuple[str, int], ...]]:
    """A deployment's own cooldown settings, as LiteLLM's Router reads them:
    ``cooldown_time`` (``model_info``, then ``litellm_params``; 0 keeps it in rotation),
    ``model_info.allowed_fails`` and ``model_info.allowed_fails_policy`` (its counts by the
    kinds the gateway tells apart; other names are named at start-up). Raises
    LiteLLMSettingsError naming the key path of a value that is not a number."""
    cooldown: float | None = None
    for where, source in (("model_info", info), ("litellm_params", params)):
        value = source.get("cooldown_time")
        if value is None:
            continue
        key = f"{path}.{where}.cooldown_time"
        if isinstance(value, bool) or not isinstance(value, int | float | str):
            raise LiteLLMSettingsError(f"{key}: must be a number of seconds")
        try:
            cooldown = float(value)
        except ValueError:
            raise LiteLLMSettingsError(f"{key}: must be a number of seconds") from None
        if not cooldown >= 0:
            raise LiteLLMSettingsError(f"{key}: must be >= 0")
        break
    allowed = info.get("allowed_fails")
    fails = None if allowed is None else _as_int(allowed, f"{path}.model_info.allowed_fails")
    policy = info.get("allowed_fails_policy")
    if policy is None:
        return cooldown, fails, ()
    if not isinstance(policy, Mapping):
        raise LiteLLMSettingsError(f"{path}.model_info.allowed_fails_policy: must be a mapping "
                                   "of AllowedFailsPolicy names to counts")
    by_kind = tuple((_ALLOWED_FAILS_KINDS[str(k)],
                     _as_int(n, f"{path}.model_info.allowed_fails_policy.{k}"))
                    for k, n in policy.items() if k in _ALLOWED_FAILS_KINDS)
    return cooldown, fails, by_kind


def _fallback_map(value: Any, path: str) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """LiteLLM's ``[{"group": ["fallback", ...]}, ...]`` (a plain mapping is accepted too)."""
    items: list[Any] = [value] if isinstance(value, Mapping) else value
    if not isinstance(items, list):
        raise LiteLLMSettingsError(f"{path}: must be a list of {{model: [fallbacks]}}")
    out: list[tuple[str, tuple[str, ...]]] = []
    for i, item in enumerate(items):
        if not isinstance(item, Mapping):
            raise LiteLLMSettingsError(f"{path}[{i}]: must be a mapping {{model: [fallbacks]}}")
        for group, targets in item.items():
            names = [targets] if isinstance(targets, str) else targets
            if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
                raise LiteLLMSettingsError(f"{path}[{i}].{group}: must be a list of model names")
            out.append((str(group), tuple(names)))
    return tuple(out)


def _retry_policy(value: Any, path: str, ignored: list[str]) -> tuple[tuple[str, int], ...]:
    """LiteLLM's RetryPolicy mapping: counts for the transient kinds the gateway retries;
    a count above 0 for a failure it never retries, or an unknown name, is named."""
    if not isinstance(value, Mapping):
        raise LiteLLMSettingsError(f"{path}: must be a mapping of RetryPolicy names to counts")
    out: list[tuple[str, int]] = []
    for key, count in value.items():
        number = _as_int(count, f"{path}.{key}")
        if key in _RETRY_KINDS:
            out.append((_RETRY_KINDS[key], min(number, 20)))
        elif key in _NEVER_RETRIED:
            if number:
                ignored.append(f"{path}.{key} (never retried: a fallback or the client gets "
                               "it at once)")
        else:
            ignored.append(f"{path}.{key}")
    return tuple(out)


def _aliases(value: Any, path: str) -> tuple[tuple[str, str, bool], ...]:
    if not isinstance(value, Mapping):
        raise LiteLLMSettingsError(f"{path}: must be a mapping of alias to model group")
    out: list[tuple[str, str, bool]] = []
    for alias, target in value.items():
        if isinstance(target, str):
            out.append((str(alias), target, False))
        elif isinstance(target, Mapping) and isinstance(target.get("model"), str):
            out.append((str(alias), target["model"],
                        _as_bool(target.get("hidden", False), f"{path}.{alias}.hidden")))
        else:
            raise LiteLLMSettingsError(f"{path}.{alias}: must be a model group name or "
                                       "{model: NAME, hidden: BOOL}")
    return tuple(out)


def _section(raw: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    value = raw.get(name)
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise LiteLLMSettingsError(f"{name}: must be a mapping")
    return value


def _redis_url(router: Mapping[str, Any]) -> str | None:
    url = router.get("redis_url")
    if isinstance(url, str) and url:
        return url
    host = router.get("redis_host")
    if not host:
        return None
    port = router.get("redis_port") or 6379
    if not str(port).isdigit():
        raise LiteLLMSettingsError("router_settings.redis_port: must be a port number")
    password = router.get("redis_password")
    # Quoted: a password holding '@', ':', '/' or '#' would otherwise be read as the host.
    auth = f":{quote(str(password), safe='')}@" if password else ""
    return f"redis://{auth}{host}:{port}/0"


# A custom handler's methods LiteLLM's proxy calls to reject or rewrite a request or its
# answer (CustomLogger's hooks; the logging ones only watch).
_REQUEST_HOOKS = frozenset({
    "async_pre_call_hook", "async_moderation_hook", "async_post_call_success_hook",
    "async_post_call_streaming_hook", "async_post_call_streaming_iterator_hook",
    "async_pre_call_deployment_hook", "async_pre_routing_hook", "async_pre_request_hook",
})


def _custom_handler_checked(hook: str, config_dir: Path | None) -> None:
    """Refuse a custom handler (``module.instance``, LiteLLM's "custom callbacks") whose
    module beside the config defines a hook that rejects or rewrites requests or answers:
    the gateway does not run it, and ignoring it would send what it blocks. A handler that
    only logs, or whose module is not there (the file the proxy loaded, not shipped with
    the config), is named as ignored like any logging callback. The module is read, never
    imported (LiteLLM looks for it beside the config file too)."""
    found = _hooks_defined(hook.rsplit(".", 1)[0], config_dir or Path.cwd(), set())
    if found:
        raise LiteLLMSettingsError(
            f"litellm_settings.callbacks: {hook} defines {', '.join(sorted(found))}, which "
            "rejects or rewrites requests or answers in LiteLLM's proxy; the gateway does not "
            "run custom handlers, and ignoring it would send what it blocks; remove it to "
            "start (a handler that only logs is named as ignored)")


# LiteLLM's own modules of request hooks (content safety, prompt injection, guardrails):
# a handler made from one of their classes blocks what they block.
_LITELLM_HOOK_MODULES = ("litellm.proxy.hooks", "litellm.proxy.guardrails",
                         "litellm.proxy.enterprise", "enterprise.enterprise_hooks")


def _hooks_defined(module: str, root: Path, read: set[str]) -> set[str]:
    """The request hooks the module ``module`` beside the config defines, or takes from a
    module it imports (one beside the config, read the same way, or LiteLLM's own hook
    modules); nothing when the module is not there."""
    if module in read or len(read) > 16:
        return set()
    read.add(module)
    path = root / (module.replace(".", "/") + ".py")
    try:
        tree = ast.parse(path.read_bytes(), str(path))
    except (OSError, SyntaxError, ValueError):
        return set()
    found = {node.name for node in ast.walk(tree)
             if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)} & _REQUEST_HOOKS
    for node in ast.walk(tree):
        names = ([node.module] if isinstance(node, ast.ImportFrom) and node.module
                 and not node.level else
                 [alias.name for alias in node.names] if isinstance(node, ast.Import) else [])
        for name in names:
            if name.startswith(_LITELLM_HOOK_MODULES):
                found.add(f"the hooks of {name}")
            else:
                found |= _hooks_defined(name, root, read)
    return found


def parse_litellm_settings(
    raw: Mapping[str, Any],
    resolve: Callable[[Any, str], Any] = lambda v, _p: v,
    env: Mapping[str, str] | None = None,
    config_dir: Path | None = None,
) -> RouterSettings:
    """Read the LiteLLM sections of a config document.

    ``resolve(value, key_path)`` resolves ``os.environ/NAME`` references; it is applied to
    the keys the gateway reads only (an ignored key may name a variable that is not set).
    ``config_dir``: the config file's directory, where custom handlers' modules are looked
    for (the working directory when None).
    Raises LiteLLMSettingsError naming the key path of a value the gateway cannot use, or
    of a client-auth setting it cannot honour.
    """
    router = _section(raw, "router_settings")
    litellm = _section(raw, "litellm_settings")
    general = _section(raw, "general_settings")
    for key in _AUTH_KEYS_REFUSED:
        if general.get(key) not in (None, False, "", [], {}):
            raise LiteLLMSettingsError(
                f"general_settings.{key}: this client-auth setting is not supported by the "
                "gateway; remove it and use general_settings.master_key or gateway.api_keys "
                "(the gateway refuses to start rather than serve without it)")
    for key in _NARROWING_KEYS_REFUSED:
        if general.get(key) not in (None, False, "", [], {}, 0):
            raise LiteLLMSettingsError(
                f"general_settings.{key}: the gateway does not enforce this setting, and "
                "ignoring it would serve more openly than the config says; remove it (and "
                "restrict access with gateway.api_keys, limits with rpm/tpm) to start")
    guards = litellm.get("guardrails")
    if guards not in (None, [], {}):
        raise LiteLLMSettingsError(
            "litellm_settings.guardrails: the gateway runs no guardrails, and ignoring one "
            "that blocks or masks would serve more openly than the config says; remove it "
            "to start")
    for key in ("pre_call_rules", "post_call_rules"):
        if litellm.get(key) not in (None, [], {}, ""):
            raise LiteLLMSettingsError(
                f"litellm_settings.{key}: LiteLLM fails a request or an answer its rules "
                "reject; the gateway does not run them, and ignoring them would send what "
                "they block; remove it to start")
    hooks = litellm.get("callbacks")
    blocking = [str(h) for h in (hooks if isinstance(hooks, list) else [hooks])
                if isinstance(h, str) and h in _GUARDRAIL_CALLBACKS]
    if blocking:
        raise LiteLLMSettingsError(
            f"litellm_settings.callbacks: {', '.join(blocking)} blocks or masks requests in "
            "LiteLLM; the gateway does not run it, and ignoring it would send what it "
            "blocks; remove it to start (logging callbacks are only named as ignored)")
    for hook in (hooks if isinstance(hooks, list) else [hooks]):
        if isinstance(hook, str) and "." in hook and hook not in _GUARDRAIL_CALLBACKS:
            _custom_handler_checked(hook, config_dir)
    if raw.get("guardrails") not in (None, [], {}):
        raise LiteLLMSettingsError(
            "guardrails: the gateway runs no guardrails, and ignoring one that blocks or "
            "denies would serve more openly than the config says; remove the section to start")
    filtering = _as_bool(resolve(router.get("enable_tag_filtering", False),
                                 "router_settings.enable_tag_filtering"),
                         "router_settings.enable_tag_filtering")
    for i, entry in enumerate(raw.get("model_list") or []):
        params = entry.get("litellm_params") if isinstance(entry, Mapping) else None
        if isinstance(params, Mapping) and params.get("max_parallel_requests") is not None:
            _as_int(resolve(params["max_parallel_requests"],
                            f"model_list[{i}].litellm_params.max_parallel_requests"),
                    f"model_list[{i}].litellm_params.max_parallel_requests")
        # (with tag filtering, a tags string would be read as no tags: the deployment would
        # serve untagged requests and none of the tags it was meant to keep)
        tags = params.get("tags") if filtering and isinstance(params, Mapping) else None
        if tags not in (None, []) and not _is_tag_list(tags):
            raise LiteLLMSettingsError(f"model_list[{i}].litellm_params.tags: must be a list "
                                       "of tags, e.g. [\"eu\", \"default\"]")
    # A deployment's max_retries is the provider SDK's own retry count in LiteLLM; here
    # every retry is the router's (num_retries), and the SDK is told 0. Its mock_response
    # answers without calling the model in LiteLLM; the gateway always calls the model.
    # Its max_budget / budget_duration take it out of rotation once spent in LiteLLM; the
    # gateway keeps no spend (named for every provider, litellm's and the gateway's own).
    ignored = [f"model_list[{i}].litellm_params.{key} ({why})"
               for i, entry in enumerate(raw.get("model_list") or [])
               if isinstance(entry, Mapping) and isinstance(entry.get("litellm_params"), Mapping)
               for key, why in (("max_retries", "retries follow num_retries"),
                                ("mock_response", "the model is called"),
                                ("max_budget", "no spend is tracked"),
                                ("budget_duration", "no spend is tracked"))
               if entry["litellm_params"].get(key) not in (None, 0, "0")]
    ignored += [f"model_list[{i}].model_info.allowed_fails_policy.{key}"
                for i, entry in enumerate(raw.get("model_list") or [])
                if isinstance(entry, Mapping) and isinstance(entry.get("model_info"), Mapping)
                and isinstance(entry["model_info"].get("allowed_fails_policy"), Mapping)
                for key in entry["model_info"]["allowed_fails_policy"]
                if key not in _ALLOWED_FAILS_KINDS and key not in _NEVER_COUNTED]
    ignored += unserved_entries(raw.get("model_list"))
    ignored += [f"router_settings.{k}{_ALWAYS_ON.get(k, '')}" for k in router
                if k not in _ROUTER_KEYS]
    ignored += [f"litellm_settings.{k}" for k in litellm if k not in _LITELLM_KEYS]
    ignored += [f"general_settings.{k}" for k in general if k not in _GENERAL_KEYS]
    alert_urls = tuple(url for k, v in general.items() if str(k).startswith("alert")
                       for url in _urls(v))
    ignored += [k for k in NAMED_IGNORED_SECTIONS if k in raw]
    router = {k: resolve(v, f"router_settings.{k}") for k, v in router.items()
              if k in _ROUTER_KEYS}
    litellm = {k: resolve(v, f"litellm_settings.{k}") for k, v in litellm.items()
               if k in _LITELLM_KEYS}
    general = {k: resolve(v, f"general_settings.{k}") for k, v in general.items()
               if k in _GENERAL_KEYS}
    # An empty fallback list in router_settings leaves litellm_settings' in force (LiteLLM's
    # Router takes its own list only when it has one); any other router value wins.
    router = {k: v for k, v in router.items()
              if not (k in _FALLBACK_KEYS and k in litellm and v in (None, [], {}))}
    merged: dict[str, Any] = dict(litellm)
    merged.update(router)
    ignored += [f"litellm_settings.{k} (router_settings.{k} is used, as in LiteLLM)"
                for k in _BOTH_SECTIONS if k in litellm and k in router]
    if "request_timeout" in litellm and router.get("timeout") is not None:
        ignored.append("litellm_settings.request_timeout (router_settings.timeout is used, "
                       "as in LiteLLM)")

    def where(key: str) -> str:
        return f"router_settings.{key}" if key in router else f"litellm_settings.{key}"

    kwargs: dict[str, Any] = {}
    strategy = merged.get("routing_strategy")
    if strategy is not None:
        name = _STRATEGY_ALIASES.get(str(strategy), str(strategy))
        if name in ROUTING_STRATEGIES:
            kwargs["routing_strategy"] = name
        else:
            ignored.append(f"router_settings.routing_strategy={strategy} (simple-shuffle used)")
    if merged.get("num_retries") is not None:
        kwargs["num_retries"] = _as_int(merged["num_retries"], where("num_retries"))
    timeout = router.get("timeout", litellm.get("request_timeout"))
    if timeout is not None:
        path = "router_settings.timeout" if "timeout" in router else \
            "litellm_settings.request_timeout"
        kwargs["timeout"] = _as_float(timeout, path)
    if router.get("stream_timeout") is not None:
        kwargs["stream_timeout"] = _as_float(router["stream_timeout"],
                                             "router_settings.stream_timeout")
    if merged.get("allowed_fails") is not None:
        kwargs["allowed_fails"] = _as_int(merged["allowed_fails"], where("allowed_fails"))
    kwargs["disable_cooldowns"] = _as_bool(merged.get("disable_cooldowns", False),
                                           where("disable_cooldowns"))
    cooldown = merged.get("cooldown_time")
    if cooldown in (0, "0", 0.0):  # LiteLLM: a failed deployment is back at once
        kwargs["cooldown_time"] = 0.0
    elif cooldown is not None:
        kwargs["cooldown_time"] = _as_float(cooldown, where("cooldown_time"))
    if merged.get("max_fallbacks") is not None:
        kwargs["max_fallbacks"] = _as_int(merged["max_fallbacks"], where("max_fallbacks"))
    for key in ("fallbacks", "context_window_fallbacks", "content_policy_fallbacks"):
        if merged.get(key):
            kwargs[key] = _fallback_map(merged[key], where(key))
    kwargs["sources"] = tuple((key, where(key).split(".")[0]) for key in _FALLBACK_KEYS
                              if merged.get(key))
    default = merged.get("default_fallbacks")
    if default:
        if not isinstance(default, list) or not all(isinstance(n, str) for n in default):
            raise LiteLLMSettingsError(f"{where('default_fallbacks')}: must be a list of names")
        kwargs["default_fallbacks"] = tuple(default)
    if router.get("retry_policy") is not None:
        kwargs["retry_policy"] = _retry_policy(router["retry_policy"],
                                               "router_settings.retry_policy", ignored)
    if router.get("retry_after") is not None:
        wait = router["retry_after"]
        if wait not in (0, "0"):  # 0, LiteLLM's documented value: no floor
            kwargs["retry_after"] = min(_as_float(wait, "router_settings.retry_after"), 60.0)
    policy = router.get("allowed_fails_policy")
    if policy is not None:
        if not isinstance(policy, Mapping):
            raise LiteLLMSettingsError("router_settings.allowed_fails_policy: must be a mapping "
                                       "of AllowedFailsPolicy names to counts")
        allowed: list[tuple[str, int]] = []
        for key, count in policy.items():
            number = _as_int(count, f"router_settings.allowed_fails_policy.{key}")
            if key in _ALLOWED_FAILS_KINDS:
                allowed.append((_ALLOWED_FAILS_KINDS[key], number))
            elif key not in _NEVER_COUNTED:
                ignored.append(f"router_settings.allowed_fails_policy.{key}")
        kwargs["allowed_fails_policy"] = tuple(allowed)
    groups = router.get("model_group_retry_policy")
    if groups is not None:
        if not isinstance(groups, Mapping):
            raise LiteLLMSettingsError("router_settings.model_group_retry_policy: must be a "
                                       "mapping of model group to RetryPolicy")
        kwargs["group_retry_policy"] = tuple(
            (str(group), _retry_policy(policy, f"router_settings.model_group_retry_policy."
                                               f"{group}", ignored))
            for group, policy in groups.items())
    if router.get("model_group_alias"):
        kwargs["model_group_alias"] = _aliases(router["model_group_alias"],
                                               "router_settings.model_group_alias")
    kwargs["redis_url"] = _redis_url(router)
    kwargs["drop_params"] = _as_bool(litellm.get("drop_params", False),
                                     "litellm_settings.drop_params")
    kwargs["json_logs"] = _as_bool(litellm.get("json_logs", False), "litellm_settings.json_logs")
    if general.get("max_request_size_mb") is not None:
        size = _as_float(general["max_request_size_mb"], "general_settings.max_request_size_mb")
        kwargs["max_request_bytes"] = max(1, int(size * 1024 * 1024))
    master = general.get("master_key")
    if master is None:
        master = (os.environ if env is None else env).get("LITELLM_MASTER_KEY") or None
    elif not isinstance(master, str | int) or isinstance(master, bool) or not str(
            master).strip():
        raise LiteLLMSettingsError("general_settings.master_key: must be a non-empty string")
    # As a client sends it: a secret read from a file often ends with a newline.
    kwargs["master_key"] = None if master is None else str(master).strip()
    header = general.get("litellm_key_header_name")
    if header is not None:
        if not isinstance(header, str) or not _HEADER_NAME.fullmatch(header):
            raise LiteLLMSettingsError("general_settings.litellm_key_header_name: must be an "
                                       f"HTTP header name, not {header!r}")
        kwargs["key_header_name"] = header.lower()
    kwargs["access"] = _access_rules(general)
    kwargs["enable_tag_filtering"] = _as_bool(router.get("enable_tag_filtering", False),
                                              "router_settings.enable_tag_filtering")
    kwargs["tag_filtering_match_any"] = _as_bool(router.get("tag_filtering_match_any", True),
                                                 "router_settings.tag_filtering_match_any")
    cap = router.get("default_max_parallel_requests")
    if cap not in (None, 0, "0"):
        kwargs["default_max_parallel_requests"] = _as_int(
            cap, "router_settings.default_max_parallel_requests", minimum=1)
    return RouterSettings(ignored=tuple(ignored), alert_urls=alert_urls, **kwargs)


def _access_rules(general: Mapping[str, Any]) -> AccessRules:
    """``general_settings``' narrowing keys, checked (LiteLLM's proxy enforces them in its
    auth step; so does the gateway, see :mod:`gateway.server.access`)."""
    ips = _strings(general.get("allowed_ips"), "general_settings.allowed_ips")
    for i, text in enumerate(ips):
        try:
            ipaddress.ip_network(text.strip(), strict=False)
        except ValueError:
            raise LiteLLMSettingsError(
                f"general_settings.allowed_ips[{i}]: {text!r} is no IP address or network "
                "(e.g. 10.0.0.7 or 10.20.0.0/16)") from None
    routes = _strings(general.get("allowed_routes"), "general_settings.allowed_routes")
    for i, route in enumerate(routes):
        name = route.removeprefix("LiteLLMRoutes.")
        if "/" not in route and name not in ROUTE_GROUPS:
            raise LiteLLMSettingsError(
                f"general_settings.allowed_routes[{i}]: {route!r} is neither a path (e.g. "
                f"/v1/chat/completions) nor a route group the gateway serves "
                f"({', '.join(sorted(ROUTE_GROUPS))})")
    params = _strings(general.get("enforced_params"), "general_settings.enforced_params")
    if any(not p.strip(".") or ".." in p for p in params):
        raise LiteLLMSettingsError("general_settings.enforced_params: each entry names a "
                                   "body field, e.g. user or metadata.generation_name")
    cap = general.get("global_max_parallel_requests")
    return AccessRules(
        allowed_ips=tuple(text.strip() for text in ips),
        allowed_routes=routes,
        enforce_user_param=_as_bool(general.get("enforce_user_param", False),
                                    "general_settings.enforce_user_param"),
        enforced_params=params,
        max_parallel=None if cap in (None, 0, "0") else _as_int(
            cap, "general_settings.global_max_parallel_requests", minimum=1),
        reject_metadata_tags=_as_bool(general.get("reject_clientside_metadata_tags", False),
                                      "general_settings.reject_clientside_metadata_tags"),
        forwarded_for=_as_bool(general.get("use_x_forwarded_for", False),
                               "general_settings.use_x_forwarded_for"))


def _strings(value: Any, path: str) -> tuple[str, ...]:
    if value in (None, "", []):
        return ()
    if not isinstance(value, list) or not all(isinstance(v, str) and v.strip() for v in value):
        raise LiteLLMSettingsError(f"{path}: must be a list of strings")
    return tuple(value)


def _urls(node: Any) -> list[str]:
    """The URL strings in ``node`` (a webhook of ``general_settings.alerting*``)."""
    if isinstance(node, Mapping):
        return [u for v in node.values() for u in _urls(v)]
    if isinstance(node, list):
        return [u for v in node for u in _urls(v)]
    return [node.strip()] if isinstance(node, str) and "://" in node else []
