"""The YAML config: a LiteLLM proxy ``model_list`` plus the gateway's own sections.

An existing LiteLLM proxy config loads unchanged: ``model_list`` entries keep LiteLLM's schema
(``litellm_params`` and ``model_info`` accept any LiteLLM key), and the LiteLLM sections the
gateway does not use are accepted and ignored with one warning (so is a top-level ``x-...``
block holding YAML anchors). The gateway's own sections are strict: an unknown key or a wrong
type stops start-up with the key path.
"""

from __future__ import annotations

import difflib
import logging
import os
import re
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any, Literal

import yaml
from aiohttp import encode_basic_auth
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, field_validator

from gateway.litellm_settings import (
    IGNORED_TOP_LEVEL,
    LiteLLMSettingsError,
    RouterSettings,
    deployment_failure_policy,
    missing_endpoints,
    model_entry_typos,
    parse_litellm_settings,
    provider_of,
    with_provider_env,
)
from gateway.providers.capabilities import lookup_model

log = logging.getLogger("gateway.config")

ENV_PREFIX = "os.environ/"
IGNORED_LITELLM_SECTIONS = IGNORED_TOP_LEVEL
# How close an unknown top-level key must be to a section's name to be taken for its typo.
_SECTION_TYPO_CUTOFF = 0.8
# Config keys (and header names) whose values are secrets.
SECRET_NAME = re.compile(
    r"(?i)(^|[_-])(api[_-]?keys?|keys?|secret\w*|password|passwd|token|credentials?"
    r"|master[_-]key|private[_-]key|authorization|access[_-]key[_-]id|webhooks?(?:[_-]urls?)?)$"
)
# A Slack, Microsoft Teams or Discord webhook URL: whoever holds one may post to the channel.
WEBHOOK_URL = re.compile(
    r"(?i)^https?://(?:hooks\.slack\.com/|[\w.-]*\.webhook\.office\.com/"
    r"|outlook\.office(?:365)?\.com/webhook|(?:\w+\.)?discord(?:app)?\.com/api/webhooks/"
    r"|[\w.-]*\.logic\.azure\.com[:/])")
URL_PASSWORD = re.compile(r"(?P<head>[a-z][a-z0-9+.-]*://[^/@:\s]*:)(?P<pw>[^/@\s]+)(?P<at>@)",
                          re.IGNORECASE)
# Sections whose every value may be a secret.
ALL_SECRET_SECTIONS = frozenset({"environment_variables"})
_AUTH_SCHEME = re.compile(r"(?i)^(bearer|basic|token)\s+(?P<token>\S+)$")


