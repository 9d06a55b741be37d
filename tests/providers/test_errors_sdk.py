"""failure_from_exception on SDK errors that relabel the provider's answer (litellm shapes).

The shapes here are the ones litellm 1.x actually raises (seen against the fake Anthropic and
Gemini servers, see tests/providers/test_litellm_errors.py); the exceptions are duck-typed so
these tests need no litellm import.
"""

from __future__ import annotations

from typing import Any

import aiohttp
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from multidict import CIMultiDict

from gateway.providers.error_body import split_wrappers, strip_prefixes
from gateway.providers.errors import failure_from_exception, failure_from_http

ANTHROPIC_529 = '{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}'
ANTHROPIC_413 = (
    '{"type":"error","error":{"type":"request_too_large","message":"Request exceeds the '
    'maximum allowed number of bytes."},"request_id":"req_1"}'
)
GEMINI_503 = (
    '{"error":{"code":503,"message":"The model is overloaded. Please try again later.",'
    '"status":"UNAVAILABLE"}}'
)


class SyntheticResponse:
    """litellm's stand-in httpx.Response: its own status, no headers, no content."""

    def __init__(self, headers: dict[str, str] | None = None, content: bytes = b"") -> None:
        self.headers = headers or {}
        self.content = content


class LiteLLMLike(Exception):
    """The attributes litellm's exceptions carry."""

    def __init__(self, status_code: int, message: str, **attrs: Any) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.message = message
        self.response = attrs.pop("response", SyntheticResponse())
        for name, value in attrs.items():
            setattr(self, name, value)


class InternalServerError(LiteLLMLike):
    pass


class Timeout(LiteLLMLike):
    pass


class ConnectError(Exception):
    """Named like httpx's."""


# --- wrappers ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "message", "code"),
    [
        ("litellm.MidStreamFallbackError: litellm.InternalServerError: AnthropicError - "
         "Overloaded", "Overloaded", None),
        ("litellm.MidStreamFallbackError: litellm.InternalServerError: litellm."
         "InternalServerError: vertex_ai_betaException - UNAVAILABLE - The model is overloaded.",
         "The model is overloaded.", "UNAVAILABLE"),
        ("Vertex_ai_betaException - RESOURCE_EXHAUSTED - Quota exceeded.", "Quota exceeded.",
         "RESOURCE_EXHAUSTED"),
        ("litellm.APIConnectionError: GeminiException - Cannot connect to host x:1 [refused]",
         "Cannot connect to host x:1 [refused]", None),
        ("litellm.InternalServerError: AnthropicException - Internal server error.. Handle "
         "with `litellm.InternalServerError`.", "Internal server error.", None),
        ("litellm.ServiceUnavailableError: AnthropicError - boom Original exception: "
         "InternalServerError: litellm.InternalServerError: AnthropicError - boom", "boom", None),
        ("AnthropicError - b'{\"type\":\"error\"}'", '{"type":"error"}', None),
        # Not wrappers: provider text that merely looks similar is kept.
        ("INTERNAL error in the tool table", "INTERNAL error in the tool table", None),
        ("UNAVAILABLE - ", "UNAVAILABLE - ", None),
        ("b'unterminated", "b'unterminated", None),
    ],
)
def test_wrappers_are_removed(text: str, message: str, code: str | None) -> None:
    assert split_wrappers(text) == (message, code)
    assert strip_prefixes(text) == message


@settings(max_examples=150, deadline=None)
@given(
    message=st.text(max_size=300)
    | st.sampled_from(["UNAVAILABLE - ", "b'", "Handle with `litellm.X`", "Original exception:",
                       "litellm.X: ", "AnthropicError - "]).flatmap(
        lambda piece: st.lists(st.sampled_from([piece, " ", "x", "{", "'"]), max_size=60).map(
            "".join)),
    status=st.integers(min_value=-1, max_value=700),
    reported=st.none() | st.integers() | st.text(max_size=4),
)
def test_sdk_errors_never_raise(message: str, status: int, reported: Any) -> None:
    exc = LiteLLMLike(status, message, provider_status_code=reported,
                      litellm_response_headers={"retry-after": message[:10]})
    failure = failure_from_exception(exc, "fuzz")
    assert 100 <= failure.status <= 599 and failure.message


def test_bytes_repr_is_read_never_evaluated() -> None:
    assert strip_prefixes("b'a' + b'b'") == "b'a' + b'b'"
    assert strip_prefixes("b'caf\\xc3\\xa9'") == "café"


# --- the provider's own status ---------------------------------------------------------------


def test_provider_status_code_wins_and_headers_come_from_litellm() -> None:
    exc = InternalServerError(
        500, f"litellm.InternalServerError: AnthropicError - {ANTHROPIC_529}",
        provider_status_code=529,
        litellm_response_headers=CIMultiDict(
            {"Retry-After": "3", "x-should-retry": "false", "x-api-key": "SECRETKEY"}),
    )
    failure = failure_from_exception(exc, "claude")
    assert (failure.status, failure.message, failure.type) == (529, "Overloaded",
                                                               "overloaded_error")
    assert (failure.retry_after, failure.should_retry) == (3.0, False)
    assert failure.body == ANTHROPIC_529.encode()
    assert "SECRETKEY" not in repr(failure)


