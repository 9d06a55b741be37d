"""The native fakes are strict: native bodies are refused exactly as the real APIs refuse them.

These talk to the fakes directly with aiohttp (no litellm), so they also pin the wire
formats the LiteLLM provider tests rely on.
"""

from __future__ import annotations

import base64
from typing import Any

import orjson
import pytest

from tests.fakes.anthropic_server import FakeAnthropic, anthropic_error
from tests.fakes.gemini_server import FakeGemini, gemini_error
from tests.fakes.native_base import png_bytes
from tests.http import post, post_json

ANTHROPIC_HEADERS = {"x-api-key": "sk-test", "anthropic-version": "2023-06-01"}


def messages_body(messages: list[Any], **extra: Any) -> dict[str, Any]:
    return {"model": "claude-sonnet-4-5", "max_tokens": 64, "messages": messages, **extra}


USE = {"type": "tool_use", "id": "toolu_1", "name": "lookup", "input": {}}
RESULT = {"type": "tool_result", "tool_use_id": "toolu_1", "content": "42"}


@pytest.mark.parametrize(
    ("messages", "message"),
    [
        (
            [{"role": "user", "content": [RESULT]}],
            "messages.0.content.0: unexpected `tool_use_id` found in `tool_result` blocks: "
            "toolu_1. Each `tool_result` block must have a corresponding `tool_use` block in "
            "the previous message.",
        ),
        (
            [
                {"role": "user", "content": "hi"},
                {"role": "assistant", "content": [USE]},
                {"role": "user", "content": "go on"},
            ],
            "messages.1: `tool_use` ids were found without `tool_result` blocks immediately "
            "after: toolu_1. Each `tool_use` block must have a corresponding `tool_result` "
            "block in the next message.",
        ),
        (
            [
                {"role": "user", "content": "hi"},
                {"role": "assistant", "content": [USE, USE]},
                {"role": "user", "content": [RESULT]},
            ],
            "messages.1.content.1: `tool_use` ids must be unique",
        ),
        (
            [{"role": "user", "content": [{"type": "text", "text": ""}]}],
            "messages: text content blocks must be non-empty",
        ),
        (
            [{"role": "user", "content": [{"type": "text", "text": "  \n"}]}],
            "messages: text content blocks must contain non-whitespace text",
        ),
        (
            [
                {"role": "user", "content": "hi"},
                {"role": "assistant", "content": ""},
                {"role": "user", "content": "again"},
            ],
            "messages.1: all messages must have non-empty content except for the optional "
            "final assistant message",
        ),
        (
            [{"role": "assistant", "content": "hello"}, {"role": "user", "content": "hi"}],
            'messages: first message must use the "user" role',
        ),
        (
            [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}],
            'messages: Unexpected role "system". The Messages API accepts a top-level `system` '
            'parameter, not "system" as an input message role.',
        ),
    ],
)
async def test_anthropic_refuses_broken_history_with_native_error(
    messages: list[Any], message: str
) -> None:
    async with FakeAnthropic() as fake:
        status, _, body = await post_json(
            f"{fake.base_url}/v1/messages", messages_body(messages), ANTHROPIC_HEADERS
        )
    assert status == 400
    assert body["type"] == "error"
    assert body["error"] == {"type": "invalid_request_error", "message": message}


async def test_anthropic_merges_consecutive_turns_and_answers_tool_results() -> None:
    messages = [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": [USE]},
        {"role": "user", "content": [RESULT]},
        {"role": "user", "content": "and now?"},
    ]
    async with FakeAnthropic() as fake:
        status, _, body = await post_json(
            f"{fake.base_url}/v1/messages",
            messages_body(messages, tools=[{"name": "lookup", "input_schema": {}}]),
            ANTHROPIC_HEADERS,
        )
        undeclared, _, refused = await post_json(
            f"{fake.base_url}/v1/messages", messages_body(messages), ANTHROPIC_HEADERS
        )
    assert status == 200
    assert body["content"] == [{"type": "text", "text": "tool results: 42 | you said: and now?"}]
    assert undeclared == 400  # tool blocks need tools, as on the real API
    assert "must define tools" in refused["error"]["message"]
    assert body["stop_reason"] == "end_turn"