class ConfigError(Exception):
    """The config cannot be used. The message names the key path or the variable, never a
    secret value."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class LiteLLMParams(BaseModel):
    """``litellm_params`` of a model entry: LiteLLM's schema, any extra key allowed (it is
    forwarded to litellm for non-OpenAI providers)."""

    model_config = ConfigDict(extra="allow", frozen=True)

    model: str = Field(min_length=1)
    api_base: str | None = None
    api_key: str | None = None
    custom_llm_provider: str | None = None
    organization: str | None = None
    extra_headers: dict[str, str] | None = None
    timeout: float | None = Field(default=None, gt=0)
    stream_timeout: float | None = Field(default=None, gt=0)

    @field_validator("api_base")
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        # Never echo the value: a URL may carry credentials. Surrounding whitespace (a
        # variable read from a file) is no part of it.
        value = value.strip() if value else value
        if value:
            scheme, sep, rest = value.partition("://")
            if not sep or scheme.lower() not in ("http", "https") or not rest.strip("/"):
                raise ValueError("must be an http:// or https:// URL")
        return value

    @field_validator("api_key", "organization")
    @classmethod
    def _sendable_key(cls, value: str | None) -> str | None:
        # A key read from a mounted secret (os.environ/NAME) often ends with a newline,
        # which no header can carry: every request would fail. Stripped as sent.
        return client_key_as_sent(value, "the value") if value else value

    @field_validator("extra_headers")
    @classmethod
    def _sendable_headers(cls, value: dict[str, str] | None) -> dict[str, str] | None:
        # As the key: a header value read from a file loses its trailing newline.
        if not value:
            return value
        return {name: client_key_as_sent(v, f"header {name}") for name, v in value.items()}

    def extras(self) -> dict[str, Any]:
        """The LiteLLM keys beyond the typed ones, as given."""
        return dict(self.model_extra or {})


class ModelInfo(BaseModel):
    """``model_info`` of a model entry. Typed keys are checked; any other key is allowed."""

    model_config = ConfigDict(extra="allow", frozen=True)

    max_input_tokens: int | None = Field(default=None, gt=0)
    max_output_tokens: int | None = Field(default=None, gt=0)
    max_tokens: int | None = Field(default=None, gt=0)
    supports_vision: bool | None = None
    supports_function_calling: bool | None = None
    compaction: CompactionConfig | None = None
    recovery: RecoveryConfig | None = None
    media: MediaConfig | None = None
    repair: RepairOverride | None = None


class ModelEntry(BaseModel):
    """One ``model_list`` entry (LiteLLM proxy schema)."""

    model_config = ConfigDict(extra="allow", frozen=True)

    model_name: str = Field(min_length=1)
    litellm_params: LiteLLMParams
    model_info: ModelInfo = Field(default_factory=ModelInfo)


class Timeouts(_Strict):
    """Upstream timeouts in seconds (``read`` is the longest wait between two chunks)."""

    connect: float = Field(default=10.0, gt=0)
    read: float = Field(default=600.0, gt=0)
    total: float | None = Field(default=None, gt=0)


class UpstreamLimits(_Strict):
    """Bytes the gateway reads from an upstream (after decompression) before giving up."""

    max_body_bytes: int = Field(default=64 * 1024 * 1024, ge=1024)  # a non-stream answer
    max_error_bytes: int = Field(default=1024 * 1024, ge=1024)  # an error answer
    max_event_bytes: int = Field(default=1024 * 1024, ge=1024)  # one SSE event


class TelemetryConfig(_Strict):
    """OpenTelemetry export: off by default, OTLP/HTTP when configured."""

    exporter: Literal["none", "otlp", "console"] = "none"
    endpoint: str | None = None
    service_name: str = "llm-repair-gateway"
    # What fills the window (tokens by source) and where each turn's prompt first differs
    # from the session's previous turn (docs/observability.md): about 2-3% of an agent
    # turn's CPU, 6-8% of a body never seen before (make bench); false turns it off.
    context_report: bool = True


# Characters no HTTP header value can carry: a key holding one could never be sent.
_UNSENDABLE = re.compile(r"[\x00-\x1f\x7f]")


def client_key_as_sent(key: str, where: str) -> str:
    """A configured client key as a client sends it: without the surrounding whitespace a
    secret read from a file (``os.environ/NAME`` of a mounted secret) often ends with, since
    the client's header loses it too. A key with a control character inside (a newline in
    the middle) cannot be sent at all and is refused, naming where it is, never the key."""
    stripped = key.strip()
    if _UNSENDABLE.search(stripped):
        raise ValueError(f"{where} holds a control character (a line break?) that no HTTP "
                         "header can carry")
    return stripped


class ApiKeyEntry(_Strict):
    """One ``gateway.api_keys`` entry in its long form: a key and the owner it belongs to.

    Sessions belong to the owner, not to the key, so listing a new key under the same owner
    (and later removing the old one) rotates a key without orphaning its sessions.
    """

    key: str = Field(min_length=1)
    owner: str | None = Field(default=None, min_length=1, max_length=128)

    @field_validator("key")
    @classmethod
    def _sendable(cls, key: str) -> str:
        return client_key_as_sent(key, "key")


class FailedAuthLimit(_Strict):
    """``gateway.failed_auth_limit``: a token bucket of failed authentications per source
    address. When it is empty, that address gets ``429`` until a token is back."""

    burst: int = Field(default=10, ge=1)
    per_minute: float = Field(default=6.0, gt=0)


class GatewaySection(_Strict):
    """``gateway:``: listening, client auth, limits, timeouts, telemetry."""

    host: str = "127.0.0.1"
    port: int = Field(default=4000, ge=0, le=65535)
    api_keys: list[str | ApiKeyEntry] = Field(default_factory=list)
    # Serving without client keys on a non-loopback address is refused unless this is set.
    allow_unauthenticated: bool = False
    metrics_auth: bool = False  # /metrics needs a client key too
    failed_auth_limit: FailedAuthLimit = Field(default_factory=FailedAuthLimit)

    @field_validator("api_keys")
    @classmethod
    def _distinct_keys(cls, keys: list[str | ApiKeyEntry]) -> list[str | ApiKeyEntry]:
        seen: set[str] = set()
        keys = [client_key_as_sent(k, f"entry [{i}]") if isinstance(k, str) else k
                for i, k in enumerate(keys)]
        for index, item in enumerate(keys):
            key = item if isinstance(item, str) else item.key
            if not key:
                raise ValueError(f"entry [{index}] is an empty key")
            if key in seen:  # never echo the key itself
                raise ValueError(f"entry [{index}] repeats an earlier key")
            seen.add(key)
        return keys
    max_body_bytes: int = Field(default=32 * 1024 * 1024, gt=0)
    header_timeout: float = Field(default=10.0, gt=0)  # seconds to send the request headers
    body_timeout: float = Field(default=60.0, gt=0)  # seconds to send the request body
    # Memory (MB per worker) for the request bodies kept, with their parsed messages, so
    # that an agent's next turn (the same history, messages added) is read incrementally.
    # About 1.3 MB per active session with a 300 KB history. 0: off.
    history_cache_mb: float = Field(default=32.0, ge=0, le=65536)
    # Seconds between handing memory freed by finished requests back to the system
    # (glibc's malloc_trim, off the event loop). 0: off.
    memory_trim_seconds: float = Field(default=5.0, ge=0, le=86400)
    timeouts: Timeouts = Field(default_factory=Timeouts)
    upstream_limits: UpstreamLimits = Field(default_factory=UpstreamLimits)
    telemetry: TelemetryConfig = Field(default_factory=TelemetryConfig)
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    # Browser origins allowed to call the gateway (CORS); "*" allows any. Empty: none.
    cors_origins: list[str] = Field(default_factory=list)
    # Seconds requests in flight get to finish after SIGTERM before they are cancelled.
    shutdown_grace: float = Field(default=10.0, ge=0, le=3600)
    log_format: Literal["text", "json"] = "text"
    ui: bool = False  # the repair inspector at /ui (behind client auth)
    ui_history: int = Field(default=500, ge=10, le=100_000)  # requests the inspector keeps
    capture_bodies: bool = False  # keep messages as sent / as forwarded for the inspector
    capture_max_chars: int = Field(default=4000, ge=64)  # per string, when capturing
    # Owners (``api_keys`` owner names) whose keys see every owner's requests in the
    # inspector (a platform team); everyone else sees only its own.
    ui_admin_owners: list[str] = Field(default_factory=list)


RepairPolicy = Literal["repair", "report", "reject"]
InvisibleChars = Literal["off", "report", "strip", "reject"]
ToolOutputs = Literal["keep", "report", "condense"]


class RepairOverride(_Strict):
    """``model_info.repair`` or ``repair.owners.<owner>``: the repair settings of one model
    group or one client owner (keys left out keep the wider setting)."""

    policy: RepairPolicy | None = None
    invisible_chars: InvisibleChars | None = None
    tool_outputs: ToolOutputs | None = None


class RepairConfig(_Strict):
    """``repair:``: projection on every request, strict projection on a structural refusal.

    ``policy``: ``repair`` (repair and forward), ``report`` (forward as sent, report what
    would be repaired), ``reject`` (``400`` listing what is wrong). ``invisible_chars``:
    ``off``, ``report``, ``strip`` or ``reject``. ``tool_outputs``: ``keep`` (as sent),
    ``condense`` (repeated and verbose tool results written in fewer tokens:
    ``gateway.projection.condense``; under the ``report`` policy only reported) or
    ``report`` (sent as written, what condensing would save reported). All three can be set
    per model group (``model_info.repair``) and per owner of client keys (``owners``); the
    owner's setting wins over the model's, the model's over this one.
    """

    enabled: bool = True
    strict_on_retry: bool = True
    policy: RepairPolicy = "repair"
    invisible_chars: InvisibleChars = "report"
    tool_outputs: ToolOutputs = "keep"
    owners: dict[str, RepairOverride] = Field(default_factory=dict)

    def resolved(self, model: RepairOverride | None, owner: str | None,
                 ) -> tuple[RepairPolicy, InvisibleChars, ToolOutputs]:
        """The (policy, invisible_chars, tool_outputs) of a request: the owner's setting,
        else the model group's, else this section's."""
        policy, invisible, outputs = self.policy, self.invisible_chars, self.tool_outputs
        for override in (model, self.owners.get(owner) if owner is not None else None):
            if override is not None:
                policy = override.policy or policy
                invisible = override.invisible_chars or invisible
                outputs = override.tool_outputs or outputs
        return policy, invisible, outputs


class RecoveryConfig(_Strict):
    """``recovery:`` (or ``model_info.recovery``): the ladder's steps and bounds."""

    strict: bool = True
    media: bool = True
    strip_media_last: bool = True
    compact_on_overflow: bool = True
    max_overflow_compactions: int = Field(default=3, ge=0, le=10)
    max_transient_retries: int = Field(default=3, ge=0, le=20)
    backoff_base: float = Field(default=0.5, ge=0)
    backoff_cap: float = Field(default=8.0, ge=0)
    deadline: float = Field(default=60.0, gt=0)
    max_retry_after: float = Field(default=30.0, ge=0)


