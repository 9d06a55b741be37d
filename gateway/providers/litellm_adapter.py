"""Provider for models whose upstream does not speak Chat Completions, via litellm.

The gateway has already projected (repaired) the history; litellm only translates the
OpenAI-wire body to the native API (Anthropic Messages, Gemini generateContent, ...) and the
answer back. ``litellm.modify_params`` stays off so litellm never rewrites the history.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import AsyncIterator, Mapping
from typing import Any

import orjson

from gateway.projection.lazy_messages import dumps_request
from gateway.providers.answers import CHAT
from gateway.providers.base import (
    REQUEST_DEFAULTS,
    UpstreamCall,
    UpstreamError,
    UpstreamResponse,
    hold_until,
)
from gateway.providers.errors import failure_from_exception, failure_sse_event
from gateway.providers.failure import UpstreamFailure, redact_failure
from gateway.providers.litellm_loader import load_litellm
from gateway.providers.openai_compat import UpstreamTimeouts
from gateway.providers.prompt_cache import wire_style
from gateway.providers.sse import is_chat_opening

# Body fields the client never controls: they pick the upstream, its credentials, or
# litellm's own behaviour (a client-sent ``api_base`` would receive the operator's key).
# litellm's own ``all_litellm_params`` are added at first use.
_CLIENT_BLOCKED_FIELDS = frozenset(
    {
        "model",
        "messages",
        "stream",
        "api_key",
        "api_base",
        "base_url",
        "api_version",
        "organization",
        "deployment_id",
        "default_headers",
        "extra_headers",
        "headers",
        "timeout",
        "request_timeout",
        "max_retries",
        "num_retries",
        "model_list",
        "custom_llm_provider",
        "client",
        "shared_session",
        "mock_response",
        "metadata",
        "litellm_params",
    }
)
# Provider settings litellm takes as keyword arguments beside the request (credentials,
# endpoints, regions, projects: ``aws_bedrock_runtime_endpoint``, ``vertex_project``,
# ``azure_ad_token``, ...): a client-sent one would send the operator's signed request where
# the client says, or sign in as it says. Matched by name, so a provider litellm adds later is
# covered too; none is an OpenAI request field.
_PROVIDER_SETTING = re.compile(
    r"^(?:aws|vertex|vertexai|azure|watsonx|sagemaker|bedrock|oci|snowflake|databricks|"
    r"cloudflare|huggingface|hf|replicate|google|gcp|gemini|anthropic|openai|ollama|vllm|"
    r"hosted_vllm|together|fireworks|mistral|cohere|groq|deepseek|xai|openrouter|nvidia|"
    r"ibm|sap|litellm)_"
    r"|api_?key|api_?base|secret|credential|password|endpoint|access_?key|session_?token"
    r"|_token$|^token$|auth|_url$|^url$|region|project|location|tenant|client_id"
    r"|proxy|cert|ssl|verify|_path$", re.I)
# The fields of a Chat Completions request: a config may set one as the deployment's
# default (temperature) and the client's value wins; any other key the config sets (a
# provider setting) stays the config's.
_REQUEST_FIELDS = REQUEST_DEFAULTS | {
    "tools", "tool_choice", "parallel_tool_calls", "functions", "function_call",
    "stream_options", "store", "safety_identifier", "prompt_cache_key",
    "prompt_cache_retention", "top_k", "thinking",
}
# Config-only keys consumed here rather than passed to litellm as such.
_CONFIG_CONSUMED_FIELDS = frozenset({"model", "stream_timeout"})
# The client's prompt-cache key is the session id (SPEC §6); only OpenAI-style upstreams take
# it as such, and litellm refuses it (UnsupportedParamsError) for the others.
_OPENAI_CACHE_FIELDS = frozenset({"prompt_cache_key", "prompt_cache_retention"})

_blocked_fields: frozenset[str] | None = None


def _client_blocked_fields(litellm: Any) -> frozenset[str]:
    global _blocked_fields
    if _blocked_fields is None:
        extra: frozenset[str] = frozenset()
        try:
            from litellm.types.utils import all_litellm_params  # lazy: litellm is loaded

            extra = frozenset(str(p) for p in all_litellm_params)
        except ImportError:  # pragma: no cover - older litellm layouts
            extra = frozenset(getattr(litellm, "all_litellm_params", ()) or ())
        # ``user`` is an OpenAI field litellm also lists; it is the client's to send.
        _blocked_fields = (_CLIENT_BLOCKED_FIELDS | extra) - {"user"}
    return _blocked_fields


def _dump(obj: Any, *, exclude_none: bool) -> bytes:
    data = obj.model_dump(exclude_none=exclude_none) if hasattr(obj, "model_dump") else obj
    try:
        return orjson.dumps(data, default=str)
    except TypeError:  # a lone surrogate an upstream escaped ("\ud800"): U+FFFD instead
        text = json.dumps(data, default=str, ensure_ascii=False)
        return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace").encode()


class LiteLLMResponse:
    """A non-stream answer: ``chunks()`` yields one ``chat.completion`` JSON body."""

    status = 200
    content_type = "application/json"
    relay_headers: tuple[tuple[str, str], ...] = ()

    def __init__(self, body: bytes) -> None:
        self.body = body

    async def chunks(self) -> AsyncIterator[bytes]:
        """Yield the whole JSON body once."""
        yield self.body

    async def aclose(self) -> None:
        """Nothing to release: the body is already read."""


class LiteLLMStream:
    """A stream whose first chunk already arrived; re-emitted as OpenAI SSE bytes."""

    status = 200
    content_type = "text/event-stream"
    relay_headers: tuple[tuple[str, str], ...] = ()

    def __init__(self, stream: Any, provider: str, gap: float | None = None) -> None:
        self._stream = stream
        self._first: list[bytes] = []  # the held chunks, serialized
        self._provider = provider
        self._closed = False
        self._gap = gap  # the longest wait for the next chunk (None: unbounded)

    async def receive_first(self, until: float | None = None) -> None:
        """Wait for the first chunk with output (raises what litellm raises); the chunks
        before it that only open the answer (:func:`is_chat_opening`, the role) are held
        with it, so a failure right after them is still retried, until ``until``
        (``time.monotonic()``; None: the first chunk is relayed as it is). A stream that ends
        before any output is a failed answer, not an empty success: the ladder retries it."""
        while True:
            try:
                if not self._first:
                    chunk = await self._stream.__anext__()
                elif until is None:
                    return
                else:
                    async with asyncio.timeout(max(0.0, until - time.monotonic())) as scope:
                        chunk = await self._stream.__anext__()
            except StopAsyncIteration:
                raise UpstreamError(UpstreamFailure(
                    status=502, provider=self._provider, type="api_error",
                    message="upstream ended the stream before sending any "
                            + ("output" if self._first else "event"))) from None
            except TimeoutError:
                if self._first and scope.expired():
                    return  # slow to start: relayed as it is rather than failed
                raise
            dumped = _dump(chunk, exclude_none=True)  # (once: relayed as these bytes)
            self._first.append(dumped)
            if not is_chat_opening(orjson.loads(dumped)):
                return

    async def chunks(self) -> AsyncIterator[bytes]:
        """Yield ``data: {chunk}`` events, then ``data: [DONE]``; a late failure is an
        SSE error event that ends the stream."""
        try:
            first, self._first = self._first, []
            for dumped in first:
                yield b"data: " + dumped + b"\n\n"
            while True:
                try:
                    async with asyncio.timeout(self._gap):
                        chunk = await self._stream.__anext__()
                except StopAsyncIteration:
                    break
                except TimeoutError:
                    yield failure_sse_event(UpstreamFailure(
                        status=504, provider=self._provider,
                        message=f"the upstream of model {self._provider!r} stalled: nothing "
                                f"for {self._gap:g}s"))
                    await self.aclose()
                    return
                yield b"data: " + _dump(chunk, exclude_none=True) + b"\n\n"
        except Exception as exc:
            yield failure_sse_event(redact_failure(failure_from_exception(exc, self._provider)))
            await self.aclose()
            return
        yield b"data: [DONE]\n\n"
        await self.aclose()

    async def aclose(self) -> None:
        """Close litellm's stream (and with it the upstream HTTP response)."""
        if self._closed:
            return
        self._closed = True
        closer = getattr(self._stream, "aclose", None)
        if closer is not None:
            try:
                await closer()
            except Exception:  # closing a broken stream must not mask the real outcome
                return