async def test_anthropic_checks_headers_and_images() -> None:
    image = {
        "type": "image",
        "source": {
            "type": "base64",
            "media_type": "image/jpeg",
            "data": base64.b64encode(png_bytes()).decode(),
        },
    }
    async with FakeAnthropic(api_key="sk-right") as fake:
        url = f"{fake.base_url}/v1/messages"
        ok = messages_body([{"role": "user", "content": "hi"}])
        missing = await post(url, ok, {"anthropic-version": "2023-06-01"})
        wrong = await post(url, ok, ANTHROPIC_HEADERS)
        no_version = await post(url, ok, {"x-api-key": "sk-right"})
        mismatch = await post(
            url,
            messages_body([{"role": "user", "content": [image]}]),
            {**ANTHROPIC_HEADERS, "x-api-key": "sk-right"},
        )
    assert missing.status == 401
    assert missing.json["error"]["message"] == "x-api-key header is required"
    assert wrong.status == 401 and wrong.json["error"]["type"] == "authentication_error"
    assert no_version.status == 400
    assert mismatch.json["error"]["message"] == (
        "messages.0.content.0.image.source.base64.data: Image does not match the provided "
        "media type image/jpeg"
    )


async def test_anthropic_native_stream_event_sequence() -> None:
    tools = [{"name": "lookup", "input_schema": {"type": "object"}}]
    body = messages_body([{"role": "user", "content": "use the TOOL"}], tools=tools, stream=True)
    async with FakeAnthropic() as fake:
        status, _, raw = await post(f"{fake.base_url}/v1/messages", body, ANTHROPIC_HEADERS)
    events = [block.split("\n", 1)[0] for block in raw.decode().split("\n\n") if block]
    assert status == 200
    assert events[:3] == ["event: message_start", "event: content_block_start", "event: ping"]
    assert events[-3:] == [
        "event: content_block_stop",
        "event: message_delta",
        "event: message_stop",
    ]
    assert b'"type":"input_json_delta"' in raw and b'"stop_reason":"tool_use"' in raw


async def test_anthropic_script_and_prompt_cache_accounting() -> None:
    system = [{"type": "text", "text": "stable " * 50, "cache_control": {"type": "ephemeral"}}]
    body = messages_body([{"role": "user", "content": "hi"}], system=system)
    async with FakeAnthropic() as fake:
        fake.script(anthropic_error(529, "Overloaded", "overloaded_error"))
        url = f"{fake.base_url}/v1/messages"
        overloaded = await post(url, body, ANTHROPIC_HEADERS)
        first = await post(url, body, ANTHROPIC_HEADERS)
        second = await post(url, body, ANTHROPIC_HEADERS)
    assert overloaded.status == 529
    assert overloaded.json["error"] == {"type": "overloaded_error", "message": "Overloaded"}
    assert first.json["usage"]["cache_creation_input_tokens"] > 0
    assert first.json["usage"]["cache_read_input_tokens"] == 0
    assert (
        second.json["usage"]["cache_read_input_tokens"]
        == (first.json["usage"]["cache_creation_input_tokens"])
    )
    assert len(fake.requests) == 3


CALL = {"functionCall": {"name": "lookup", "args": {}}}
RESPONSE = {"functionResponse": {"name": "lookup", "response": {"v": 42}}}