class MediaConfig(_Strict):
    """``media:`` (or ``model_info.media``): limits that degraded media must meet."""

    max_side: int = Field(default=1568, ge=16)
    max_bytes: int = Field(default=5 * 1024 * 1024, ge=1024)
    allowed_formats: list[str] = Field(default_factory=lambda: ["png", "jpeg", "gif", "webp"])
    # Pixels decoded over all the images of one request before the rest are removed.
    max_total_pixels: int = Field(default=100_000_000, ge=1)
    # Images per request (Anthropic's 100): past it the degraded resend drops the oldest.
    max_images: int = Field(default=100, ge=1)
    # The base64 size of all the images of one request together (OpenAI's 20 MB): over it the
    # degraded resend gives each image an equal share.
    max_total_bytes: int = Field(default=20 * 1024 * 1024, ge=1024)
    # Fetching a client's image URL from a private or loopback address is refused unless
    # allowed here (the gateway would otherwise relay its own network's content).
    fetch_private: bool = False


class CompactionConfig(_Strict):
    """``compaction:`` (or ``model_info.compaction``): SPEC §4.1 thresholds."""

    enabled: bool = True
    trigger_ratio: float = Field(default=0.85, ge=0.5, le=0.99)
    block_ratio: float | None = Field(default=None, ge=0.5, le=0.99)
    reserved_context_size: int = Field(default=50_000, ge=0)
    max_attempts: int = Field(default=5, ge=1, le=20)
    summarizer_model: str | None = None
    # The share of what is left of the request deadline a summary call may take; when it
    # runs out the window-trimming safety net answers instead.
    summary_time_share: float = Field(default=0.5, gt=0, le=0.9)
    # The recall tool: offered to the model on requests that carry a compaction,
    # answered by the gateway from the session's archive.
    recall: bool = True
    recall_rounds: int = Field(default=3, ge=1, le=10)
    recall_tool: str = Field(default="context_recall", pattern=r"^[A-Za-z_][A-Za-z0-9_-]{0,47}$")
    recall_max_chars: int = Field(default=12_000, ge=1_000, le=200_000)


