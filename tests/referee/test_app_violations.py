"""Refusals through the real server reproduce the recorded provider answers."""

from __future__ import annotations

import ast
import json
import re
from typing import Any

from gateway.referee import Referee
from tests.http import post
from tests.referee.support import (
    assistant,
    chat,
    data_url,
    image_bytes,
    image_part,
    padded_user,
    record_body,
    tool,
    user,
    with_request_id,
)


def chat_url(ref: Referee) -> str:
    """The referee's chat completions endpoint."""
    return f"{ref.base_url}/chat/completions"


async def refused_like_record(ref: Referee, body: Any, n: int) -> None:
    """The referee refuses ``body`` with record ``n``'s exact bytes (request id aside)."""
    status, headers, raw = await post(chat_url(ref), body)
    assert status == 400
    request_id = json.loads(raw)["request_id"]
    assert headers["request-id"] == headers["x-request-id"] == request_id
    assert raw == with_request_id(record_body(n), request_id)


async def test_anthropic_style_reproduces_pairing_records() -> None:
    async with Referee("strict", "anthropic") as ref:
        # a trimmed history that starts with a tool result (record 5)
        await refused_like_record(ref, chat(tool("toolu_01FxdGdpPyaZq3sCLqXtgJki"), user()), n=5)
        # a call left unanswered at Anthropic position 63; the system message is not counted
        history = [{"role": "system", "content": "rules"}, *[user(), assistant()] * 31, user()]
        body = chat(*history, assistant(None, "toolu_01Qimu3Y5DwauzoDUuBv2DmZ"), user("go on"))
        await refused_like_record(ref, body, n=15)
        # the same id twice in one assistant message (record 52)
        await refused_like_record(
            ref, chat(user(), assistant(None, "toolu_dup", "toolu_dup"), tool("toolu_dup")), n=52
        )
        assert [r.situation for r in ref.requests] == ["a", "b", "g"]
        assert all(r.status == 400 for r in ref.requests)


async def test_anthropic_style_reproduces_empty_content_records() -> None:
    async with Referee("strict", "anthropic") as ref:
        empty_part = {"role": "user", "content": [{"type": "text", "text": ""}]}
        await refused_like_record(ref, chat(empty_part, assistant()), n=26)
        blank_part = {"role": "user", "content": [{"type": "text", "text": " \n\t"}]}
        await refused_like_record(ref, chat(blank_part, assistant()), n=35)
        await refused_like_record(ref, chat(user(""), assistant()), n=30)
        assert {r.situation for r in ref.requests} == {"d"}


async def test_anthropic_style_reproduces_image_and_overflow_records() -> None:
    async with Referee(
        "strict", "anthropic", allowed_image_formats=["png", "jpeg"], max_image_side=2000
    ) as ref:
        garbage = {"role": "user", "content": [image_part(data_url(b"not an image at all"))]}
        await refused_like_record(ref, chat(user(), assistant(), garbage), n=69)

        wide = image_part(data_url(image_bytes(size=(2100, 10))))
        parts = [{"type": "text", "text": f"page {k}"} for k in range(12)]
        history = [user(), assistant(None, "c1"), tool("c1"), *[user(), assistant()] * 28]
        body = chat(*history, {"role": "user", "content": [*parts, wide]})
        await refused_like_record(ref, body, n=75)

        ref.configure(context_window=200000)
        body = chat(*padded_user(219898, {"role": "system", "content": "s"}))
        await refused_like_record(ref, body, n=86)
        assert [r.situation for r in ref.requests] == ["h", "h", "i"]


async def test_openai_style_reproduces_openai_records() -> None:
    async with Referee("openai", "openai") as ref:
        body = chat(user(), assistant(), tool("call_x"), user())
        status, _, raw = await post(chat_url(ref), body)
        assert status == 400
        assert json.loads(raw) == ast.literal_eval(record_body(3))  # param messages.[2].role

        history = [user(), assistant(), user(), assistant(), user()]
        body = chat(*history, assistant(None, "call_RTlWVuE5MqEb3WZJgTIl7Rsb"), user("next"))
        status, _, raw = await post(chat_url(ref), body)
        assert status == 400
        assert json.loads(raw) == json.loads(re.sub(r"\s*\n", " ", record_body(12)))

        status, _, raw = await post(chat_url(ref), chat({"role": "user", "content": None}))
        assert status == 400
        assert json.loads(raw) == json.loads(record_body(32).split("}   (")[0] + "}")


async def test_openai_style_reproduces_image_and_overflow_records() -> None:
    async with Referee(
        "openai", "openai", allowed_image_formats=["png", "jpeg", "gif", "webp"]
    ) as ref:
        garbage = {"role": "user", "content": [image_part(data_url(b"\x00" * 64))]}
        status, _, raw = await post(chat_url(ref), chat(garbage))
        assert (status, raw) == (400, record_body(67).encode())

        bmp = {"role": "user", "content": [image_part(data_url(image_bytes("BMP"), "image/bmp"))]}
        status, _, raw = await post(chat_url(ref), chat(bmp))
        assert status == 400
        assert json.loads(raw)["error"]["message"] == record_body(72)

        ref.configure(context_window=4097)
        status, _, raw = await post(chat_url(ref), chat(*padded_user(6988)))
        assert status == 400
        assert json.loads(raw) == ast.literal_eval(record_body(82))


async def test_strict_problems_are_accepted_by_openai_rules() -> None:
    body = chat(user(), user("again"), assistant(""), assistant("x"))
    async with Referee("openai", "openai") as lenient, Referee("strict", "openai") as strict:
        assert (await post(chat_url(lenient), body))[0] == 200
        status, _, raw = await post(chat_url(strict), body)
        assert status == 400
        assert "roles must alternate" in json.loads(raw)["error"]["message"]
