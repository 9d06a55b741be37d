"""The classifier reads the whole error body, and specific evidence outranks generic codes.

Invented wordings (not copied from the shared provider file) in layouts the field shows: a
string ``error`` field, a placeholder message with the reason in ``details`` / ``data`` /
``metadata.raw``, plain text around a JSON object, FastAPI ``detail`` lists, generic
``*_server_error`` codes on a ``400`` whose words say what is wrong, echoed requests.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from gateway.providers.errors import failure_from_http
from gateway.recovery.classifier import Verdict, explain
from gateway.recovery.evidence import body_texts

S, M, OV, R, T, F = (Verdict.STRUCTURAL, Verdict.MEDIA, Verdict.OVERFLOW,
                     Verdict.REQUEST_TOO_LARGE, Verdict.TRANSIENT, Verdict.FATAL)


def j(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


# (name, status, body, request had images, expected verdict)
LAYOUTS: list[tuple[str, int, str, bool, Verdict]] = [
    ("string-error-field", 400,
     j({"error": "Could not decode the picture you attached: unsupported format"}), True, M),
    ("placeholder-message-reason-in-data", 400,
     j({"code": 10003, "message": "请求参数错误",
        "data": {"reason": "tool_call_id call_9 has no matching tool result"}}), False, S),
    ("text-around-json", 400,
     'upstream said: {"error":{"message":"invalid_request"}} -- cause: image exceeds the '
     '5 MB maximum', True, M),
    ("server-error-code-on-a-400-image", 400,
     j({"error": {"message": "The image data you provided does not represent a valid image.",
                  "type": "invalid_request_error", "code": "provider_server_error"}}), True, M),
    ("temporarily-on-a-400-image", 400,
     j({"error": {"message": "Temporarily unable to fetch the image at the given URL.",
                  "code": "server_error"}}), True, M),
    ("internal-error-message-role-order-in-details", 400,
     j({"error": {"message": "Internal server error", "type": "api_error",
                  "details": ["messages: roles must alternate between user and assistant"]}}),
     False, S),
    ("fastapi-detail-list", 422,
     j({"detail": [{"loc": ["body", "messages", 3, "content"], "type": "value_error",
                    "msg": "Value error, text content must be non-empty"}]}), False, S),
    ("llamacpp-n-ctx", 400,
     j({"error": {"code": 400, "type": "exceed_context_size_error",
                  "message": "request (4311 tokens) exceeds the available context size "
                             "(2048 tokens), try increasing it",
                  "n_prompt_tokens": 4311, "n_ctx": 2048}}), False, OV),
    ("plain-text-overflow", 400,
     "Bad Request: prompt is too long (5210 tokens > 4096 maximum)", False, OV),
    ("wrapped-raw-provider-body", 400,
     j({"error": {"message": "Provider returned error", "code": 400,
                  "metadata": {"provider_name": "Some Cloud", "raw": j({"error": {
                      "message": "messages.2: each tool_use block must have a matching "
                                 "tool_result block immediately after"}})}}}), False, S),
    ("german-placeholder-gemini-style-violation", 400,
     j({"error": {"code": 400, "message": "Anfrage ungültig", "status": "INTERNAL_SERVER_ERROR",
                  "details": [{"@type": "type.googleapis.com/google.rpc.BadRequest",
                               "fieldViolations": [{
                                   "field": "contents[2].parts[0].inline_data",
                                   "description": "Unsupported MIME type: image/heic"}]}]}}),
     True, M),
    ("empty-message-reason-in-top-detail", 400,
     j({"error": {"message": "", "type": "server_error"},
        "detail": "Conversation roles must alternate user/assistant/user/assistant"}), False, S),
    ("overflow-with-internal-error-type", 400,
     j({"object": "error", "type": "InternalServerError", "code": 500,
        "message": "This model's maximum context length is 2048 tokens. However, you "
                   "requested 2300 tokens."}), False, OV),
    ("echoed-request-does-not-steer", 400,
     j({"error": {"message": "Invalid request"},
        "request": {"messages": [{"role": "user", "content": "my image is too large"}]}}),
     False, F),
    ("server-side-image-failure-5xx-stays-transient", 500,
     j({"error": {"message": "Internal error while processing the image",
                  "type": "server_error"}}), True, T),
    ("rate-limit-for-images-per-minute", 429,
     "Too Many Requests: image inputs per minute exhausted, retry after 2 seconds", True, T),
    ("payload-size-in-nested-list", 400,
     j({"errors": [{"status": "400", "title": "Bad Request",
                    "detail": "Request body exceeds the maximum of 20 MB"}]}), False, R),
]


@pytest.mark.parametrize(("name", "status", "body", "images", "expected"), LAYOUTS,
                         ids=[row[0] for row in LAYOUTS])
def test_layout_is_classified_as_intended(
    name: str, status: int, body: str, images: bool, expected: Verdict
) -> None:
    failure = failure_from_http(status, {}, body.encode(), "invented")
    verdict, rule = explain(failure, has_images=images)
    assert verdict is expected, f"{name}: {verdict} by {rule}"


def test_no_client_error_with_media_or_structure_evidence_is_transient() -> None:
    for name, status, body, images, expected in LAYOUTS:
        if 400 <= status < 500 and status != 429 and expected in (M, S):
            failure = failure_from_http(status, {}, body.encode(), "invented")
            assert explain(failure, has_images=images)[0] is not T, name


def test_body_texts_reads_nested_strings_and_text_around_json() -> None:
    texts = body_texts(b'proxy: {"error": {"message": "x", "details": [{"reason": "why"}]}} '
                       b'(trace 7)')
    assert texts == ["proxy:", "x", "why", "(trace 7)"]
    assert body_texts(b"not json at all") == ["not json at all"]
    assert body_texts(b"") == []
    assert "echo" not in " ".join(body_texts(b'{"error": "e", "input": "echo"}'))
