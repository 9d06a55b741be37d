"""Scripted replies, dropped connections, auth, context window and image limits."""

from __future__ import annotations

import json
from typing import Any

import aiohttp
import openai
import pytest

from gateway.referee import Referee, bodies
from tests.http import post
from tests.referee.support import (
    assistant,
    chat,
    data_url,
    image_bytes,
    image_part,
    padded_user,
    record_body,
    user,
)

GOOD = chat(user("hi"))


def chat_url(ref: Referee) -> str:
    """The referee's chat completions endpoint."""
    return f"{ref.base_url}/chat/completions"


async def test_scripted_replies_come_first_then_normal_behaviour() -> None:
    async with Referee() as ref:
        ref.script(429, {"error": {"message": "slow down"}}, {"Retry-After": "2"})
        ref.script(bodies.overloaded("anthropic"), times=2)
        status, headers, raw = await post(chat_url(ref), GOOD)
        assert (status, headers["Retry-After"], json.loads(raw)) == (
            429,
            "2",
            {"error": {"message": "slow down"}},
        )
        for _ in range(2):
            status, headers, raw = await post(chat_url(ref), GOOD)
            assert (status, raw) == (529, record_body(104).encode())
            assert headers["x-should-retry"] == "true"
        status, _, raw = await post(chat_url(ref), GOOD)
        assert status == 200
        assert json.loads(raw)["choices"][0]["message"]["content"] == "referee: accepted 1 messages"
        assert [r.status for r in ref.requests] == [429, 529, 529, 200]


async def test_scripted_raw_sse_body_keeps_its_content_type() -> None:
    events = b'data: {"oops": true}\n\n'
    async with Referee() as ref:
        ref.script(200, events, {"Content-Type": "text/event-stream"})
        status, headers, raw = await post(chat_url(ref), GOOD)
    assert (status, raw) == (200, events)
    assert headers["Content-Type"].startswith("text/event-stream")


async def test_sdk_retries_a_scripted_server_error() -> None:
    async with Referee() as ref:
        failure = bodies.server_error("openai")
        # retry-after-ms keeps the SDK's own back-off short
        ref.script(failure.status, failure.body, {"retry-after-ms": "1"}, times=2)
        once = openai.AsyncOpenAI(base_url=ref.base_url, api_key="k", max_retries=0)
        with pytest.raises(openai.InternalServerError) as caught:
            await once.chat.completions.create(model="m", messages=[user()])
        await once.close()
        assert caught.value.message.endswith(
            "The server had an error while processing your request. Sorry about that!"
        )
        retrying = openai.AsyncOpenAI(base_url=ref.base_url, api_key="k", max_retries=1)
        response = await retrying.chat.completions.create(model="m", messages=[user()])
        await retrying.close()
    assert response.choices[0].message.content == "referee: accepted 1 messages"
    assert [r.status for r in ref.requests] == [500, 500, 200]


async def test_scripted_disconnect_drops_the_connection_once() -> None:
    async with Referee() as ref:
        ref.script_disconnect()
        with pytest.raises(aiohttp.ClientConnectionError):
            await post(chat_url(ref), GOOD)
        status, _, _ = await post(chat_url(ref), GOOD)
    assert status == 200
    assert len(ref.requests) == 2


async def test_openai_style_auth() -> None:
    async with Referee(require_auth="sk-right-key") as ref:
        status, _, raw = await post(chat_url(ref), GOOD)
        assert status == 401
        assert "You didn't provide an API key" in json.loads(raw)["error"]["message"]

        sdk = openai.AsyncOpenAI(base_url=ref.base_url, api_key="sk-wrong-key-0000", max_retries=0)
        with pytest.raises(openai.AuthenticationError) as caught:
            await sdk.chat.completions.create(model="m", messages=[user()])
        await sdk.close()
        assert caught.value.code == "invalid_api_key"
        assert "sk-wrong-key-0000" not in caught.value.message

        status, _, _ = await post(
            chat_url(ref), GOOD, headers={"Authorization": "Bearer sk-right-key"}
        )
        assert status == 200
        assert [r.situation for r in ref.requests] == ["auth", "auth", None]