class SessionsConfig(_Strict):
    """``sessions:``: where compactions and archives live."""

    data_dir: str = "./data"
    redis_url: str | None = None
    # Sessions whose last compaction is older than this are purged (null: kept until
    # `gateway purge`).
    retention_days: float | None = Field(default=30.0, gt=0)


class GatewayConfig(BaseModel):
    """The whole config file."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    model_list: list[ModelEntry] = Field(default_factory=list)
    gateway: GatewaySection = Field(default_factory=GatewaySection)
    repair: RepairConfig = Field(default_factory=RepairConfig)
    recovery: RecoveryConfig = Field(default_factory=RecoveryConfig)
    media: MediaConfig = Field(default_factory=MediaConfig)
    compaction: CompactionConfig = Field(default_factory=CompactionConfig)
    sessions: SessionsConfig = Field(default_factory=SessionsConfig)
    environment_variables: dict[str, str] = Field(default_factory=dict)
    # What the gateway honours of router_settings / litellm_settings / general_settings.
    _router: RouterSettings = PrivateAttr(default_factory=RouterSettings)

    @property
    def router(self) -> RouterSettings:
        """The LiteLLM router, litellm and general settings the gateway honours."""
        return self._router

    def model(self, name: str) -> ModelEntry | None:
        """The first entry (deployment) clients address as ``name``."""
        for entry in self.model_list:
            if entry.model_name == name:
                return entry
        return None

    def client_keys(self) -> list[str | ApiKeyEntry]:
        """Every accepted client key: ``gateway.api_keys`` plus LiteLLM's master key
        (``general_settings.master_key`` or ``LITELLM_MASTER_KEY``)."""
        keys = list(self.gateway.api_keys)
        master = self._router.master_key
        if master and all(master != (k if isinstance(k, str) else k.key) for k in keys):
            keys.append(master)
        return keys

    def secrets(self) -> list[str]:
        """Every secret the config holds, resolved (``os.environ/`` references included):
        client keys and the master key, upstream keys and any other value under a
        secret-named key (``aws_secret_access_key``, ``aws_access_key_id``, a
        ``*_webhook_url``, an ``Authorization`` header...), every ``environment_variables``
        value but a plainly public one (a host, an address, a URL without a password, a
        number; a Slack/Teams webhook URL is no public URL), every URL of
        ``general_settings.alerting*`` and every password in a URL. The one list that
        every redaction path masks (``gateway.redact``)."""
        found = [k if isinstance(k, str) else k.key for k in self.client_keys()]
        dumped = self.model_dump(mode="json")
        dumped["gateway"].pop("api_keys")  # above, without the owner names
        for name in ALL_SECRET_SECTIONS:
            section = dumped.pop(name, None) or {}
            found += _secret_strings(section, False)  # secret-named keys, URL passwords
            found += [value for key, value in section.items() if isinstance(value, str)
                      and not SECRET_NAME.search(str(key))
                      and (not _plainly_public(value) or WEBHOOK_URL.match(value.strip()))]
        found += _secret_strings(dumped, False)
        found += _secret_strings(self._router.redis_url, False)
        found += self._router.alert_urls
        return list(dict.fromkeys(found))


# An environment value that is plainly not a secret (a host, an address, a URL without a
# password, a number, a boolean): masking "127.0.0.1" or "localhost" would blank every log
# line that names it.
_PUBLIC_VALUE = re.compile(
    r"(?i)^(?:\d+(?:\.\d+)*|true|false|yes|no|on|off|localhost"
    r"|[a-z0-9-]+(?:\.[a-z0-9-]+)+(?::\d+)?|[a-z][a-z0-9+.-]*://[^@\s]*)$")


def _plainly_public(value: str) -> bool:
    return _PUBLIC_VALUE.match(value.strip()) is not None


def _secret_strings(node: Any, secret: bool) -> list[str]:
    """The strings of ``node`` under a secret-named key (and every URL password)."""
    if isinstance(node, dict):
        return [s for key, value in node.items()
                for s in _secret_strings(value, secret or SECRET_NAME.search(str(key)) is not None)]
    if isinstance(node, list):
        return [s for value in node for s in _secret_strings(value, secret)]
    if not isinstance(node, str):
        return []
    found = [m["pw"] for m in URL_PASSWORD.finditer(node)]
    if secret:
        found.append(node)
        scheme = _AUTH_SCHEME.match(node.strip())
        if scheme:  # "Bearer <token>": the token alone may be echoed too
            found.append(scheme["token"])
    return found


# Where a client key is written (a plain entry, or an entry's ``key``).
_CLIENT_KEY_PATH = re.compile(r"gateway\.api_keys\[\d+\](?:\.key)?")


def _resolve_env(node: Any, path: str, env: Mapping[str, str]) -> Any:
    """Replace every ``os.environ/NAME`` string with the variable's value in ``env``."""
    if isinstance(node, dict):
        return {k: _resolve_env(v, f"{path}.{k}" if path else str(k), env)
                for k, v in node.items()}
    if isinstance(node, list):
        return [_resolve_env(v, f"{path}[{i}]", env) for i, v in enumerate(node)]
    if isinstance(node, str) and node.startswith(ENV_PREFIX):
        name = node[len(ENV_PREFIX) :]
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
            raise ConfigError(f"{path}: {node!r} is not a valid environment variable reference")
        value = env.get(name)
        if value is None:
            raise ConfigError(f"{path}: environment variable {name} is not set")
        if not value.strip() and _CLIENT_KEY_PATH.fullmatch(path):
            raise ConfigError(f"{path}: environment variable {name} is empty, and a client "
                              "key cannot be (set it, or remove the entry)")
        return value
    return node


