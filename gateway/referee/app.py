"""The referee server: an OpenAI-compatible upstream that refuses what strict providers refuse.

Endpoints:
- ``POST /v1/chat/completions``: scripted replies first (see ``Referee.script``), then, in
  order: auth, JSON, wire rules, image rules, context window; a refusal is the provider's
  real error body for the configured style, an accepted request gets a ``chat.completion``
  (or an SSE stream of ``chat.completion.chunk`` events when ``stream: true``).
- ``GET /v1/models``: the configured model ids.
- ``GET /_referee/requests``: the recorded chat requests as JSON (auth headers redacted).

Only chat-completion requests are recorded. Every answer carries ``x-request-id``; the
Anthropic style also sends ``request-id`` (the same id its error bodies name).
"""

from __future__ import annotations

import json
import secrets
import uuid
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from types import TracebackType
from typing import Any

from aiohttp import web

from gateway.referee import bodies, completions
from gateway.referee.bodies import STYLES, Reply, Style
from gateway.referee.images import ImageLimits, find_image_problem, normalize_format
from gateway.referee.rules import RULE_SETS, Rules, check, json_kind, to_violation

_AUTH_HEADERS = frozenset({"authorization", "x-api-key", "api-key"})
_BASE58 = "123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz"


@dataclass(frozen=True, slots=True)
class RefereeConfig:
    """How the referee judges and answers.

    ``context_window`` is in estimated tokens (``completions.estimate_tokens``: a quarter of
    the compact JSON length of messages plus tools). Image limits apply to data-URL images;
    ``allowed_image_formats`` takes names like ``png``/``jpeg``. ``require_auth`` is the key
    expected in ``Authorization: Bearer`` (openai style) or ``x-api-key`` (anthropic style).
    """

    rules: Rules = "strict"
    style: Style = "openai"
    context_window: int | None = None
    max_image_side: int | None = None
    allowed_image_formats: frozenset[str] | None = None
    max_image_bytes: int | None = None
    require_auth: str | None = None
    models: tuple[str, ...] = ("referee",)

    def __post_init__(self) -> None:
        if self.rules not in RULE_SETS:
            raise ValueError(f"rules must be one of {RULE_SETS}, got {self.rules!r}")
        if self.style not in STYLES:
            raise ValueError(f"style must be one of {STYLES}, got {self.style!r}")
        if self.allowed_image_formats is not None:
            formats = frozenset(normalize_format(f) for f in self.allowed_image_formats)
            object.__setattr__(self, "allowed_image_formats", formats)

    @property
    def image_limits(self) -> ImageLimits:
        """The image settings as checked by ``images.find_image_problem``."""
        return ImageLimits(self.max_image_side, self.allowed_image_formats, self.max_image_bytes)


@dataclass(slots=True)
class RecordedRequest:
    """One chat request as received, and what the referee answered."""

    method: str
    path: str
    headers: tuple[tuple[str, str], ...]
    body: bytes
    status: int | None = None
    situation: str | None = None

    def header(self, name: str) -> str | None:
        """A header value by case-insensitive name, or None."""
        wanted = name.lower()
        return next((v for k, v in self.headers if k.lower() == wanted), None)

    def json(self) -> Any:
        """The body parsed as JSON."""
        return json.loads(self.body)


@dataclass(slots=True)
class RefereeState:
    """Mutable per-app state: the config, recorded requests, queued scripted replies.

    A queued ``None`` means: drop the connection without answering.
    """

    config: RefereeConfig
    requests: list[RecordedRequest] = field(default_factory=list)
    script: deque[Reply | None] = field(default_factory=deque)


STATE = web.AppKey("referee_state", RefereeState)


def _request_id(style: Style) -> str:
    if style == "anthropic":
        return "req_011C" + "".join(secrets.choice(_BASE58) for _ in range(20))
    return "req_" + uuid.uuid4().hex


def _id_headers(style: Style, request_id: str) -> dict[str, str]:
    headers = {"x-request-id": request_id}
    if style == "anthropic":
        headers["request-id"] = request_id
    return headers


def _respond(reply: Reply, style: Style, request_id: str) -> web.Response:
    headers = _id_headers(style, request_id)
    headers.update(reply.headers)
    headers["Content-Type"] = reply.content_type
    return web.Response(status=reply.status, body=reply.body, headers=headers)


