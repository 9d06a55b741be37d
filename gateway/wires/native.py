"""Native upstream endpoints for the wires: Anthropic ``/v1/messages`` and OpenAI
``/responses``, sent over the gateway's one pooled session.

The sender is the chat passthrough provider pointed at the wire's endpoint with the wire's
own auth headers (the upstream key comes from the route, never from the client), so the
same I/O rules hold: a stream returns once its first event arrived, a refusal is an
``UpstreamError`` the ladder can act on.
"""

from __future__ import annotations

from collections.abc import Mapping

from gateway.config import GatewayConfig
from gateway.providers.answers import (
    ANTHROPIC,
    ANTHROPIC_COUNT,
    RESPONSES,
    RESPONSES_COMPACTED,
    AnswerShape,
)
from gateway.providers.capabilities import lookup_model
from gateway.providers.openai_compat import HttpPool, OpenAICompatProvider, UpstreamTimeouts
from gateway.routing import OPENAI_COMPATIBLE, ModelRoute, anthropic_root, upstream_timeouts

ANTHROPIC_BASE = "https://api.anthropic.com"
ANTHROPIC_VERSION = "2023-06-01"
# Client headers an Anthropic upstream needs to see (the version and beta features).
ANTHROPIC_PASSED = ("anthropic-version", "anthropic-beta")


def native_anthropic(route: ModelRoute) -> bool:
    """True when the route's upstream speaks the Anthropic Messages API natively."""
    return route.provider_name == "anthropic"


def native_responses(route: ModelRoute) -> bool:
    """True when the route's upstream speaks the Responses API (OpenAI itself, or a model
    whose ``model_info.responses_api`` says so)."""
    flag = (route.entry.model_info.model_extra or {}).get("responses_api")
    if isinstance(flag, bool):
        return flag and route.wire == "openai"
    return route.provider_name == "openai" and route.wire == "openai"


def responses_declared(route: ModelRoute) -> bool:
    """True when the route's ``model_info.responses_api`` says it speaks the Responses API
    (then a 404 from its ``/responses`` is the upstream's answer, not a missing endpoint)."""
    return (route.entry.model_info.model_extra or {}).get("responses_api") is True


def responses_only(route: ModelRoute) -> bool:
    """True when the route's model is served at the Responses endpoint alone (its
    ``model_info.mode``, else litellm's model map, says ``responses``: OpenAI's codex and
    pro models), so even the gateway's own calls (summaries) must go there."""
    mode = (route.entry.model_info.model_extra or {}).get("mode")
    if mode is None:
        mode = (lookup_model(route.litellm_model) or {}).get("mode")
    return mode == "responses" and native_responses(route)


def anthropic_url(route: ModelRoute, path: str = "/messages") -> str:
    """``{api_base}/v1/messages`` (or ``/v1/messages/count_tokens``) for the route."""
    return anthropic_root(route.entry.litellm_params.api_base or ANTHROPIC_BASE) + "/v1" + path


def responses_url(route: ModelRoute, path: str = "/responses") -> str:
    """``{api_base}/responses`` (or another ``path`` of the API) for the route."""
    params = route.entry.litellm_params
    base = params.api_base or OPENAI_COMPATIBLE.get(route.provider_name) or ""
    return base.rstrip("/") + path




# The events that end a complete stream of each wire (no ``data: [DONE]`` there).
ANTHROPIC_STREAM_END = (b"message_stop",)
RESPONSES_STREAM_END = (b"response.completed", b"response.failed", b"response.incomplete")
# The events that open a stream of each wire before any output: a refusal may follow them
# (a Responses ``response.failed`` with context_length_exceeded, an Anthropic ``error``).
ANTHROPIC_STREAM_OPENING = (b"message_start", b"ping")
RESPONSES_STREAM_OPENING = (b"response.created", b"response.in_progress", b"response.queued")


