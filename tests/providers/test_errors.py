"""failure_from_http / failure_from_exception / openai_error_envelope on real provider bodies."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import AsyncIterator
from email.utils import formatdate
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from hypothesis import given, settings
from hypothesis import strategies as st
from multidict import CIMultiDict

from gateway.providers.base import UpstreamError
from gateway.providers.errors import (
    failure_from_exception,
    failure_from_http,
    openai_error_envelope,
    parse_retry_after,
    safe_headers,
)
from gateway.providers.failure import UpstreamFailure

DATA = Path(__file__).resolve().parents[1] / "data" / "provider-errors.jsonl"
ROOT = Path(__file__).resolve().parents[2]


def _record(line: int) -> dict[str, Any]:
    """The jsonl record at 1-based ``line``."""
    text = DATA.read_text(encoding="utf-8").splitlines()[line - 1]
    record: dict[str, Any] = json.loads(text)
    return record


def _from_record(line: int, status: int = 400) -> UpstreamFailure:
    rec = _record(line)
    return failure_from_http(status, {}, rec["body"].encode(), rec["provider"])


# --- message extraction on real bodies ------------------------------------------------

# (line, provider at that line, exact message, type, code, param)
REAL_BODIES = [
    (
        6,
        "anthropic",
        "messages.0.content.0: unexpected `tool_use_id` found in `tool_result` blocks: "
        "toolu_01FxdGdpPyaZq3sCLqXtgJki. Each `tool_result` block must have a corresponding "
        "`tool_use` block in the previous message.",
        "invalid_request_error",
        None,
        None,
    ),
    (
        4,  # python-repr dict (single quotes, None)
        "azure-openai",
        "Invalid parameter: messages with role 'tool' must be a response to a preceeding "
        "message with 'tool_calls'.",
        "invalid_request_error",
        None,
        "messages.[2].role",
    ),
    (5, "mistral", "Unexpected role RoleEnum.tool", "invalid_request_error", None, None),
    (15, "mistral", "Not the same number of function calls and responses",
     "invalid_request_error", "3230", None),
    (
        17,  # Gemini error inside a list; its status becomes the code
        "gemini",
        "Please ensure that the number of function response parts is equal to the number of "
        "function call parts of the function call turn.",
        None,
        "INVALID_ARGUMENT",
        None,
    ),
    (
        39,  # litellm's "BedrockException - " wrapper in front of Bedrock's {"message": ...}
        "bedrock-converse",
        "The text field in the ContentBlock object at messages.2.content.1 is blank. Add text "
        "to the text field, and try again.",
        None,
        None,
        None,
    ),
    (
        42,  # "Error code: 400 - {python repr}"
        "anthropic-bedrock",
        'messages: roles must alternate between "user" and "assistant", but found multiple '
        '"user" roles in a row',
        None,
        None,
        None,
    ),
    (
        20,  # botocore-parsed {'Error': {'Message', 'Code'}}
        "bedrock-converse",
        "Expected toolResult blocks at messages.2.content for the following Ids: "
        "tooluse_jQ912rboYgzgLULQpRxWot, tooluse_sX1A7q9kipz4qAW36LUR1H, "
        "tooluse_mnUeKx1nqbeU7vWccDvS7a, tooluse_YhkgPDR38Ezv3zZq9WfTgR, "
        "tooluse_wqWH5yNTk86o2kOZ1eMp8e, tooluse_bf9LZsH45uUyu4o2EKGsIq, "
        "tooluse_qwvFwAlfPKovk66i8OxpPh, tooluse_eNdPy95kYrezYldFx29UMy",
        None,
        "ValidationException",
        None,
    ),
    (
        25,  # botocore text: the exception code is kept, the wrapper is stripped
        "bedrock-converse",
        "messages.4.content: Conversation blocks and tool result blocks cannot be provided in "
        "the same turn",
        None,
        "ValidationException",
        None,
    ),
    (23, "mistral-via-openrouter", "Unexpected role 'tool' after role 'user'",
     "invalid_request_message_order", "3230", None),
    (83, "openai", "This model's maximum context length is 4097 tokens. However, your messages "
     "resulted in 6988 tokens. Please reduce the length of the messages.",
     "invalid_request_error", "context_length_exceeded", "messages"),
    (89, "bedrock-converse", "Input is too long for requested model.", None, None, None),
    (90, "anthropic", "Request exceeds the maximum size", "request_too_large", None, None),
    (105, "anthropic", "Overloaded", "overloaded_error", None, None),
    (108, "anthropic", "Overloaded", "overloaded_error", None, None),  # JS-style object
    (124, "ollama-cloud", "Server overloaded, please retry shortly "
     "(ref: aaa65c70-cfa0-446b-86f1-4ab0e2deb9e4)", None, None, None),
    (129, "anthropic", None, "rate_limit_error", None, None),  # top-level type, no envelope
    (13, "openai", "An assistant message with 'tool_calls' must be followed by tool messages "
     "responding\nto each 'tool_call_id'. The following tool_call_ids did not have response "
     "messages:\ncall_RTlWVuE5MqEb3WZJgTIl7Rsb", "invalid_request_error", None,
     "messages.[6].role"),
    (145, "anthropic", 'messages: Unexpected role "system". The Messages API accepts a '
     'top-level `system` parameter, not "system" as an input message role.',
     "invalid_request_error", None, None),
]


@pytest.mark.parametrize(
    ("line", "provider", "message", "kind", "code", "param"),
    REAL_BODIES,
    ids=[f"{r[1]}-L{r[0]}" for r in REAL_BODIES],
)
def test_real_body_fields_are_extracted_exactly(
    line: int, provider: str, message: str | None, kind: str | None, code: str | None,
    param: str | None,
) -> None:
    assert _record(line)["provider"] == provider, "the jsonl copy changed; update the table"
    failure = _from_record(line)
    if message is not None:
        assert failure.message == message
    assert failure.type == kind
    assert failure.code == code
    assert failure.param == param
    assert failure.body == _record(line)["body"].encode()


def test_http_status_only_codes_are_dropped_but_provider_codes_kept() -> None:
    vllm = failure_from_http(400, {}, b'{"object":"error","message":"m","type":"BadRequestError",'
                             b'"param":null,"code":400}', "vllm")
    azure = failure_from_http(429, {}, b'{"error":{"code":"429","message":"slow down"}}', "azure")
    mistral = failure_from_http(429, {}, b'{"object":"error","message":"Rate limit exceeded",'
                                b'"type":"rate_limited","param":null,"code":"1300"}', "mistral")
    assert (vllm.code, vllm.type) == (None, "BadRequestError")
    assert (azure.code, azure.message) == (None, "slow down")
    assert (mistral.code, mistral.type) == ("1300", "rate_limited")


def test_litellm_proxy_body_is_unwrapped_to_the_provider_error() -> None:
    text = "prompt is too long: 219898 tokens > 200000 maximum"
    inner = {"type": "error", "error": {"type": "invalid_request_error", "message": text}}
    wrapped = "litellm.BadRequestError: AnthropicException - " + json.dumps(inner)
    body = {"error": {"message": wrapped, "type": None, "param": None, "code": "400"}}
    failure = failure_from_http(400, {}, json.dumps(body).encode(), "litellm-proxy")
    assert failure.message == "prompt is too long: 219898 tokens > 200000 maximum"
    assert failure.type == "invalid_request_error"
    assert failure.code is None


def test_litellm_prefix_before_plain_text_is_stripped() -> None:
    body = b"litellm.APIError: BedrockException - Input is too long for requested model."
    assert failure_from_http(400, {}, body, "bedrock").message == (
        "Input is too long for requested model."
    )


def test_openrouter_wrapper_yields_the_raw_provider_error() -> None:
    raw = {"type": "error", "error": {"type": "invalid_request_error",
                                      "message": "messages.3: tool_use ids must be unique"}}
    body = {"error": {"message": "Provider returned error", "code": 400,
                      "metadata": {"raw": json.dumps(raw), "provider_name": "Anthropic"}}}
    failure = failure_from_http(400, {}, json.dumps(body).encode(), "openrouter")
    assert failure.message == "messages.3: tool_use ids must be unique"
    assert failure.type == "invalid_request_error"


def test_plain_text_and_html_and_empty_bodies() -> None:
    text = failure_from_http(400, {}, b"text content is empty", "moonshot")
    html = failure_from_http(
        502, {"Content-Type": "text/html"},
        b"<html><head><title>502 Bad Gateway</title></head><body>nginx</body></html>", "p",
    )
    empty = failure_from_http(503, {}, b"", "p")
    assert text.message == "text content is empty"
    assert text.content_type.startswith("text/plain")
    assert html.message == "502 Bad Gateway"
    assert html.content_type == "text/html"
    assert empty.message == "upstream returned HTTP 503 Service Unavailable"


# --- retry-after, should-retry, headers -----------------------------------------------


def test_retry_after_seconds_and_milliseconds() -> None:
    body = b'{"error":{"message":"slow down"}}'
    seconds = failure_from_http(429, {"Retry-After": "7"}, body, "p")
    millis = failure_from_http(429, {"retry-after-ms": "1500", "Retry-After": "7"}, body, "p")
    assert seconds.retry_after == 7.0
    assert millis.retry_after == 1.5  # the precise header wins


def test_retry_after_http_date_is_relative_to_now() -> None:
    now = 1_700_000_000.0
    headers = {"Retry-After": formatdate(now + 12, usegmt=True)}
    failure = failure_from_http(503, headers, b"", "p", now=now)
    assert failure.retry_after == 12.0
    past = {"Retry-After": formatdate(now - 30, usegmt=True)}
    assert failure_from_http(503, past, b"", "p", now=now).retry_after == 0.0


@pytest.mark.parametrize("value", ["soon", "", "-5", "nan", "inf", "Mon, 99 Foo 2024"])
def test_unreadable_retry_after_is_none(value: str) -> None:
    assert parse_retry_after({"Retry-After": value}, now=0.0) is None


def test_retry_hint_in_the_body_is_used_only_without_a_header() -> None:
    openai_tpm = _from_record(106, status=429)  # "Please try again in 3.89s."
    groq_tpd = _from_record(127, status=429)  # "Please try again in 9m38.016s."
    gemini = _from_record(114, status=503)  # google.rpc.RetryInfo retryDelay "40s"
    assert openai_tpm.retry_after == pytest.approx(3.89)
    assert groq_tpd.retry_after == pytest.approx(578.016)
    assert gemini.retry_after == 40.0
    rec = _record(106)
    with_header = failure_from_http(429, {"retry-after": "1"}, rec["body"].encode(), "openai")
    assert with_header.retry_after == 1.0


@pytest.mark.parametrize(
    ("value", "expected"), [("true", True), ("TRUE ", True), ("false", False), ("maybe", None)]
)
def test_should_retry_header(value: str, expected: bool | None) -> None:
    assert failure_from_http(529, {"x-should-retry": value}, b"", "p").should_retry is expected
    assert failure_from_http(529, {}, b"", "p").should_retry is None


SECRETS = {
    "Authorization": "Bearer sk-live-123456789",
    "Proxy-Authorization": "Basic abc",
    "x-api-key": "sk-ant-123456789",
    "api-key": "azure-secret",
    "x-goog-api-key": "AIzaSecret",
    "Cookie": "session=abc",
    "Set-Cookie": "session=abc; HttpOnly",
    "x-amz-security-token": "FwoGZXIvYXdzEXAMPLE",
}


def test_secret_headers_are_never_kept() -> None:
    headers = CIMultiDict(SECRETS)
    headers.update({"Retry-After": "3", "x-ratelimit-remaining-tokens": "10",
                    "X-Request-Id": "req_1", "anthropic-ratelimit-requests-reset": "now",
                    "X-Internal-Routing": "pod-7"})
    failure = failure_from_http(429, headers, b"", "p")
    kept = dict(failure.headers)
    assert kept == {
        "retry-after": "3",
        "x-ratelimit-remaining-tokens": "10",
        "x-request-id": "req_1",
        "anthropic-ratelimit-requests-reset": "now",
    }
    flat = repr(failure)
    for secret in SECRETS.values():
        assert secret not in flat


def test_safe_headers_drops_secret_looking_names_even_with_safe_prefixes() -> None:
    assert safe_headers({"x-ratelimit-token-secret": "s", "x-ratelimit-limit": "5"}) == (
        ("x-ratelimit-limit", "5"),
    )


# --- never raises ------------------------------------------------------------------------


GARBAGE = [
    b"",
    b"\xff\xfe\x00garbage",
    b"{" * 50_000,
    b"[" * 50_000 + b"]" * 50_000,
    b"{'error': {'message': 'unterminated",
    b'{"error": {"message": 42, "type": ["x"], "code": {"a": 1}, "param": 7}}',
    b'{"error": "just a string"}',
    b"[1, 2, 3]",
    b"null",
    b'"a json string"',
    b"x" * 500_000,
]


@pytest.mark.parametrize("body", GARBAGE, ids=range(len(GARBAGE)))
def test_garbage_bodies_never_raise(body: bytes) -> None:
    failure = failure_from_http(400, {"Retry-After": "\x00"}, body, "p")
    assert isinstance(failure.message, str) and failure.message
    assert len(failure.message) <= 8_000
    assert failure.retry_after is None


def test_python_literal_bodies_are_never_evaluated(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    body = f"{{'error': {{'message': open({str(marker)!r}, 'w').write('x')}}}}".encode()
    failure = failure_from_http(400, {}, body, "p")
    assert not marker.exists()
    assert "open(" in failure.message


@settings(max_examples=150, deadline=None)
@given(
    status=st.integers(min_value=-5, max_value=1000),
    body=st.binary(max_size=400) | st.text(max_size=300).map(str.encode),
    headers=st.dictionaries(st.text(max_size=20), st.text(max_size=40), max_size=4),
)
def test_failure_from_http_never_raises(status: int, body: bytes, headers: dict[str, str]) -> None:
    failure = failure_from_http(status, headers, body, "fuzz")
    assert isinstance(failure.message, str) and failure.message
    envelope = openai_error_envelope(failure)
    json.dumps(envelope)


# --- exceptions ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    # asyncio.TimeoutError is TimeoutError on 3.11+
    "exc", [TimeoutError(), aiohttp.ServerTimeoutError("read"), aiohttp.ConnectionTimeoutError()]
)
def test_timeouts_are_504(exc: BaseException) -> None:
    failure = failure_from_exception(exc, "p")
    assert (failure.status, failure.message, failure.provider) == (504, "upstream timed out", "p")


def test_connection_failures_are_502_without_secrets() -> None:
    failure = failure_from_exception(
        OSError("connect failed for https://api.example/v1?key=AIzaSECRET&alt=sse"), "gemini"
    )
    assert failure.status == 502
    assert failure.message.startswith("upstream connection failed: ")
    assert "AIzaSECRET" not in failure.message
    assert failure_from_exception(ConnectionResetError("peer reset"), "p").message == (
        "upstream connection failed: peer reset"
    )


def test_unknown_exceptions_are_502_and_upstream_error_keeps_its_failure() -> None:
    other = failure_from_exception(ValueError("boom"), "p")
    assert (other.status, other.message) == (502, "upstream request failed: ValueError: boom")
    original = UpstreamFailure(status=418, provider="p", message="teapot")
    assert failure_from_exception(UpstreamError(original), "p") is original


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_real_refused_connection_is_502() -> None:
    port = _free_port()  # closed again: nothing listens there
    async with aiohttp.ClientSession() as session:
        with pytest.raises(aiohttp.ClientConnectionError) as info:
            await session.post(f"http://127.0.0.1:{port}/v1/chat/completions", json={})
    failure = failure_from_exception(info.value, "local")
    assert failure.status == 502
    assert failure.message.startswith("upstream connection failed")


@pytest.fixture
async def upstream() -> AsyncIterator[str]:
    """A real loopback server: /refuse answers a 429 with secrets, /drop cuts the socket."""

    async def refuse(request: web.Request) -> web.Response:
        return web.Response(
            status=429,
            body=b'{"error":{"message":"Rate limit reached","type":"rate_limit_error"}}',
            content_type="application/json",
            headers={"retry-after-ms": "250", "x-should-retry": "true",
                     "set-cookie": "sid=SECRETCOOKIE", "x-api-key": "SECRETKEY"},
        )

    async def drop(request: web.Request) -> web.Response:
        assert request.transport is not None
        request.transport.close()
        return web.Response()

    app = web.Application()
    app.router.add_post("/refuse", refuse)
    app.router.add_post("/drop", drop)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


async def test_real_http_refusal_is_normalized(upstream: str) -> None:
    async with (
        aiohttp.ClientSession() as session,
        session.post(f"{upstream}/refuse", json={}) as resp,
    ):
        failure = failure_from_http(resp.status, resp.headers, await resp.read(), "local")
    assert (failure.status, failure.message, failure.type) == (
        429, "Rate limit reached", "rate_limit_error",
    )
    assert failure.retry_after == 0.25
    assert failure.should_retry is True
    assert failure.content_type.startswith("application/json")
    assert "SECRET" not in repr(failure.headers)


async def test_real_dropped_connection_is_502(upstream: str) -> None:
    async with aiohttp.ClientSession() as session:
        with pytest.raises(aiohttp.ClientError) as info:
            async with session.post(f"{upstream}/drop", json={}) as resp:
                await resp.read()
    failure = failure_from_exception(info.value, "local")
    assert failure.status == 502
    assert failure.message.startswith("upstream connection failed")


class FakeLiteLLMError(Exception):
    """Duck-typed like a litellm exception (no litellm import)."""

    def __init__(self, status_code: int, message: str, response: Any = None) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.message = message
        self.llm_provider = "anthropic"
        self.response = response


class FakeResponse:
    def __init__(self, headers: dict[str, str], content: bytes) -> None:
        self.headers = headers
        self.content = content


def test_duck_typed_sdk_error_uses_the_inner_provider_message() -> None:
    exc = FakeLiteLLMError(
        400,
        'litellm.BadRequestError: AnthropicException - {"type":"error","error":{"type":'
        '"invalid_request_error","message":"messages: text content blocks must be non-empty"}}',
    )
    failure = failure_from_exception(exc, "anthropic")
    assert failure.status == 400
    assert failure.message == "messages: text content blocks must be non-empty"
    assert failure.type == "invalid_request_error"
    assert failure.body.startswith(b'{"type":"error"')


def test_duck_typed_sdk_error_prefers_the_attached_response_body_and_headers() -> None:
    response = FakeResponse(
        {"retry-after": "4", "x-api-key": "SECRETKEY"},
        b'{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}',
    )
    failure = failure_from_exception(
        FakeLiteLLMError(529, "litellm.InternalServerError: AnthropicException - Overloaded",
                         response),
        "anthropic",
    )
    assert (failure.status, failure.message, failure.type) == (529, "Overloaded",
                                                               "overloaded_error")
    assert failure.retry_after == 4.0
    assert "SECRETKEY" not in repr(failure)


def test_errors_module_does_not_import_litellm() -> None:
    code = "import sys, gateway.providers.errors; print('litellm' in sys.modules)"
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "False"


@pytest.fixture(scope="module")
def litellm() -> Any:
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no network at import
    return pytest.importorskip("litellm")


def test_real_litellm_exceptions(litellm: Any) -> None:
    import httpx

    bad = litellm.BadRequestError(
        message='AnthropicException - {"type":"error","error":{"type":"invalid_request_error",'
        '"message":"messages.1.content.1: `tool_use` ids must be unique"}}',
        model="claude", llm_provider="anthropic",
    )
    overflow = litellm.ContextWindowExceededError(
        message="prompt is too long: 219898 tokens > 200000 maximum", model="claude",
        llm_provider="anthropic",
    )
    response = httpx.Response(
        429, headers={"retry-after": "7", "x-api-key": "SECRETKEY"},
        content=b'{"error":{"message":"Rate limit reached for requests","type":"requests"}}',
        request=httpx.Request("POST", "https://api.example/v1/chat/completions"),
    )
    limited = litellm.RateLimitError(message="RateLimit", model="m", llm_provider="openai",
                                     response=response)
    timeout = litellm.Timeout(message="Request timed out", model="m", llm_provider="openai")
    conn = litellm.APIConnectionError(message="Connection refused", model="m",
                                      llm_provider="openai")

    got = failure_from_exception(bad, "anthropic")
    assert (got.status, got.message) == (400, "messages.1.content.1: `tool_use` ids must be unique")
    got = failure_from_exception(overflow, "anthropic")
    assert (got.status, got.message) == (400, "prompt is too long: 219898 tokens > 200000 maximum")
    got = failure_from_exception(limited, "openai")
    assert (got.status, got.message, got.retry_after) == (429, "Rate limit reached for requests",
                                                           7.0)
    assert "SECRETKEY" not in repr(got)
    assert failure_from_exception(timeout, "openai").status == 504
    got = failure_from_exception(conn, "openai")
    assert (got.status, got.message) == (502, "upstream connection failed: Connection refused")


# --- envelope ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "kind"),
    [
        (400, "invalid_request_error"),
        (401, "authentication_error"),
        (403, "permission_error"),
        (404, "not_found_error"),
        (413, "request_too_large"),
        (429, "rate_limit_error"),
        (500, "api_error"),
        (503, "api_error"),
        (529, "api_error"),
        (504, "timeout_error"),  # the one table (gateway.errors), Anthropic's name
        (408, "timeout_error"),
    ],
)
def test_envelope_type_defaults_from_status(status: int, kind: str) -> None:
    envelope = openai_error_envelope(UpstreamFailure(status=status, provider="p", message="m"))
    assert envelope == {"error": {"message": "m", "type": kind, "param": None, "code": None}}


def test_envelope_keeps_the_provider_fields() -> None:
    failure = _from_record(83)
    assert openai_error_envelope(failure) == {
        "error": {
            "message": failure.message,
            "type": "invalid_request_error",
            "param": "messages",
            "code": "context_length_exceeded",
        }
    }
    gemini = openai_error_envelope(_from_record(110, status=503))
    assert gemini["error"]["type"] == "api_error"
    assert gemini["error"]["code"] == "UNAVAILABLE"
    assert gemini["error"]["message"] == "The model is overloaded. Please try again later."


class Hostile(Exception):
    """An exception whose attributes and text raise."""

    @property
    def status_code(self) -> int:
        raise RuntimeError("no")

    def __str__(self) -> str:
        raise RuntimeError("no str either")


def test_hostile_exceptions_never_raise() -> None:
    failure = failure_from_exception(Hostile(), "p")
    assert (failure.status, failure.message) == (502, "upstream request failed: Hostile")