def _auth_failure(config: RefereeConfig, request: web.Request, request_id: str) -> Reply | None:
    expected = config.require_auth
    if expected is None:
        return None
    if config.style == "openai":
        header = request.headers.get("Authorization")
        key = header[7:] if header is not None and header[:7].lower() == "bearer " else None
    else:
        key = request.headers.get("x-api-key")
    if key == expected:
        return None
    return bodies.unauthorized(config.style, key, request_id=request_id)


@dataclass(frozen=True, slots=True)
class _Verdict:
    body: dict[str, Any] | None
    reply: Reply | None = None
    situation: str | None = None


def _judge(config: RefereeConfig, raw: bytes, request_id: str) -> _Verdict:
    style = config.style
    try:
        body = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        status, _, error = bodies.render("invalid_json", style, {}, request_id)
        return _Verdict(None, Reply(status, error), "shape")
    if not isinstance(body, dict):
        values = {"path": "body", "expected": "an object", "got": json_kind(body)}
        status, _, error = bodies.render("invalid_type", style, values, request_id)
        return _Verdict(None, Reply(status, error), "shape")
    violation = check(body, config.rules, style, request_id=request_id)
    if violation is None:
        problem = find_image_problem(body, config.image_limits)
        violation = None if problem is None else to_violation(problem, style, request_id)
    if violation is not None:
        return _Verdict(None, Reply(violation.status, violation.body), violation.situation)
    if config.context_window is not None:
        message_tokens = completions.estimate_tokens(body["messages"])
        tool_tokens = completions.estimate_tokens(body.get("tools"))
        if message_tokens + tool_tokens > config.context_window:
            reply = bodies.overflow(
                style,
                window=config.context_window,
                message_tokens=message_tokens,
                tool_tokens=tool_tokens,
                request_id=request_id,
            )
            return _Verdict(None, reply, "i")
    return _Verdict(body)


async def _chat(request: web.Request) -> web.StreamResponse:
    state = request.app[STATE]
    config = state.config
    request_id = _request_id(config.style)
    raw = await request.read()
    record = RecordedRequest(request.method, request.path, tuple(request.headers.items()), raw)
    state.requests.append(record)
    if state.script:
        scripted = state.script.popleft()
        if scripted is None:
            if request.transport is not None:
                request.transport.abort()
            raise web.HTTPServiceUnavailable()  # never reaches the client: the socket is gone
        record.status = scripted.status
        return _respond(scripted, config.style, request_id)
    auth = _auth_failure(config, request, request_id)
    verdict = _Verdict(None, auth, "auth") if auth is not None else _judge(config, raw, request_id)
    if verdict.reply is not None:
        record.status, record.situation = verdict.reply.status, verdict.situation
        return _respond(verdict.reply, config.style, request_id)
    body = verdict.body
    assert body is not None
    record.status = 200
    answer = completions.decide(body)
    completion_id = completions.new_completion_id()
    headers = _id_headers(config.style, request_id)
    if body.get("stream") is not True:
        payload = completions.completion(body, answer, completion_id)
        return web.json_response(payload, headers=headers)
    headers["Content-Type"] = "text/event-stream; charset=utf-8"
    headers["Cache-Control"] = "no-cache"
    response = web.StreamResponse(status=200, headers=headers)
    await response.prepare(request)
    for event in completions.stream_events(body, answer, completion_id):
        await response.write(event)
    await response.write_eof()
    return response


async def _models(request: web.Request) -> web.Response:
    config = request.app[STATE].config
    request_id = _request_id(config.style)
    auth = _auth_failure(config, request, request_id)
    if auth is not None:
        return _respond(auth, config.style, request_id)
    data = [
        {"id": model, "object": "model", "created": 1_700_000_000, "owned_by": "referee"}
        for model in config.models
    ]
    return web.json_response(
        {"object": "list", "data": data}, headers=_id_headers(config.style, request_id)
    )


async def _not_found(request: web.Request) -> web.Response:
    config = request.app[STATE].config
    request_id = _request_id(config.style)
    reply = bodies.not_found(config.style, request.method, request.path, request_id=request_id)
    return _respond(reply, config.style, request_id)


def _shown_body(raw: bytes) -> Any:
    try:
        return json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        return raw.decode("utf-8", "replace")