async def test_anthropic_style_auth_uses_x_api_key() -> None:
    async with Referee(style="anthropic", require_auth="key-1") as ref:
        status, headers, raw = await post(
            chat_url(ref), GOOD, headers={"Authorization": "Bearer key-1"}
        )
        assert status == 401
        error = json.loads(raw)
        assert error["error"] == {
            "type": "authentication_error",
            "message": "x-api-key header is required",
        }
        assert error["request_id"] == headers["request-id"]
        status, _, _ = await post(chat_url(ref), GOOD, headers={"x-api-key": "key-1"})
        assert status == 200


async def test_context_window_counts_tools_and_can_change() -> None:
    tools = [{"type": "function", "function": {"name": "f", "description": "d" * 400}}]
    async with Referee(context_window=1000) as ref:
        assert (await post(chat_url(ref), chat(*padded_user(1000))))[0] == 200
        status, _, raw = await post(chat_url(ref), chat(*padded_user(1001)))
        assert status == 400
        error = json.loads(raw)["error"]
        assert error["code"] == "context_length_exceeded"
        assert error["message"].startswith(
            "This model's maximum context length is 1000 tokens. However, your messages "
            "resulted in 1001 tokens."
        )
        status, _, raw = await post(chat_url(ref), chat(*padded_user(950), tools=tools))
        message = json.loads(raw)["error"]["message"]
        assert status == 400
        assert "(950 in the messages, " in message and "in the functions)" in message

        ref.configure(context_window=None)
        assert (await post(chat_url(ref), chat(*padded_user(5000))))[0] == 200
        assert [r.situation for r in ref.requests] == [None, "i", "i", None]


def _image_request(url: str) -> dict[str, Any]:
    return chat(user("look"), assistant("ok"), {"role": "user", "content": [
        {"type": "text", "text": "this one"}, image_part(url)]})  # fmt: skip


async def _anthropic_message(ref: Referee, url: str) -> str:
    status, _, raw = await post(chat_url(ref), _image_request(url))
    assert status == 400
    assert ref.requests[-1].situation == "h"
    return str(json.loads(raw)["error"]["message"])


async def test_image_rules_in_anthropic_style() -> None:
    png = image_bytes("PNG", (40, 30))
    async with Referee(
        style="anthropic",
        allowed_image_formats={"png", "jpeg"},
        max_image_bytes=len(png) + 10,
        max_image_side=50,
    ) as ref:
        assert (await post(chat_url(ref), _image_request(data_url(png))))[0] == 200
        assert (await post(chat_url(ref), _image_request("https://example.com/huge.bmp")))[0] == 200

        gif = data_url(image_bytes("GIF"), "image/gif")
        assert await _anthropic_message(ref, gif) == (
            "messages.2.content.1.image.source.base64.media_type: Input should be "
            "'image/jpeg' or 'image/png'"
        )
        jpeg_as_png = data_url(image_bytes("JPEG"), "image/png")
        assert await _anthropic_message(ref, jpeg_as_png) == (
            "messages.2.content.1.image.source.base64: The image was specified using the "
            "image/png media type, but the image appears to be a image/jpeg image"
        )
        padded = png + b"\0" * 200
        assert await _anthropic_message(ref, data_url(padded)) == (
            f"messages.2.content.1.image.source.base64: image exceeds "
            f"{(len(png) + 10) / 1048576:g} MB maximum: {len(padded)} bytes > {len(png) + 10} bytes"
        )
        tall = data_url(image_bytes("PNG", (10, 51)))
        assert await _anthropic_message(ref, tall) == (
            "messages.2.content.1.image.source.base64.data: At least one of the image "
            "dimensions exceed max allowed size for many-image requests: 50 pixels"
        )
        bad_base64 = "data:image/png;base64,@@@@"
        assert await _anthropic_message(ref, bad_base64) == (
            "messages.2.content.1.image.source.base64.data: Image does not match the provided "
            "media type image/png"
        )


async def test_images_are_not_decoded_without_image_settings() -> None:
    async with Referee() as ref:
        status, _, _ = await post(chat_url(ref), _image_request("data:image/png;base64,AAAA"))
    assert status == 200