def test_litellm_headers_win_over_the_synthetic_response_headers() -> None:
    exc = LiteLLMLike(
        429, "litellm.RateLimitError: AnthropicException - slow down",
        litellm_response_headers={"retry-after": "7"},
        response=SyntheticResponse({"retry-after": "1", "x-request-id": "req_9"}),
    )
    failure = failure_from_exception(exc, "p")
    assert failure.retry_after == 7.0
    assert dict(failure.headers) == {"retry-after": "7", "x-request-id": "req_9"}


def test_status_stated_by_the_body_replaces_litellms_500() -> None:
    exc = InternalServerError(
        500, f"litellm.InternalServerError: litellm.InternalServerError: geminiException - "
        f"{GEMINI_503}", provider_status_code=None, litellm_response_headers={"a": "b"},
    )
    failure = failure_from_exception(exc, "gem")
    assert (failure.status, failure.code) == (503, "UNAVAILABLE")
    assert failure.message == "The model is overloaded. Please try again later."


def test_error_type_names_the_status_litellm_relabelled() -> None:
    exc = LiteLLMLike(400, f"litellm.BadRequestError: AnthropicException - {ANTHROPIC_413}")
    failure = failure_from_exception(exc, "claude")
    assert (failure.status, failure.type) == (413, "request_too_large")
    assert failure.message == "Request exceeds the maximum allowed number of bytes."


def test_rpc_status_in_the_text_gives_code_and_status() -> None:
    exc = LiteLLMLike(500, "litellm.MidStreamFallbackError: litellm.InternalServerError: "
                      "vertex_ai_betaException - UNAVAILABLE - The model is overloaded.")
    failure = failure_from_exception(exc, "gem")
    assert (failure.status, failure.code, failure.message) == (
        503, "UNAVAILABLE", "The model is overloaded.")


def test_ambiguous_types_keep_the_sdk_status() -> None:
    body = '{"type":"error","error":{"type":"invalid_request_error","message":"bad"}}'
    assert failure_from_exception(LiteLLMLike(400, body), "p").status == 400
    plain = LiteLLMLike(500, "litellm.InternalServerError: AnthropicException - something broke")
    assert failure_from_exception(plain, "p").status == 500


def test_bodies_read_off_the_wire_keep_the_wire_status() -> None:
    # Only SDK relabellings are corrected; an HTTP answer's own status is the truth.
    assert failure_from_http(500, {}, GEMINI_503.encode(), "p").status == 500
    assert failure_from_http(400, {}, ANTHROPIC_413.encode(), "p").status == 400


@pytest.mark.parametrize("bad", ["529", "nonsense", 7, True, None])
def test_unusable_provider_status_code_is_ignored(bad: Any) -> None:
    exc = InternalServerError(500, "litellm.InternalServerError: AnthropicException - broke",
                              provider_status_code=bad)
    expected = 529 if bad == "529" else 500
    assert failure_from_exception(exc, "p").status == expected


# --- transport failures behind an SDK status -----------------------------------------------


def _chained(outer: BaseException, *inner: BaseException) -> BaseException:
    current = outer
    for nxt in inner:
        current.__context__ = nxt
        current = nxt
    return outer


def test_refused_connection_wrapped_as_a_500_is_a_502() -> None:
    text = "Cannot connect to host 127.0.0.1:9 ssl:None [Connect call failed]"
    exc = _chained(
        InternalServerError(500, f"litellm.InternalServerError: AnthropicException - {text}. "
                            "Handle with `litellm.InternalServerError`.",
                            provider_status_code=500, litellm_response_headers=None),
        RuntimeError(text), ConnectError(text), ConnectionRefusedError(111, "refused"),
    )
    failure = failure_from_exception(exc, "claude")
    assert (failure.status, failure.message) == (502, f"upstream connection failed: {text}")


def test_transport_failure_found_through_original_exception() -> None:
    inner = _chained(RuntimeError("wrapped"), aiohttp.ServerDisconnectedError())
    exc = LiteLLMLike(500, "litellm.MidStreamFallbackError: X - gone",
                      original_exception=inner)
    assert failure_from_exception(exc, "p").status == 502


def test_timeout_behind_an_sdk_status_is_a_504() -> None:
    class ReadTimeout(Exception):
        pass

    exc = _chained(InternalServerError(500, "AnthropicException - timed out"), ReadTimeout("read"))
    assert (failure_from_exception(exc, "p").status,
            failure_from_exception(exc, "p").message) == (504, "upstream timed out")


def test_causes_are_ignored_once_the_provider_answered() -> None:
    exc = _chained(
        InternalServerError(500, f"AnthropicException - {ANTHROPIC_529}", provider_status_code=529,
                            litellm_response_headers={"retry-after": "1"}),
        ConnectError("an earlier attempt"),
    )
    assert failure_from_exception(exc, "p").status == 529