def _format_validation_error(err: ValidationError) -> str:
    lines = []
    for item in err.errors():
        loc = ".".join(str(p) if not isinstance(p, int) else f"[{p}]" for p in item["loc"])
        loc = loc.replace(".[", "[")
        msg = item["msg"]
        if item["type"] == "extra_forbidden":
            msg = "unknown key"
        # Never echo the offending value: it may be a secret.
        lines.append(f"{loc or '<root>'}: {msg}")
    return "invalid config:\n  " + "\n  ".join(lines)


def parse_config(raw: Any, *, source: str = "<config>",
                 config_dir: Path | None = None) -> GatewayConfig:
    """Validate an already-loaded YAML document (read from a file in ``config_dir``, where
    the modules of LiteLLM custom handlers it names are looked for). Raises ConfigError."""
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ConfigError(f"{source}: the config must be a mapping at the top level")
    raw = dict(raw)
    if "include" in raw:
        raise ConfigError("include: files are included when a config file is read "
                          "(gateway serve --config FILE), not in a config given as a mapping")
    env: Mapping[str, str] = os.environ
    env_vars = raw.get("environment_variables")
    if isinstance(env_vars, dict):
        # Any scalar, as LiteLLM (REDIS_PORT: 6379 is an int in YAML); an empty one is unset.
        env_vars = {k: str(v) if isinstance(v, int | float | bool) else v
                    for k, v in env_vars.items() if v is not None}
        # A value may itself be a reference (``KEY: os.environ/VAULT_KEY``): resolved from
        # the process environment first, as LiteLLM does; used as written it would make a
        # master key the public text "os.environ/VAULT_KEY".
        env_vars = raw["environment_variables"] = {
            k: _resolve_env(v, f"environment_variables.{k}", os.environ)
            for k, v in env_vars.items()}
        # LiteLLM applies these before resolving os.environ/ references, over the process
        # environment's values; so do we (the environment itself is only touched at
        # start-up: gateway.startup, which names a value it replaces).
        env = {**os.environ, **{str(k): str(v) for k, v in env_vars.items()}}
    _with_credentials(raw)
    if "model_list" in raw:
        raw["model_list"] = with_provider_env(raw["model_list"], env)
    try:
        router = parse_litellm_settings(raw, lambda value, path: _resolve_env(value, path, env),
                                        env, config_dir)
    except LiteLLMSettingsError as err:
        raise ConfigError(str(err)) from None
    typos = model_entry_typos(raw.get("model_list")) + missing_endpoints(
        _resolve_env(raw.get("model_list"), "model_list", env))
    if typos:
        raise ConfigError("invalid config:\n  " + "\n  ".join(typos))
    for name in IGNORED_LITELLM_SECTIONS:
        raw.pop(name, None)
    unknown = _unknown_sections(raw)
    if unknown:
        router = replace(router, ignored=(*router.ignored, *unknown))
    _apply_litellm_to_gateway(raw, router)
    if router.ignored:
        log.warning("ignoring LiteLLM settings the gateway does not use: %s",
                    ", ".join(router.ignored))
    resolved = _resolve_env(raw, "", env)
    unsent = _url_credentials(resolved.get("model_list"))
    if unsent:
        log.warning("not sending %s: its api_base carries credentials, sent as Basic auth "
                    "in the Authorization header (as LiteLLM's HTTP client does)",
                    ", ".join(unsent))
    try:
        config = GatewayConfig.model_validate(resolved)
    except ValidationError as err:
        raise ConfigError(_format_validation_error(err)) from None
    config._router = router
    _check_deployment_numbers(config)
    _check_fleet(config)
    _check_owners(config)
    config._router = _retry_policies_by_group(router)
    return config


def _retry_policies_by_group(router: RouterSettings) -> RouterSettings:
    """``model_group_retry_policy`` keyed by the groups requests resolve to: a policy written
    for an alias is its group's (unless the group has its own), else it would never apply."""
    aliases = {alias: group for alias, group, _hidden in router.model_group_alias}
    own = dict(router.group_retry_policy)
    for name, policy in router.group_retry_policy:
        group = aliases.get(name)
        if group is not None and group not in own:
            own[group] = policy
    if len(own) == len(router.group_retry_policy):
        return router
    return replace(router, group_retry_policy=tuple(own.items()))