@pytest.mark.parametrize(
    ("contents", "message"),
    [
        (
            [
                {"role": "user", "parts": [{"text": "hi"}]},
                {"role": "model", "parts": [CALL]},
                {"role": "user", "parts": [{"text": "go on"}]},
            ],
            "Please ensure that the number of function response parts is equal to the number "
            "of function call parts of the function call turn.",
        ),
        (
            [
                {"role": "user", "parts": [{"text": "hi"}]},
                {"role": "model", "parts": [CALL, CALL]},
                {"role": "user", "parts": [RESPONSE]},
            ],
            "Please ensure that the number of function response parts is equal to the number "
            "of function call parts of the function call turn.",
        ),
        (
            [{"role": "user", "parts": [RESPONSE]}],
            "Please ensure that function response turn comes immediately after a function call "
            "turn.",
        ),
        (
            [{"role": "model", "parts": [CALL]}, {"role": "user", "parts": [RESPONSE]}],
            "Please ensure that function call turn comes immediately after a user turn or after "
            "a function response turn.",
        ),
        (
            [{"role": "user", "parts": [{"text": ""}]}],
            "* GenerateContentRequest.contents[0].parts[0].data: required oneof field 'data' "
            "must have one initialized field\n",
        ),
        (
            [{"role": "assistant", "parts": [{"text": "x"}]}],
            "Please use a valid role: user, model.",
        ),
        ([], "* GenerateContentRequest.contents: contents is not specified\n"),
    ],
)
async def test_gemini_refuses_broken_history_with_native_error(
    contents: list[Any], message: str
) -> None:
    async with FakeGemini() as fake:
        status, _, body = await post_json(
            f"{fake.base_url}/v1beta/models/gemini-2.5-flash:generateContent",
            {"contents": contents},
            {"x-goog-api-key": "k"},
        )
    assert status == 400
    assert body == {"error": {"code": 400, "message": message, "status": "INVALID_ARGUMENT"}}


async def test_gemini_paths_auth_snake_case_and_unknown_fields() -> None:
    body = {
        "contents": [{"role": "user", "parts": [{"text": "hi"}]}],
        "generation_config": {"max_output_tokens": 20},
    }
    async with FakeGemini() as fake:
        versioned = await post(
            f"{fake.base_url}/v1beta/models/m:generateContent", body, {"x-goog-api-key": "k"}
        )
        bare = await post(f"{fake.base_url}/models/m:generateContent?key=k", body, {})
        anonymous = await post(f"{fake.base_url}/models/m:generateContent", body, {})
        unknown = await post(
            f"{fake.base_url}/models/m:generateContent",
            {**body, "max_tokens": 5},
            {"x-goog-api-key": "k"},
        )
    assert versioned.status == bare.status == 200
    assert versioned.json["candidates"][0]["content"]["parts"] == [{"text": "you said: hi"}]
    assert anonymous.status == 403 and anonymous.json["error"]["status"] == "PERMISSION_DENIED"
    assert unknown.json["error"]["message"] == (
        'Invalid JSON payload received. Unknown name "max_tokens": Cannot find field.'
    )


async def test_gemini_stream_framing_script_and_pairing_accepted() -> None:
    contents = [
        {"role": "user", "parts": [{"text": "hi"}]},
        {"role": "model", "parts": [CALL]},
        {"role": "user", "parts": [RESPONSE]},
    ]
    async with FakeGemini() as fake:
        fake.script(gemini_error(429, "Resource exhausted."))
        url = f"{fake.base_url}/v1beta/models/m:streamGenerateContent?alt=sse"
        limited = await post(url, {"contents": contents}, {"x-goog-api-key": "k"})
        status, _, raw = await post(url, {"contents": contents}, {"x-goog-api-key": "k"})
    assert limited.status == 429 and limited.json["error"]["status"] == "RESOURCE_EXHAUSTED"
    events = [orjson.loads(e[len(b"data: ") :]) for e in raw.split(b"\r\n\r\n") if e]
    text = "".join(e["candidates"][0]["content"]["parts"][0]["text"] for e in events)
    assert status == 200
    assert text == 'tool results: {"v":42}'
    assert events[-1]["candidates"][0]["finishReason"] == "STOP"
    assert "usageMetadata" in events[-1]


async def test_anthropic_refuses_fields_the_api_does_not_know() -> None:
    body = messages_body([{"role": "user", "content": "hi"}], max_retries=0)
    async with FakeAnthropic() as fake:
        status, _, answer = await post_json(f"{fake.base_url}/v1/messages", body, ANTHROPIC_HEADERS)
    assert status == 400
    assert answer["error"]["message"] == "max_retries: Extra inputs are not permitted"