class NativeSender(OpenAICompatProvider):
    """Posts a wire body to one native endpoint (see the module docstring)."""

    def __init__(self, name: str, url: str, headers: Mapping[str, str], pool: HttpPool,
                 timeouts: tuple[UpstreamTimeouts, UpstreamTimeouts],
                 end_markers: tuple[bytes, ...], shape: AnswerShape,
                 opening: tuple[bytes, ...] = ()) -> None:
        # ``timeouts``: (non-stream, stream), the chat routes' rules (routing.upstream_timeouts)
        super().__init__(name, api_base=url, api_key=None, pool=pool, timeouts=timeouts[0],
                         stream_timeouts=timeouts[1], extra_headers=headers)
        self.url = url
        self.stream_end_markers = end_markers
        self.stream_opening = opening
        self.answer_shape = shape  # a 200 that is not the wire's answer is unusable (502)


def anthropic_sender(config: GatewayConfig, route: ModelRoute, pool: HttpPool,
                     client_headers: Mapping[str, str], path: str = "/messages") -> NativeSender:
    """A sender to the route's Anthropic endpoint, with the client's version/beta headers."""
    headers: dict[str, str] = dict(route.entry.litellm_params.extra_headers or {})
    key = route.entry.litellm_params.api_key
    if key:
        headers["x-api-key"] = key
    headers["anthropic-version"] = client_headers.get("anthropic-version") or ANTHROPIC_VERSION
    beta = client_headers.get("anthropic-beta")
    if beta:
        headers["anthropic-beta"] = beta
    shape = ANTHROPIC_COUNT if path.endswith("/count_tokens") else ANTHROPIC
    return NativeSender(route.name, anthropic_url(route, path), headers, pool,
                        upstream_timeouts(route.entry, config), ANTHROPIC_STREAM_END, shape,
                        ANTHROPIC_STREAM_OPENING)


def responses_headers(route: ModelRoute) -> dict[str, str]:
    """The headers of a call to the route's Responses API: its configured extra headers and
    its own upstream key (never the client's)."""
    params = route.entry.litellm_params
    headers: dict[str, str] = dict(params.extra_headers or {})
    if params.api_key:
        headers["Authorization"] = f"Bearer {params.api_key}"
    if params.organization:
        headers["OpenAI-Organization"] = params.organization
    return headers


def responses_sender(config: GatewayConfig, route: ModelRoute, pool: HttpPool,
                     path: str = "/responses") -> NativeSender:
    """A sender to the route's Responses endpoint (Bearer upstream key); ``path``
    ``/responses/compact``: its compaction endpoint."""
    headers = responses_headers(route)
    shape = RESPONSES_COMPACTED if path.endswith("/compact") else RESPONSES
    return NativeSender(route.name, responses_url(route, path), headers, pool,
                        upstream_timeouts(route.entry, config), RESPONSES_STREAM_END,
                        shape, RESPONSES_STREAM_OPENING)


class Senders:
    """The native senders of a gateway, each built once: a sender holds no request's state
    (its URL, auth and version headers, timeouts), and building one per request was ~5% of
    a Messages turn. Keyed by deployment, endpoint and the client headers it passes on;
    cleared when ``limit`` different ones were built (beta headers are the client's)."""

    def __init__(self, config: GatewayConfig, pool: HttpPool, limit: int = 512) -> None:
        self._config = config
        self._pool = pool
        self._limit = limit
        # key -> (the deployment's entry, kept alive so its id is not reused; the sender)
        self._built: dict[tuple[object, ...], tuple[object, NativeSender]] = {}

    def anthropic(self, route: ModelRoute, client_headers: Mapping[str, str],
                  path: str = "/messages") -> NativeSender:
        """:func:`anthropic_sender` for ``route`` and the client's version/beta headers."""
        key = ("anthropic", route.name, id(route.entry), path,
               client_headers.get("anthropic-version"), client_headers.get("anthropic-beta"))
        built = self._built.get(key)
        if built is None:
            built = self._keep(key, route, anthropic_sender(
                self._config, route, self._pool, client_headers, path))
        return built[1]

    def responses(self, route: ModelRoute, path: str = "/responses") -> NativeSender:
        """:func:`responses_sender` for ``route``."""
        key = ("responses", route.name, id(route.entry), path)
        built = self._built.get(key)
        if built is None:
            built = self._keep(key, route, responses_sender(self._config, route, self._pool,
                                                            path))
        return built[1]

    def _keep(self, key: tuple[object, ...], route: ModelRoute,
              sender: NativeSender) -> tuple[object, NativeSender]:
        if len(self._built) >= self._limit:
            self._built.clear()
        built = self._built[key] = (route.entry, sender)
        return built
