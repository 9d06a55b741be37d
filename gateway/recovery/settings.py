"""Per-model recovery policy and media limits from the config (``model_info`` overrides)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeVar, cast

from gateway.config import GatewayConfig, MediaConfig, RecoveryConfig
from gateway.projection.media import MediaLimits
from gateway.recovery.policy import RecoveryPolicy, TransientKind
from gateway.routing import ModelRoute, request_deadline

_Section = TypeVar("_Section", RecoveryConfig, MediaConfig)


def _merged(section: _Section, override: _Section | None) -> _Section:
    """The global section with the keys a model's override names (an override changes only
    the keys it sets, as for ``compaction``)."""
    if override is None:
        return section
    return section.model_copy(update=override.model_dump(include=override.model_fields_set))


def _recovery_config(config: GatewayConfig, route: ModelRoute) -> RecoveryConfig:
    return _merged(config.recovery, route.entry.model_info.recovery)


def _media_config(config: GatewayConfig, route: ModelRoute) -> MediaConfig:
    return _merged(config.media, route.entry.model_info.media)


def _transient_retries(config: GatewayConfig, route: ModelRoute, rc: RecoveryConfig) -> int:
    """``recovery.max_transient_retries`` when the config sets it (globally or for the model);
    else LiteLLM's ``num_retries``: the deployment's ``litellm_params``, then
    ``router_settings`` / ``litellm_settings``; else the default."""
    override = route.entry.model_info.recovery
    if "max_transient_retries" in config.recovery.model_fields_set or (
            override is not None and "max_transient_retries" in override.model_fields_set):
        return rc.max_transient_retries
    own = route.entry.litellm_params.extras().get("num_retries")
    if isinstance(own, int) and not isinstance(own, bool) and 0 <= own <= 20:
        return own
    if config.router.num_retries is not None:
        return min(config.router.num_retries, 20)
    return rc.max_transient_retries


def _retries_by_kind(config: GatewayConfig, route: ModelRoute,
                     ) -> tuple[tuple[TransientKind, int], ...]:
    """LiteLLM's ``model_group_retry_policy`` for the route's group, else its
    ``retry_policy``; none when the config sets ``recovery.max_transient_retries`` (the
    gateway's own setting wins, as over ``num_retries``)."""
    override = route.entry.model_info.recovery
    if "max_transient_retries" in config.recovery.model_fields_set or (
            override is not None and "max_transient_retries" in override.model_fields_set):
        return ()
    router = config.router
    policy = dict(router.group_retry_policy).get(route.name, router.retry_policy)
    return tuple((cast(TransientKind, kind), count) for kind, count in policy)


def recovery_policy_for(config: GatewayConfig, route: ModelRoute) -> RecoveryPolicy:
    """The ladder policy for a model: the global section with its ``model_info.recovery``."""
    rc = _recovery_config(config, route)
    return RecoveryPolicy(
        strict_on_structural=rc.strict and config.repair.strict_on_retry
        and config.repair.enabled,
        media_on_refusal=rc.media,
        strip_media_last=rc.strip_media_last,
        compact_on_overflow=rc.compact_on_overflow and config.compaction.enabled,
        max_overflow_compactions=rc.max_overflow_compactions,
        max_transient_retries=_transient_retries(config, route, rc),
        backoff_base=rc.backoff_base,
        backoff_cap=rc.backoff_cap,
        deadline=request_deadline(route.entry, config),
        max_retry_after=rc.max_retry_after,
        retries_by_kind=_retries_by_kind(config, route),
        min_retry_delay=config.router.retry_after,
    )


def media_limits_for(config: GatewayConfig, route: ModelRoute) -> MediaLimits:
    """Media limits for a model: the global section with its ``model_info.media`` keys."""
    mc = _media_config(config, route)
    return MediaLimits(
        max_side=mc.max_side, max_bytes=mc.max_bytes, allowed_formats=tuple(mc.allowed_formats),
        max_total_pixels=mc.max_total_pixels, max_images=mc.max_images,
        max_total_bytes=mc.max_total_bytes,
        max_seconds=_recovery_config(config, route).deadline,
    )


@dataclass(frozen=True, slots=True)
class RouteRecovery:
    """Everything the ladder needs for one model, resolved once from the config."""

    policy: RecoveryPolicy
    media_limits: MediaLimits
    fetch_private: bool


def route_recovery(config: GatewayConfig, route: ModelRoute) -> RouteRecovery:
    """Resolve the ladder settings of a model (the pipeline caches the result per model)."""
    return RouteRecovery(
        policy=recovery_policy_for(config, route),
        media_limits=media_limits_for(config, route),
        fetch_private=_media_config(config, route).fetch_private,
    )
