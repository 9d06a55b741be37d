"""Prompt-cache keys end to end (SPEC §6) on both wire styles, through the openai SDK.

OpenAI-style upstream (the referee, passthrough): the session id (``x-session-id``, else the
body's ``prompt_cache_key``) travels as ``prompt_cache_key``; the client's own key is never
overridden. Anthropic-style upstream (litellm -> fake Messages API): a breakpoint at the end
of the stable prefix (last tool, system prompt) unless the client placed cache_control
itself; the prefix is never reordered or rewritten. Fingerprints of the system prompt and
the tool table are span attributes.
"""

from __future__ import annotations

import copy
import re
from collections.abc import AsyncIterator
from typing import Any

import pytest

from gateway.referee import Referee
from tests.conftest import GatewayFactory, RunningGateway, model_entry
from tests.factories import system, text_part, user
from tests.fakes.anthropic_server import FakeAnthropic
from tests.fakes.gemini_server import FakeGemini, field
from tests.providers.e2e_litellm import (
    ANTHROPIC_MODEL,
    GEMINI_MODEL,
    IGNORE_SCHEMA_WARNINGS,
    TOOLS,
    UPSTREAM_KEY,
    chat_span,
    sdk,
    start_native_gateway,
)

pytestmark = IGNORE_SCHEMA_WARNINGS

EPHEMERAL = {"type": "ephemeral"}
LONG_SYSTEM = "You are a careful assistant who answers in full sentences. " * 30
SESSION = {"x-session-id": "sess-42"}


@pytest.fixture
async def referee() -> AsyncIterator[Referee]:
    async with Referee(rules="openai", style="openai") as ref:
        yield ref


@pytest.fixture
async def openai_gw(gateway_factory: GatewayFactory, referee: Referee) -> RunningGateway:
    return await gateway_factory({"model_list": [model_entry("gpt", referee.base_url,
                                                             model="openai/referee")]})


@pytest.fixture
async def anthropic() -> AsyncIterator[FakeAnthropic]:
    async with FakeAnthropic(api_key=UPSTREAM_KEY) as server:
        yield server


@pytest.fixture
async def claude_gw(gateway_factory: GatewayFactory, anthropic: FakeAnthropic) -> RunningGateway:
    return await start_native_gateway(gateway_factory, anthropic.base_url, ANTHROPIC_MODEL,
                                      name="claude")


# --- OpenAI-style upstream: prompt_cache_key ----------------------------------------------


@pytest.mark.parametrize(
    ("headers", "body_key", "expected"),
    [
        (SESSION, None, "sess-42"),  # the session id becomes the key
        (SESSION, "client-own-key", "client-own-key"),  # the client's own key wins
        ({}, "client-own-key", "client-own-key"),  # passed through as sent
        ({}, None, None),  # no session: nothing invented
    ],
    ids=["header", "header-and-client-key", "client-key", "none"],
)
async def test_openai_style_upstream_gets_the_session_as_prompt_cache_key(
    openai_gw: RunningGateway, referee: Referee, headers: dict[str, str],
    body_key: str | None, expected: str | None,
) -> None:
    extra = {"prompt_cache_key": body_key} if body_key else None
    async with sdk(openai_gw) as c:
        await c.chat.completions.create(model="gpt", messages=[system("sys"), user("hi")],
                                        extra_headers=headers, extra_body=extra)
    sent = referee.requests[-1].json()
    assert sent.get("prompt_cache_key") == expected
    assert sent["messages"] == [system("sys"), user("hi")]  # nothing else changed


# --- Anthropic-style upstream: cache breakpoints -----------------------------------------


async def test_breakpoints_mark_the_end_of_the_stable_prefix(
    claude_gw: RunningGateway, anthropic: FakeAnthropic
) -> None:
    messages = [system(LONG_SYSTEM), user("first question")]
    tools = copy.deepcopy(TOOLS)
    async with sdk(claude_gw) as c:
        first = await c.chat.completions.create(model="claude", messages=messages, tools=tools,
                                                max_tokens=50, extra_headers=SESSION)
        again = await c.chat.completions.create(
            model="claude", messages=[system(LONG_SYSTEM), user("second question")],
            tools=tools, max_tokens=50, extra_headers=SESSION)
    sent = anthropic.requests[0].body
    assert sent["system"] == [{"type": "text", "text": LONG_SYSTEM, "cache_control": EPHEMERAL}]
    # The tool table arrives in the client's order, only its last entry marked.
    assert [t["name"] for t in sent["tools"]] == ["lookup", "weather"]
    assert [t.get("cache_control") for t in sent["tools"]] == [None, EPHEMERAL]
    assert [t["input_schema"] for t in sent["tools"]] == [
        t["function"]["parameters"] for t in TOOLS]
    assert "cache_control" not in str(sent["messages"])  # the changing tail is not marked
    assert "prompt_cache_key" not in sent and "sess-42" not in anthropic.requests[0].raw.decode()
    assert tools == TOOLS  # the client's objects are untouched
    # The provider's cache works across requests that share the prefix.
    assert first.usage is not None and again.usage is not None
    assert first.usage.prompt_tokens_details is not None
    assert again.usage.prompt_tokens_details is not None
    assert first.usage.prompt_tokens_details.cached_tokens == 0
    assert again.usage.prompt_tokens_details.cached_tokens > 0