async def _recorded(request: web.Request) -> web.Response:
    listing = [
        {
            "method": r.method,
            "path": r.path,
            "headers": {k: ("***" if k.lower() in _AUTH_HEADERS else v) for k, v in r.headers},
            "body": _shown_body(r.body),
            "status": r.status,
            "situation": r.situation,
        }
        for r in request.app[STATE].requests
    ]
    return web.json_response(listing)


def create_referee_app(config: RefereeConfig) -> web.Application:
    """The referee as an aiohttp application (state in ``app[STATE]``)."""
    app = web.Application(client_max_size=256 * 1024 * 1024)
    app[STATE] = RefereeState(config)
    app.router.add_post("/v1/chat/completions", _chat)
    app.router.add_get("/v1/models", _models)
    app.router.add_get("/_referee/requests", _recorded)
    app.router.add_route("*", "/v1/{tail:.*}", _not_found)
    return app


class Referee:
    """A referee served on 127.0.0.1 (random port) for the length of an ``async with``.

    ``base_url`` ends in ``/v1``; ``requests`` lists what arrived, in order; ``script``
    queues canned replies served before normal judging; ``configure`` changes settings.
    """

    def __init__(
        self,
        rules: Rules = "strict",
        style: Style = "openai",
        *,
        context_window: int | None = None,
        max_image_side: int | None = None,
        allowed_image_formats: Iterable[str] | None = None,
        max_image_bytes: int | None = None,
        require_auth: str | None = None,
        models: tuple[str, ...] = ("referee",),
    ) -> None:
        formats = None if allowed_image_formats is None else frozenset(allowed_image_formats)
        config = RefereeConfig(
            rules=rules,
            style=style,
            context_window=context_window,
            max_image_side=max_image_side,
            allowed_image_formats=formats,
            max_image_bytes=max_image_bytes,
            require_auth=require_auth,
            models=models,
        )
        self.app = create_referee_app(config)
        self._runner: web.AppRunner | None = None
        self.base_url = ""

    @property
    def state(self) -> RefereeState:
        """The live state shared with the server."""
        return self.app[STATE]

    @property
    def config(self) -> RefereeConfig:
        """The current settings."""
        return self.state.config

    @property
    def requests(self) -> list[RecordedRequest]:
        """The chat requests received so far, in order."""
        return self.state.requests

    def configure(self, **changes: Any) -> None:
        """Change settings for the following requests (RefereeConfig field names)."""
        self.state.config = replace(self.state.config, **changes)

    def script(
        self,
        status: int | Reply,
        body: bytes | str | Mapping[str, Any] = b"",
        headers: Mapping[str, str] | None = None,
        *,
        times: int = 1,
    ) -> None:
        """Queue a canned reply (a ``Reply`` or status/body/headers) ``times`` times.

        A mapping body is sent as JSON. Queued replies are served in order, one per chat
        request, before any judging (auth included).
        """
        if isinstance(status, Reply):
            reply = status
        else:
            if isinstance(body, Mapping):
                raw = json.dumps(body).encode()
            else:
                raw = body.encode() if isinstance(body, str) else body
            content_type = "application/json"
            extra = []
            for name, value in (headers or {}).items():
                if name.lower() == "content-type":
                    content_type = value
                else:
                    extra.append((name, value))
            reply = Reply(status, raw, tuple(extra), content_type)
        self.state.script.extend([reply] * times)

    def script_disconnect(self, *, times: int = 1) -> None:
        """Queue a dropped connection: the next chat request gets no answer at all."""
        self.state.script.extend([None] * times)

    async def __aenter__(self) -> Referee:
        runner = web.AppRunner(self.app, access_log=None, shutdown_timeout=5.0)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        self._runner = runner
        host, port = runner.addresses[0][:2]
        self.base_url = f"http://{host}:{port}/v1"
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None


def run_referee(
    host: str = "127.0.0.1",
    port: int = 8099,
    rules: Rules = "strict",
    style: Style = "openai",
    **settings: Any,
) -> None:
    """Serve the referee until interrupted (for ``gateway referee``).

    ``settings`` are further ``RefereeConfig`` fields (context_window, max_image_side,
    allowed_image_formats, max_image_bytes, require_auth, models).
    """
    config = RefereeConfig(rules=rules, style=style, **settings)
    web.run_app(create_referee_app(config), host=host, port=port, access_log=None)
