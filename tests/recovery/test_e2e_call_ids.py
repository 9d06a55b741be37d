"""Tool call ids in a form an upstream refuses, end to end: a session begun on one provider
(OpenAI's 28-character ids, Kimi's ``functions.name:0``, Anthropic ids past 40 characters)
continued on another that refuses them. The refusal sends the request to the strict rung,
which rewrites the ids (and their results' ``tool_call_id``) into the form asked for."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

import pytest

from gateway.recovery.classifier import call_id_form
from tests.conftest import GatewayFactory
from tests.factories import exchange, user
from tests.fakes.faulty_upstream import Fault, FaultyUpstream, Received, Writer, answer, ok_json
from tests.recovery.e2e_support import client, start_gateway

# (refusal body, the ids it takes): what each provider answers for an id it does not take.
MISTRAL = (b'{"object":"error","message":"Tool call id was %s but must be a-z, A-Z, 0-9, '
           b'with a length of 9.","type":"BadRequestError","param":null,"code":400}',
           re.compile(r"[A-Za-z0-9]{9}"))
ANTHROPIC_VIA_PROXY = (b'{"error":{"message":"litellm.BadRequestError: AnthropicException - '
                       b'messages.1.content.0.tool_use.id: String should match pattern '
                       b"'^[a-zA-Z0-9_-]+$' (got %s)\",\"type\":\"invalid_request_error\","
                       b'"param":null,"code":"400"}}', re.compile(r"[a-zA-Z0-9_-]+"))
OPENAI = (b'{"error":{"message":"Invalid \'messages[2].tool_calls[0].id\': string too long. '
          b'Expected a string with maximum length 40, but got %s instead.","type":'
          b'"invalid_request_error","param":"messages[2].tool_calls[0].id","code":'
          b'"string_above_max_length"}}', re.compile(r".{1,40}"))

OPENAI_IDS = ("call_7f3a2b1c9d8e4f60a1b2c3d4", "call_0d1e2f3a4b5c6d7e8f9a0b1c")
KIMI_IDS = ("functions.get_weather:0", "functions.read_file:1")
LONG_IDS = ("toolu_" + "a" * 50, "toolu_01ABC")


def judge(refusal: tuple[bytes, re.Pattern[str]]) -> Fault:
    """An upstream that refuses a body holding an id outside its form (and any result that
    answers no call: a rewrite must carry the results with it), else answers."""
    body, form = refusal

    async def run(got: Received, w: Writer) -> None:
        messages = got.json()["messages"]
        called = [c["id"] for m in messages for c in m.get("tool_calls") or []]
        bad = [i for i in called if form.fullmatch(i) is None]
        answered = [m["tool_call_id"] for m in messages if m["role"] == "tool"]
        if bad:
            await answer(400, body % bad[0].encode(), {"Content-Type": "application/json"})(
                got, w)
        elif not set(answered) <= set(called):
            await answer(400, b'{"error":{"message":"Invalid parameter: messages with role '
                         b"'tool' must be a response to a preceeding message with "
                         b"'tool_calls'.\",\"type\":\"invalid_request_error\"}}",
                         {"Content-Type": "application/json"})(got, w)
        else:
            await ok_json()(got, w)
    return run


def history(ids: tuple[str, str]) -> list[dict[str, Any]]:
    return [user("weather in Paris, then read notes.txt"), *exchange(ids[0]),
            *exchange(ids[1]), user("and now?")]


CASES: dict[str, tuple[tuple[bytes, re.Pattern[str]], tuple[str, str], Callable[[str], bool]]] = {
    # (the upstream's refusal, the session's ids, which ids must be rewritten)
    "openai ids to mistral": (MISTRAL, OPENAI_IDS, lambda _: True),
    "kimi ids to anthropic": (ANTHROPIC_VIA_PROXY, KIMI_IDS, lambda i: ":" in i or "." in i),
    "long ids to openai": (OPENAI, LONG_IDS, lambda i: len(i) > 40),
}


@pytest.mark.parametrize("case", sorted(CASES))
async def test_refused_ids_are_rewritten_on_the_strict_rung(
        gateway_factory: GatewayFactory, case: str) -> None:
    refusal, ids, rewritten = CASES[case]
    async with FaultyUpstream() as up:
        up.then(judge(refusal), judge(refusal), judge(refusal), judge(refusal))
        gw = await start_gateway(gateway_factory, up.base_url)
        sent = history(ids)
        async with client(gw) as c:
            raw = await c.chat.completions.with_raw_response.create(model="demo",
                                                                    messages=sent)
            assert raw.parse().choices[0].message.content
            assert raw.headers["x-gateway-recovery"] == "strict"
            expected = sum(map(rewritten, ids))
            assert f"tool_call_id_rewritten={expected}" in raw.headers["x-gateway-repairs"]
            first, second = up.received[0].json(), up.received[1].json()
            assert first["messages"] == sent  # valid as sent: changed only after the refusal
            out = second["messages"]
            new_ids = [c["id"] for m in out for c in m.get("tool_calls") or []]
            assert [m["tool_call_id"] for m in out if m["role"] == "tool"] == new_ids
            assert [n == o for n, o in zip(new_ids, ids, strict=True)] == [
                not rewritten(i) for i in ids]
            # Only the ids changed.
            strip = [{k: v for k, v in m.items() if k not in ("tool_calls", "tool_call_id")}
                     for m in out]
            assert strip == [{k: v for k, v in m.items()
                              if k not in ("tool_calls", "tool_call_id")} for m in sent]
            # The agent's next turn: the same ids again (its prompt prefix stays the same).
            later = [*sent, {"role": "assistant", "content": "Sunny; the notes say hi."},
                     user("thanks")]
            await c.chat.completions.create(model="demo", messages=later)
            again = up.received[3].json()["messages"]
            assert [c["id"] for m in again for c in m.get("tool_calls") or []] == new_ids


@pytest.mark.parametrize("words, form", [
    (json.loads(MISTRAL[0] % b"call_x")["message"], "nine_alnum"),
    ("Tool call IDs should be alphanumeric strings with length >= 9! (2)", "nine_alnum"),
    (json.loads(ANTHROPIC_VIA_PROXY[0] % b"x")["error"]["message"], "portable"),
    (json.loads(OPENAI[0] % b"64")["error"]["message"], "portable"),
    ("messages with role 'tool' must be a response to a preceeding message with 'tool_calls'",
     None),
    ("max_tokens: length of 9 is not allowed", None),
])
def test_the_form_is_read_from_the_refusal(words: str, form: str | None) -> None:
    assert call_id_form(words) == form