async def test_client_cache_control_is_left_as_sent(
    claude_gw: RunningGateway, anthropic: FakeAnthropic
) -> None:
    marked = text_part("long document", cache_control=EPHEMERAL)
    async with sdk(claude_gw) as c:
        await c.chat.completions.create(
            model="claude", messages=[system(LONG_SYSTEM), user([marked, text_part("q")])],
            tools=TOOLS, max_tokens=50)
    sent = anthropic.requests[-1].body
    assert "cache_control" not in str(sent["system"]) + str(sent["tools"])
    assert sent["messages"][0]["content"][0] == {"type": "text", "text": "long document",
                                                 "cache_control": EPHEMERAL}


async def test_system_only_and_tools_only_prefixes(
    claude_gw: RunningGateway, anthropic: FakeAnthropic
) -> None:
    async with sdk(claude_gw) as c:
        await c.chat.completions.create(model="claude", max_tokens=50,
                                        messages=[system("a"), system("b"), user("hi")])
        await c.chat.completions.create(model="claude", max_tokens=50, tools=TOOLS,
                                        messages=[user("hi")])
    systems = anthropic.requests[0].body["system"]
    assert [b["text"] for b in systems] == ["a", "b"]  # order kept, only the last marked
    assert [b.get("cache_control") for b in systems] == [None, EPHEMERAL]
    tools_only = anthropic.requests[1].body
    assert "system" not in tools_only
    assert tools_only["tools"][-1]["cache_control"] == EPHEMERAL


async def test_gemini_gets_no_cache_hints(gateway_factory: GatewayFactory) -> None:
    async with FakeGemini(api_key=UPSTREAM_KEY) as gemini:
        gw = await start_native_gateway(gateway_factory, gemini.base_url, GEMINI_MODEL)
        async with sdk(gw) as c:
            answer = await c.chat.completions.create(
                model="native", messages=[system(LONG_SYSTEM), user("hi")], tools=TOOLS,
                extra_headers=SESSION)
        raw = gemini.requests[-1].raw.decode()
        sent = gemini.requests[-1].body
    assert answer.choices[0].message.content == "you said: hi"
    assert "cache_control" not in raw and "sess-42" not in raw
    assert field(sent, "cachedContent") is None


# --- fingerprints ---------------------------------------------------------------------------


def _hashes(gw: RunningGateway, index: int) -> tuple[Any, Any]:
    attributes = chat_span(gw, index).attributes or {}
    return attributes.get("gateway.prompt.system_hash"), attributes.get("gateway.prompt.tools_hash")


async def test_prefix_fingerprints_are_span_attributes_on_both_wires(
    openai_gw: RunningGateway, claude_gw: RunningGateway
) -> None:
    other_tools = [TOOLS[1], TOOLS[0]]
    for gw, model in ((openai_gw, "gpt"), (claude_gw, "claude")):
        async with sdk(gw) as c:
            for question, tools in (("one", TOOLS), ("two", TOOLS), ("three", other_tools)):
                await c.chat.completions.create(
                    model=model, messages=[system(LONG_SYSTEM), user(question)], tools=tools,
                    max_tokens=20)
            await c.chat.completions.create(model=model, max_tokens=20, tools=TOOLS,
                                            messages=[system("another prompt"), user("four")])
        first, second, reordered, new_system = (_hashes(gw, i) for i in range(4))
        assert all(re.fullmatch(r"[0-9a-f]{16}", h) for h in first)
        assert first == second  # the changing tail does not move the fingerprints
        assert reordered[0] == first[0] and reordered[1] != first[1]
        assert new_system[0] != first[0] and new_system[1] == first[1]
    # The fingerprint is of what the client sent: the same on both wires.
    assert _hashes(openai_gw, 0) == _hashes(claude_gw, 0)