_KEY_LABEL = re.compile(r"api_keys\[\d+\]")


def _check_owners(config: GatewayConfig) -> None:
    """``repair.owners`` and ``gateway.ui_admin_owners`` must name owners of
    ``gateway.api_keys`` (a typo would silently leave that team's traffic under the wider
    policy, or its inspector empty)."""
    named = {k.owner for k in config.gateway.api_keys
             if isinstance(k, ApiKeyEntry) and k.owner is not None}
    for index, key in enumerate(config.gateway.api_keys):
        owner = key.owner if isinstance(key, ApiKeyEntry) else None
        # The names metrics, reports and the inspector give keys without an owner: a team
        # called so would be counted together with such a key.
        if owner is not None and (_KEY_LABEL.fullmatch(owner)
                                  or owner in ("master_key", "anonymous")):
            raise ConfigError(f"gateway.api_keys[{index}].owner: {owner!r} is the name "
                              "reports give a key without an owner; choose another name")
    for owner in config.repair.owners:
        if owner not in named:
            raise ConfigError(f"repair.owners.{owner}: no gateway.api_keys entry has "
                              f"owner {owner!r}")
    for owner in config.gateway.ui_admin_owners:
        if owner not in named:
            raise ConfigError(f"gateway.ui_admin_owners: no gateway.api_keys entry has "
                              f"owner {owner!r}")


def _unknown_sections(raw: dict[str, Any]) -> list[str]:
    """Top-level ``x-...`` keys, taken out of ``raw``: blocks that only hold YAML anchors
    for the deployments (``x-openai: &openai``, as compose files name them). LiteLLM ignores
    every unknown top-level key; the gateway names these at start-up and refuses any other
    unknown one with the key (a misspelt section's settings would silently not apply)."""
    known = (*GatewayConfig.model_fields, *IGNORED_LITELLM_SECTIONS, "include")
    unknown: list[str] = []
    problems: list[str] = []
    for key in list(raw):
        if not isinstance(key, str) or key in known:
            continue
        if key.startswith("x-"):
            unknown.append(key)
            raw.pop(key)
            continue
        close = difflib.get_close_matches(key, known, n=1, cutoff=_SECTION_TYPO_CUTOFF)
        problems.append(f"{key}: unknown key (did you mean {close[0]}?)" if close else
                        f"{key}: unknown key (a block that only holds YAML anchors is "
                        "accepted when its name starts with x-)")
    if problems:
        raise ConfigError("invalid config:\n  " + "\n  ".join(problems))
    return unknown


def _apply_litellm_to_gateway(raw: dict[str, Any], router: RouterSettings) -> None:
    """LiteLLM settings that are the gateway's own under another name, applied where the
    ``gateway:`` section does not set them: ``litellm_settings.json_logs`` (one JSON object
    per log line) and ``general_settings.max_request_size_mb`` (larger bodies get 413)."""
    section = raw.get("gateway")
    if section is not None and not isinstance(section, dict):
        return  # validation names it
    adjusted = dict(section or {})
    if router.json_logs:
        adjusted.setdefault("log_format", "json")
    if router.max_request_bytes is not None:
        adjusted.setdefault("max_body_bytes", router.max_request_bytes)
    if adjusted != (section or {}):
        raw["gateway"] = adjusted


def _with_credentials(raw: dict[str, Any]) -> None:
    """LiteLLM's ``credential_list``: a deployment naming one
    (``litellm_params.litellm_credential_name``) gets its ``credential_values`` for every key
    it does not set itself (as LiteLLM). A name no credential has stops start-up (the
    deployment would be sent without its key, or to a provider's public endpoint). When
    deployments use the list, it is consumed; a list nobody names is reported as ignored."""
    entries = raw.get("model_list")
    if not isinstance(entries, list) or not any(
            isinstance(e, Mapping) and isinstance(e.get("litellm_params"), Mapping)
            and "litellm_credential_name" in e["litellm_params"] for e in entries):
        return
    credentials: dict[str, Mapping[str, Any]] = {}
    listed = raw.get("credential_list")
    for i, item in enumerate(listed if isinstance(listed, list) else []):
        if not isinstance(item, Mapping) or not isinstance(item.get("credential_name"), str):
            raise ConfigError(f"credential_list[{i}]: needs a credential_name")
        values = item.get("credential_values") or {}
        if not isinstance(values, Mapping):
            raise ConfigError(f"credential_list[{i}].credential_values: must be a mapping")
        credentials[item["credential_name"]] = values
    merged = []
    for i, entry in enumerate(entries):
        params = entry.get("litellm_params") if isinstance(entry, Mapping) else None
        if not isinstance(params, Mapping) or "litellm_credential_name" not in params:
            merged.append(entry)
            continue
        name = params["litellm_credential_name"]
        if not isinstance(name, str) or name not in credentials:
            raise ConfigError(f"model_list[{i}].litellm_params.litellm_credential_name: no "
                              f"credential_list entry is named {name!r}")
        own = {k: v for k, v in params.items() if k != "litellm_credential_name"}
        merged.append({**entry, "litellm_params": {**credentials[name], **own}})
    raw["model_list"] = merged
    raw.pop("credential_list", None)