def test_unrelated_os_errors_in_the_chain_are_not_connection_failures() -> None:
    exc = _chained(InternalServerError(500, "AnthropicException - could not read credentials"),
                   FileNotFoundError(2, "no such file"))
    failure = failure_from_exception(exc, "p")
    assert (failure.status, failure.message) == (500, "could not read credentials")


def test_a_timeout_class_carrying_the_providers_answer_is_that_answer() -> None:
    # litellm raises its Timeout for a provider's own 504 body.
    body = '{"error":{"code":504,"message":"Deadline expired","status":"DEADLINE_EXCEEDED"}}'
    exc = Timeout(504, f"litellm.Timeout: GeminiException - {body}",
                  litellm_response_headers={"content-type": "application/json"})
    failure = failure_from_exception(exc, "gem")
    assert (failure.status, failure.message, failure.code) == (504, "Deadline expired",
                                                               "DEADLINE_EXCEEDED")
    assert failure_from_exception(Timeout(408, "litellm.Timeout: timed out"), "p").message == (
        "upstream timed out")


def test_cyclic_exception_chains_terminate() -> None:
    first = InternalServerError(500, "AnthropicException - loop")
    second = RuntimeError("back")
    first.__context__ = second
    second.__context__ = first
    assert failure_from_exception(first, "p").status == 500


class APIConnectionError(LiteLLMLike):
    """Named like openai's / litellm's connection-error class."""


def test_sdk_connection_error_wrapping_a_local_failure_is_not_a_connection_failure() -> None:
    # litellm raises APIConnectionError for its own failures before sending anything (here:
    # a tool result it cannot translate for Gemini); retrying the same body cannot help.
    text = "Missing corresponding tool call for tool response message."
    exc = _chained(APIConnectionError(500, f"litellm.APIConnectionError: {text}"),
                   Exception(text))
    failure = failure_from_exception(exc, "gem")
    assert (failure.status, failure.message) == (500, f"upstream request not sent: {text}")
    assert failure.should_retry is False


def test_a_traceback_in_an_exception_text_is_never_shown() -> None:
    # litellm's own failures before sending carry their traceback in the text.
    text = ("'name'\nTraceback (most recent call last):\n  File \"/srv/litellm/main.py\", "
            "line 1, in completion\nKeyError: 'name'")
    exc = _chained(APIConnectionError(500, f"litellm.APIConnectionError: {text}"),
                   KeyError("name"))
    failure = failure_from_exception(exc, "claude")
    assert failure.message == "upstream request not sent: 'name'"


def test_sdk_connection_error_believed_when_it_wraps_a_transport_failure_or_nothing() -> None:
    wrapped = _chained(APIConnectionError(500, "litellm.APIConnectionError: GeminiException - "
                                          "Cannot connect"), ConnectError("Cannot connect"))
    bare = APIConnectionError(500, "Connection refused")
    assert failure_from_exception(wrapped, "p").message == (
        "upstream connection failed: Cannot connect")
    assert (failure_from_exception(bare, "p").status,
            failure_from_exception(bare, "p").message) == (
        502, "upstream connection failed: Connection refused")


def test_a_traceback_in_a_status_exceptions_message_is_never_shown() -> None:
    # An in-stream failure of a LiteLLM-routed provider (Azure: the provider hung up after
    # text) is raised with a status and the traceback in its ``message``.
    import litellm

    text = ("Provider disconnected unexpectedly\nTraceback (most recent call last):\n"
            "  File \"/srv/.venv/lib/python3.11/site-packages/litellm/main.py\", line 9, in x"
            "\nhttpx.RemoteProtocolError: peer closed connection")
    exc = litellm.exceptions.InternalServerError(message=text, llm_provider="azure",
                                                 model="gpt-4o")
    failure = failure_from_exception(exc, "azure-gpt")
    assert failure.status >= 500
    assert "Provider disconnected unexpectedly" in failure.message
    assert "Traceback" not in failure.message and "site-packages" not in failure.message


def test_a_failure_reading_the_providers_answer_is_a_502_not_a_request_never_sent() -> None:
    """litellm raises its connection-error class for a provider answer it cannot turn into
    chat's too (an Ollama 200 without ``message``): the request was sent, and what came
    back is unusable, a 502 naming the model, as an unusable answer read off the wire is."""

    def transform_response(raw: dict[str, Any]) -> Any:  # (named as litellm's readers are)
        return dict(**raw["message"])

    try:
        transform_response({"message": None})
    except TypeError as exc:
        cause = exc
    text = "litellm.types.utils.Message() argument after ** must be a mapping, not NoneType"
    failure = failure_from_exception(
        _chained(APIConnectionError(500, f"litellm.APIConnectionError: {text}"), cause), "llama")
    assert failure.status == 502
    assert failure.message.startswith("the upstream of model 'llama' sent an answer the "
                                      "gateway cannot use")
    assert "not sent" not in failure.message
