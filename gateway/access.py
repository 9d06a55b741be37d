"""Who may call which route, and what a model request must carry: the narrowing settings of
LiteLLM's ``general_settings`` that its proxy enforces in its auth step, enforced here too.

- ``allowed_ips``: the source addresses served (LiteLLM compares the address exactly; an
  entry here may also be a network, ``10.20.0.0/16``). Others get ``403``. With
  ``use_x_forwarded_for``, the address is the last one of ``X-Forwarded-For`` (what the
  proxy in front saw), else the peer's.
- ``allowed_routes``: the routes exposed (LiteLLM: an exact path, or a ``LiteLLMRoutes``
  group name). A path and its ``/v1`` form name the same endpoint here (``/chat/completions``
  also allows ``/v1/chat/completions``); ``{name}`` in a path matches one segment, and a
  path ending in ``*`` every path under it as written (``/v1/*``: not ``/chat/completions``).
  Others get ``403``.
- ``enforce_user_param``: a model request without a top-level ``user`` gets ``400``.
- ``enforced_params``: a model request without each named field (``metadata.generation_name``
  names a nested one) gets ``400``.
- ``global_max_parallel_requests``: model requests served at once by this process; one
  more gets ``429``.
- ``reject_clientside_metadata_tags``: a model request carrying ``metadata.tags`` (the
  client choosing its routing tags) gets ``400``.

The gateway's own health probes stay open whatever the rules say (an orchestrator must reach
them; they tell nothing). Pure: no I/O.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

IpNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

# The model routes (LiteLLM's ``openai_routes`` / ``llm_api_routes``: what a client key calls
# to reach a model), with and without /v1 as the gateway serves them.
MODEL_ROUTES = (
    "/v1/chat/completions", "/chat/completions", "/v1/responses", "/responses",
    "/v1/responses/compact", "/responses/compact", "/v1/messages", "/messages",
    "/v1/messages/count_tokens", "/messages/count_tokens",
    "/openai/deployments/{deployment}/chat/completions",
    "/engines/{deployment}/chat/completions",
)
# A client's stored Responses answers (retrieve, list its input, delete, cancel).
STORED_RESPONSE_ROUTES = (
    "/v1/responses/{response_id}", "/responses/{response_id}",
    "/v1/responses/{response_id}/input_items", "/responses/{response_id}/input_items",
    "/v1/responses/{response_id}/cancel", "/responses/{response_id}/cancel",
)
INFO_ROUTES = ("/v1/models", "/models", "/v1/models/{model}", "/models/{model}",
               "/v1/model/info", "/model/info")
HEALTH_ROUTES = ("/healthz", "/health/liveliness", "/health/liveness", "/health/readiness")
# ``LiteLLMRoutes`` group names an ``allowed_routes`` entry may use (bare or prefixed with
# ``LiteLLMRoutes.``), as the routes of this gateway they stand for. Groups of LiteLLM's
# management API (keys, teams, spend) stand for no route here: they expose nothing.
ROUTE_GROUPS: Mapping[str, tuple[str, ...]] = {
    "openai_routes": MODEL_ROUTES + STORED_RESPONSE_ROUTES + INFO_ROUTES,
    "llm_api_routes": MODEL_ROUTES + STORED_RESPONSE_ROUTES + INFO_ROUTES,
    "anthropic_routes": ("/v1/messages", "/v1/messages/count_tokens"),
    "info_routes": INFO_ROUTES,
    "public_routes": HEALTH_ROUTES,
    "management_routes": (),
    "spend_tracking_routes": (),
    "global_spend_tracking_routes": (),
    "internal_user_routes": (),
    "self_managed_routes": (),
    "master_key_only_routes": (),
}


@dataclass(frozen=True)
class AccessRules:
    """The narrowing settings of a config (empty: everything as without them)."""

    allowed_ips: tuple[str, ...] = ()
    allowed_routes: tuple[str, ...] = ()
    enforce_user_param: bool = False
    enforced_params: tuple[str, ...] = ()
    max_parallel: int | None = None
    reject_metadata_tags: bool = False
    forwarded_for: bool = False  # use_x_forwarded_for: the client is X-Forwarded-For's last
    # Derived once (read on every request): any rule on a request's address or path; any
    # rule on a model request's body.
    narrows_requests: bool = field(init=False, repr=False, compare=False)
    needs_params: bool = field(init=False, repr=False, compare=False)
    _networks: tuple[IpNetwork, ...] = field(init=False, repr=False, compare=False)
    _routes: re.Pattern[str] | None = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        networks = tuple(ipaddress.ip_network(text, strict=False) for text in self.allowed_ips)
        object.__setattr__(self, "_networks", networks)
        object.__setattr__(self, "_routes", _route_pattern(self.allowed_routes)
                           if self.allowed_routes else None)
        object.__setattr__(self, "narrows_requests",
                           bool(self.allowed_ips or self.allowed_routes))
        object.__setattr__(self, "needs_params", self.enforce_user_param or bool(
            self.enforced_params) or self.reject_metadata_tags)

    def address_allowed(self, address: str | None) -> bool:
        """True when ``address`` (the peer's IP) may call the gateway."""
        if not self._networks:
            return True
        try:
            ip = ipaddress.ip_address((address or "").split("%", 1)[0])
        except ValueError:
            return False  # (a Unix socket, an unknown peer: not in any list)
        if ip.version == 6 and ip.ipv4_mapped is not None:
            ip = ip.ipv4_mapped
        return any(ip in network for network in self._networks)

    def client_address(self, peer: str | None, forwarded: str | None) -> str | None:
        """The address ``allowed_ips`` are compared with: the peer's, or with
        ``use_x_forwarded_for`` the last address of its ``X-Forwarded-For`` header (the one
        the proxy in front appended; earlier ones are the client's word)."""
        if not (self.forwarded_for and forwarded):
            return peer
        last = forwarded.rsplit(",", 1)[-1].strip()
        try:
            return str(ipaddress.ip_address(last))
        except ValueError:
            return None  # (not an address: in no list, and never echoed)

    def route_allowed(self, path: str) -> bool:
        """True when ``path`` is exposed."""
        return self._routes is None or self._routes.fullmatch(path) is not None

    def missing_param(self, body: Mapping[str, Any]) -> str | None:
        """The first required field ``body`` lacks (dotted for a nested one), or None."""
        if self.enforce_user_param and "user" not in body:
            return "user"
        for name in self.enforced_params:
            node: Any = body
            for part in name.split("."):
                if not isinstance(node, Mapping) or part not in node:
                    return name
                node = node[part]
        return None

    def missing_text(self, body: Mapping[str, Any]) -> tuple[str, str] | None:
        """The field a model request's ``body`` lacks (or, with
        ``reject_clientside_metadata_tags``, carries: ``metadata.tags``) and LiteLLM's words
        for it, or None when it is as it must be."""
        metadata = body.get("metadata")
        if self.reject_metadata_tags and isinstance(metadata, Mapping) and "tags" in metadata:
            return "metadata.tags", (
                "Client-side 'metadata.tags' not allowed in request. "
                "'reject_clientside_metadata_tags'=True. Tags can only be set via API key "
                "metadata.")
        missing = self.missing_param(body)
        if missing is None:
            return None
        if missing == "user" and self.enforce_user_param:
            return missing, "'user' param not passed in. 'enforce_user_param'=True"
        # (LiteLLM's words: a nested field as [metadata][generation_name])
        named = missing if "." not in missing else "[" + "][".join(missing.split(".")) + "]"
        return missing, (f"BadRequest please pass param={named} in request body. This is a "
                         "required param (general_settings.enforced_params)")

    def describe(self) -> dict[str, Any]:
        """The rules as ``general_settings`` keys (``check-config``), only those set."""
        described: dict[str, Any] = {}
        if self.allowed_ips:
            described["allowed_ips"] = list(self.allowed_ips)
        if self.allowed_routes:
            described["allowed_routes"] = list(self.allowed_routes)
        if self.enforce_user_param:
            described["enforce_user_param"] = True
        if self.enforced_params:
            described["enforced_params"] = list(self.enforced_params)
        if self.max_parallel is not None:
            described["global_max_parallel_requests"] = self.max_parallel
        if self.reject_metadata_tags:
            described["reject_clientside_metadata_tags"] = True
        if self.forwarded_for:
            described["use_x_forwarded_for"] = True
        return described


def is_model_route(path: str) -> bool:
    """True when ``path`` is one of the routes that call a model."""
    return _MODEL_PATHS.fullmatch(path) is not None


def _route_pattern(routes: tuple[str, ...]) -> re.Pattern[str]:
    """One pattern for every path ``routes`` expose (health probes always)."""
    paths: set[str] = set(HEALTH_ROUTES)
    prefixes: set[str] = set()
    for route in routes:
        group = ROUTE_GROUPS.get(route.removeprefix("LiteLLMRoutes."))
        if group is not None:
            paths.update(group)
            continue
        path = "/" + route.strip().lstrip("/")
        if path.endswith("*"):  # LiteLLM's wildcard: the paths under the prefix, as written
            prefixes.add(path[:-1])
            continue
        bare = path.removeprefix("/v1") if path.startswith("/v1/") else path
        paths.update((bare, "/v1" + bare))
    return _paths_pattern(paths, prefixes)


def _paths_pattern(paths: Iterable[str], prefixes: Iterable[str] = ()) -> re.Pattern[str]:
    """A pattern matching each of ``paths`` (a trailing slash allowed; ``{name}``: one
    segment) and every path starting with one of ``prefixes``."""
    parts = [re.sub(r"\\\{[^/]*?\\\}", "[^/]+", re.escape(path.rstrip("/") or "/"))
             for path in sorted(paths)]
    parts += [re.escape(prefix) + ".*" for prefix in sorted(prefixes)]
    return re.compile("(?:" + "|".join(parts) + ")/?")


_MODEL_PATHS = _paths_pattern(MODEL_ROUTES)
