"""Error messages never quote a credential: configured secrets and the value of a
credential header an HTTP parse error names are masked in every error body."""

from __future__ import annotations

import logging

import orjson
import pytest

from gateway.errors import ClientError
from gateway.redact import install_log_redaction
from gateway.server.errors import clean_message, error_response, status_response


@pytest.mark.parametrize(("text", "shown"), [
    ("Invalid header value char: b'Authorization: Bearer sk-live-1\\x01' ^",
     "Invalid header value char: b'Authorization: Bearer ***' ^"),
    ("b'x-api-key: \\x01sk-ant-2'", "b'x-api-key: ***'"),
    ("b'Proxy-Authorization: Basic dXNlcjpwYXNz'", "b'Proxy-Authorization: Basic ***'"),
    ("x-goog-api-key:AIzaSy-3", "x-goog-api-key:***"),
])
def test_a_quoted_credential_header_value_is_masked(text: str, shown: str) -> None:
    assert clean_message(text) == shown


@pytest.mark.parametrize("text", [
    "missing or invalid API key; send 'Authorization: Bearer <key>'",
    "the api-key header is required",
    "prompt is too long: 9000 tokens > 8192 maximum",
])
def test_messages_without_a_credential_are_unchanged(text: str) -> None:
    assert clean_message(text) == text


def test_the_openai_envelope_masks_what_it_quotes() -> None:
    err = ClientError(400, "malformed HTTP request: b'api-key: sk-abc\\x7f' ^")
    for response in (error_response(err), status_response(400, err.message)):
        assert isinstance(response.body, bytes)
        body = orjson.loads(response.body)
        assert "sk-abc" not in body["error"]["message"]
        assert body["error"]["message"].endswith("b'api-key: ***' ^")


def test_a_log_line_quoting_an_unknown_key_in_a_header_is_masked(
    caplog: pytest.LogCaptureFixture,
) -> None:
    install_log_redaction()
    caplog.set_level(logging.INFO)
    logging.getLogger("gateway.test").info(
        "refused a malformed HTTP request: %s", "b'Authorization: Bearer sk-unknown-9876\\x01'")
    logging.getLogger("gateway.test").info("the x-api-key: header is missing")
    assert "sk-unknown-9876" not in caplog.text
    assert "Authorization: Bearer ***" in caplog.text
    assert "the x-api-key: header is missing" in caplog.text  # a short word is no key