def _refused_part(messages: Any) -> tuple[str, str] | None:
    """The first user content part that LiteLLM refuses before sending (a type outside its
    list: ``video_url`` passes, an Anthropic block or an unknown type does not), as its
    path and its type; None when there is none."""
    from litellm.types.llms.openai import ValidUserMessageContentTypes

    for i, message in enumerate(messages if type(messages) is list else ()):
        if type(message) is not dict or message.get("role") != "user":
            continue
        content = message.get("content")
        for j, part in enumerate(content if type(content) is list else ()):
            if type(part) is dict and part.get("type") not in ValidUserMessageContentTypes:
                return f"messages[{i}].content[{j}]", str(part.get("type"))
    return None


def refused_before_sending(provider: str, param: str, kind: str) -> UpstreamFailure:
    """The 400 for a content part the provider's LiteLLM translation cannot take (LiteLLM
    would fail before sending, which is not an upstream answer)."""
    return UpstreamFailure(
        status=400, provider=provider, type="invalid_request_error", param=param,
        code="unsupported_content_type", should_retry=False,
        message=f"Invalid value for '{param}.type': content parts of type {kind!r} cannot "
                f"be sent to this model (its provider takes text, image_url, input_audio, "
                "file and the other OpenAI user content types).")


class LiteLLMProvider:
    """Forwards OpenAI-wire calls with ``litellm.acompletion`` to one model_list entry.

    ``litellm_params`` is the entry's LiteLLM-style ``litellm_params``: ``model`` (e.g.
    ``anthropic/claude-sonnet-4-5``) plus api_key, api_base, timeout, ... (``os.environ/``
    references were resolved when the config was loaded). A ``stream_timeout`` replaces
    ``timeout`` for streams. Every client body field is forwarded except ones that would choose the
    upstream, its credentials or litellm's behaviour (api_base, api_key, metadata, ...).
    """

    def __init__(self, name: str, litellm_params: Mapping[str, Any],
                 timeouts: tuple[UpstreamTimeouts, UpstreamTimeouts] | None = None) -> None:
        self.name = name
        # (non-stream, stream): what bounds an exchange until its first byte, and a
        # stream's gaps (litellm's own ``timeout`` is its HTTP client's, per provider)
        self._timeouts = timeouts
        params = dict(litellm_params)
        model = params.get("model")
        if not isinstance(model, str) or not model:
            raise ValueError(f"{name}: litellm_params.model is required")
        self.model: str = model
        self._stream_timeout = params.get("stream_timeout")
        self._params = {k: v for k, v in params.items() if k not in _CONFIG_CONSUMED_FIELDS}
        # The gateway's recovery ladder owns retries (SPEC §3); litellm must not add its own.
        self._params.setdefault("num_retries", 0)
        self._params.setdefault("max_retries", 0)
        self._drop_cache_key = wire_style(model) != "openai"

    def request_kwargs(self, call: UpstreamCall, litellm: Any) -> dict[str, Any]:
        """The keyword arguments for ``litellm.acompletion`` (client fields win over config
        defaults such as temperature; blocked fields never pass)."""
        blocked = _client_blocked_fields(litellm)
        if self._drop_cache_key:
            blocked = blocked | _OPENAI_CACHE_FIELDS
        kwargs = dict(self._params)
        # litellm's translations may edit what they are given in place; the client's parsed
        # messages are shared with the next turn's request (gateway.server.seen): a copy.
        body = orjson.loads(call.raw) if call.raw is not None else orjson.loads(
            dumps_request(call.body))
        kwargs.update({k: v for k, v in body.items() if k not in blocked
                       and (k in _REQUEST_FIELDS or (k not in self._params
                                                     and not _PROVIDER_SETTING.search(k)))})
        kwargs["model"] = self.model
        kwargs["messages"] = body.get("messages", [])
        kwargs["stream"] = call.stream
        if call.stream and self._stream_timeout is not None:
            kwargs["timeout"] = self._stream_timeout
        if call.headers:  # trace context (traceparent) next to the configured headers
            kwargs["extra_headers"] = {**(kwargs.get("extra_headers") or {}),
                                       **dict(call.headers)}
        return kwargs

    async def send(self, call: UpstreamCall) -> UpstreamResponse:
        """Send one call; raises UpstreamError (normalized by failure_from_exception)."""
        litellm = await load_litellm()
        kwargs = self.request_kwargs(call, litellm)
        refused = _refused_part(kwargs["messages"])
        if refused is not None:
            raise UpstreamError(refused_before_sending(self.name, *refused))
        bounds = None if self._timeouts is None else self._timeouts[call.stream]
        # A request's call is bounded by its deadline (and the deployment's first-byte
        # bound); a call made for no client (a background summary) by litellm's own timeout.
        limit = None
        if call.deadline is not None:
            limit = max(0.0, call.deadline - time.monotonic())
            if bounds is not None and bounds.first_byte is not None:
                limit = min(limit, bounds.first_byte)
        try:
            async with asyncio.timeout(limit):
                return await self._answer(call, litellm, kwargs, bounds)
        except TimeoutError:
            if limit is None:  # (not this bound's: litellm's own, let through as it was)
                raise
            raise UpstreamError(UpstreamFailure(
                status=504, provider=self.name,
                message=f"the upstream of model {self.name!r} timed out: no answer within "
                        f"{limit:g}s")) from None

    async def _answer(self, call: UpstreamCall, litellm: Any, kwargs: dict[str, Any],
                      bounds: UpstreamTimeouts | None) -> UpstreamResponse:
        try:
            response = await litellm.acompletion(**kwargs)
        except Exception as exc:
            raise UpstreamError(redact_failure(failure_from_exception(exc, self.name))) from exc
        if not call.stream:
            body = _dump(response, exclude_none=False)
            problem = CHAT.whole_problem(orjson.loads(body))
            if problem is not None:  # (the same check as an answer read off the wire)
                raise UpstreamError(UpstreamFailure(
                    status=502, provider=self.name, type="api_error",
                    message=f"the upstream of model {self.name!r} answered with a body that "
                            f"{problem}"))
            return LiteLLMResponse(body)
        # Chunks with only the role are held until just before the request's deadline.
        until = None if call.deadline is None else hold_until(call.deadline, time.monotonic())
        return await self._open_stream(response, until,
                                       None if bounds is None else bounds.read)

    async def _open_stream(self, stream: Any, until: float | None,
                           gap: float | None) -> UpstreamResponse:
        # Wait for the first chunk so a refusal is still an UpstreamError, not a sent byte.
        opened = LiteLLMStream(stream, self.name, gap)
        try:
            await opened.receive_first(until)
        except UpstreamError:
            await opened.aclose()
            raise
        except Exception as exc:
            await opened.aclose()
            raise UpstreamError(redact_failure(failure_from_exception(exc, self.name))) from exc
        except BaseException:
            await opened.aclose()
            raise
        return opened