# Providers whose key goes in a header of its own (api-key, x-api-key): Basic auth from an
# api_base's credentials leaves it in place.
_OWN_KEY_HEADER = ("azure", "anthropic")


def _url_credentials(entries: Any) -> list[str]:
    """An ``api_base`` with credentials (``https://user:pass@host/v1``, a basic-auth proxy in
    front of a self-hosted server) is sent as LiteLLM's HTTP client sends it: the URL
    without them, ``Authorization: Basic ...`` (unless ``extra_headers`` sets an
    Authorization itself), and no Bearer key, which that header replaces (its key path
    returned, for the start-up warning). ``entries`` (the resolved ``model_list``) is
    changed in place; aiohttp refuses a URL with credentials beside an Authorization
    header, so every request to such a deployment failed."""
    from yarl import URL  # (aiohttp's URL type)

    unsent: list[str] = []
    for i, entry in enumerate(entries if isinstance(entries, list) else []):
        params = entry.get("litellm_params") if isinstance(entry, dict) else None
        base = params.get("api_base") if isinstance(params, dict) else None
        if not isinstance(params, dict) or not isinstance(base, str) or "@" not in base:
            continue
        try:
            url = URL(base.strip())
        except ValueError:
            continue  # validation names the key
        if url.user is None and url.password is None:
            continue
        headers = params.get("extra_headers")
        headers = dict(headers) if isinstance(headers, dict) else {}
        if not any(str(k).lower() == "authorization" for k in headers):
            headers["Authorization"] = encode_basic_auth(url.user or "", url.password or "")
        changed = {**params, "api_base": str(url.with_user(None)), "extra_headers": headers}
        if params.get("api_key") and provider_of(params) not in _OWN_KEY_HEADER:
            changed.pop("api_key")
            unsent.append(f"model_list[{i}].litellm_params.api_key")
        entry["litellm_params"] = changed
    return unsent


# The numbers the router reads from a model entry (in litellm_params or on the entry).
DEPLOYMENT_NUMBERS = ("rpm", "tpm", "weight", "order")


def _check_deployment_numbers(config: GatewayConfig) -> None:
    """``rpm``/``tpm``/``weight``/``order`` must be numbers (a numeric string counts: an
    ``os.environ/`` reference resolves to one); anything else would silently lift a rate
    limit or change the traffic split, so it stops start-up with the key path. So do an
    ``extra_body`` that is not a mapping and ``additional_drop_params`` that are not a list
    of field names (either would be silently not applied), ``headers`` no request could
    carry (a line break inside a value), and a deployment's own ``cooldown_time`` /
    ``allowed_fails`` / ``allowed_fails_policy`` that are not counts."""
    for i, entry in enumerate(config.model_list):
        extras = entry.litellm_params.extras()
        body = extras.get("extra_body")
        if body is not None and not isinstance(body, dict):
            raise ConfigError(f"model_list[{i}].litellm_params.extra_body: must be a mapping "
                              "of request fields")
        plain = extras.get("headers")
        if plain is not None and (not isinstance(plain, dict) or any(
                _UNSENDABLE.search(str(v).strip()) for v in plain.values())):
            raise ConfigError(f"model_list[{i}].litellm_params.headers: must be a mapping of "
                              "header names to values without control characters")
        drop = extras.get("additional_drop_params")
        if drop is not None and (not isinstance(drop, list)
                                 or not all(isinstance(f, str) for f in drop)):
            raise ConfigError(f"model_list[{i}].litellm_params.additional_drop_params: must "
                              "be a list of field names")
        try:
            deployment_failure_policy(extras, entry.model_info.model_extra or {},
                                      f"model_list[{i}]")
        except LiteLLMSettingsError as err:
            raise ConfigError(str(err)) from None
        for where, values in (("litellm_params", entry.litellm_params.extras()),
                              ("", entry.model_extra or {}),
                              ("model_info", entry.model_info.model_extra or {})):
            for key in DEPLOYMENT_NUMBERS if where != "model_info" else ("rpm", "tpm"):
                value = values.get(key)
                if value is None:
                    continue
                path = f"model_list[{i}].{where + '.' if where else ''}{key}"
                if isinstance(value, bool) or not isinstance(value, int | float | str):
                    raise ConfigError(f"{path}: must be a number")
                try:
                    number = float(value)
                except ValueError:
                    raise ConfigError(f"{path}: must be a number") from None
                if number < 0 or number != number:
                    raise ConfigError(f"{path}: must be >= 0")


def _wildcard_serves(patterns: list[str], name: str) -> bool:
    """True when a wildcard ``model_name`` (``openai/*``, ``*``) matches ``name``."""
    return any(re.fullmatch("(.+)".join(re.escape(part) for part in pattern.split("*")), name,
                            re.S) for pattern in patterns)


def _check_fleet(config: GatewayConfig) -> None:
    """Names the router settings refer to must exist (a typo would silently never route, or
    never fall back), and every deployment id must be its own."""
    groups = {entry.model_name for entry in config.model_list}
    owner_of_id: dict[str, int] = {}
    for index, entry in enumerate(config.model_list):
        found = (entry.model_info.model_extra or {}).get("id")
        if found is None:
            continue
        if str(found) in owner_of_id:
            raise ConfigError(f"model_list[{index}].model_info.id: {str(found)!r} is already "
                              f"the id of model_list[{owner_of_id[str(found)]}] (each "
                              "deployment needs its own id)")
        owner_of_id[str(found)] = index
    ids = set(owner_of_id)
    patterns = [name for name in groups if "*" in name]
    router = config.router
    for alias, group, _hidden in router.model_group_alias:
        if group not in groups and not _wildcard_serves(patterns, group):
            raise ConfigError(f"router_settings.model_group_alias.{alias}: no model_list entry "
                              f"is named {group!r}")
    chains = (("fallbacks", router.fallbacks),
              ("context_window_fallbacks", router.context_window_fallbacks),
              ("content_policy_fallbacks", router.content_policy_fallbacks))
    aliases = {alias for alias, _g, _h in router.model_group_alias}

    def served(name: str) -> bool:
        return (name in groups or name in aliases or name in ids
                or _wildcard_serves(patterns, name))

    # LiteLLM looks a chain up by the group's name without its provider prefix too:
    # ``gpt-4o: [claude]`` is the chain of ``openai/gpt-4o`` (an ``openai/*`` entry's name).
    # Such a source must be a model that provider has (litellm's model map): with any
    # provider wildcard, a typo would otherwise pass as a name it could serve.
    prefixes = {name.partition("/")[0] for name in (*groups, *aliases) if "/" in name}

    def prefixed(name: str) -> bool:
        return any(served(f"{prefix}/{name}") and lookup_model(f"{prefix}/{name}") is not None
                   for prefix in prefixes if prefix != "*")

    for key, chain in chains:
        for source, targets in chain:
            if source != "*" and not served(source) and not prefixed(source):
                raise ConfigError(f"{router.section_of(key)}.{key}: the fallbacks of {source!r} "
                                  "would never be used: no model_list entry is named so (nor "
                                  "has it as model_info.id or alias)")
            for target in targets:
                if not served(target):
                    raise ConfigError(f"{router.section_of(key)}.{key}.{source}: no model_list "
                                      f"entry is named {target!r} (nor has it as "
                                      "model_info.id)")
    for group, _policy in router.group_retry_policy:
        if not served(group):
            raise ConfigError(f"router_settings.model_group_retry_policy.{group}: no "
                              f"model_list entry is named {group!r}")
    for target in router.default_fallbacks:
        if not served(target):
            raise ConfigError(f"{router.section_of('default_fallbacks')}.default_fallbacks: "
                              f"no model_list entry is named {target!r} (nor has it as "
                              "model_info.id)")


def _read_yaml(p: Path, what: str) -> Any:
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise ConfigError(f"cannot read {what} {p}: {err.__class__.__name__}") from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        raise ConfigError(f"{p}: not valid YAML{where}") from None


def _with_includes(raw: dict[str, Any], base: Path, seen: frozenset[Path]) -> dict[str, Any]:
    """LiteLLM's ``include:``: each named file (relative to the including file) is merged in,
    in order: a list the config already has is extended (``model_list``), any other key is
    set from the included file (replacing the config's own, as LiteLLM does: named in a
    warning). An included file may include others; a cycle stops start-up."""
    names = raw.pop("include")
    if isinstance(names, str):
        names = [names]
    if not isinstance(names, list) or not all(isinstance(n, str) and n for n in names):
        raise ConfigError("include: must be a file name or a list of file names")
    for i, name in enumerate(names):
        path = (base / name).resolve()
        if path in seen:
            raise ConfigError(f"include[{i}]: {name} includes itself (directly or through "
                              "another file)")
        if not path.is_file():
            raise ConfigError(f"include[{i}]: included file {name} not found (looked for "
                              f"{path})")
        included = _read_yaml(path, "included file")
        if included is None:
            continue
        if not isinstance(included, dict):
            raise ConfigError(f"include[{i}]: {name} must be a mapping at the top level")
        if "include" in included:
            included = _with_includes(dict(included), path.parent, seen | {path})
        for key, value in included.items():
            if isinstance(value, list) and isinstance(raw.get(key), list):
                raw[key] = [*raw[key], *value]
                continue
            if key in raw:
                log.warning("include: %s replaces the config's own %s (LiteLLM's include "
                            "sets keys other than lists from the included file)", name, key)
            raw[key] = value
    return raw


def load_document(path: str | Path) -> Any:
    """A config file as one YAML document, its ``include:`` files merged in (LiteLLM's
    semantics). Raises ConfigError naming the file (and the line of a YAML error)."""
    p = Path(path)
    raw = _read_yaml(p, "config")
    if isinstance(raw, dict) and "include" in raw:
        raw = _with_includes(dict(raw), p.resolve().parent, frozenset({p.resolve()}))
    return raw


def load_config(path: str | Path) -> GatewayConfig:
    """Read and validate a YAML config file (and the files it includes). Raises
    ConfigError."""
    return parse_config(load_document(path), source=str(path),
                        config_dir=Path(path).resolve().parent)


ModelInfo.model_rebuild()
