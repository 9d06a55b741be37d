"""Long agent sessions end to end (held-out round): many turns of one agent through the
gateway, each resending the whole history as the agent does, against fakes that speak the
real wire formats, enforce the providers' rules and have small windows, so that context
overflow, compaction and the turns after it happen within a few turns.

What the agent's user notices is asserted on every turn: an answer (never a 4xx/5xx), the
wire's proper terminal event on streams, repairs named only on the turns that needed them,
a valid turn reaching the provider byte for byte as the SDK sent it, one compaction per
overflow (``x-gateway-compaction``) and later turns served from it without compacting
again, and the session archive holding what compaction removed.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import anthropic
import httpx
import httpx2
import openai
import orjson
import pytest
from aiohttp import web

from gateway.compaction import SUMMARY_PREFIX
from gateway.referee import Referee
from gateway.sessions import prefix_chain
from tests.compaction.conftest import wait_background_idle
from tests.conftest import GatewayFactory, RunningGateway
from tests.fakes.anthropic_rules import sign_thinking
from tests.fakes.anthropic_server import FakeAnthropic
from tests.fakes.native_base import rough_tokens
from tests.fakes.native_overflow import NativeOverflow, is_summary
from tests.fakes.responses_server import FakeResponses, responses_error

CLAUDE = "claude-sonnet-4-5"
GPT = "gpt-5-codex"
KEY = "client-key"
EPHEMERAL = {"type": "ephemeral"}
SUMMARY_WORDS = "## Task\nThe agent read the modules of the repository one by one."
CLAUDE_TOOLS: list[Any] = [
    {"name": "Read", "description": "Read a file",
     "input_schema": {"type": "object", "properties": {"file_path": {"type": "string"}}}},
    {"name": "Bash", "description": "Run a command", "cache_control": EPHEMERAL,
     "input_schema": {"type": "object", "properties": {"command": {"type": "string"}}}},
]
CODEX_TOOLS: list[Any] = [
    {"type": "function", "name": "shell", "description": "Runs a shell command",
     "strict": False, "parameters": {"type": "object", "properties": {
         "command": {"type": "array", "items": {"type": "string"}}}, "required": ["command"]}},
]


def source(marker: str, lines: int = 30) -> str:
    """A tool result that looks like a file, every line naming ``marker``."""
    return "\n".join(f"def {marker}_{n}(value):  # {marker} line {n}" for n in range(lines))


def compaction(headers: Any) -> str | None:
    """How the turn was compacted (``summarized``, ``reused``, ...), or None."""
    value = headers.get("x-gateway-compaction")
    return None if value is None else str(value).split(";")[0]


async def read_archive(gw: RunningGateway, session: str, key: str = KEY) -> tuple[int, Any]:
    """The session archive as its owner reads it (lines 1..999)."""
    async with aiohttp.ClientSession() as http, http.get(
            f"{gw.root}/v1/gateway/sessions/{session}/archive?from=1&to=999",
            headers={"Authorization": f"Bearer {key}"}) as r:
        return r.status, await r.json()


def assert_compacted_when_full(hows: list[str | None], headers: list[Any],
                               window: int) -> int:
    """The first compaction answers the provider's refusal; any later one comes only once
    the compacted history fills the window again (the block ratio, before sending), and
    every other turn after the first is served from the stored compaction. The index of
    the first compacted turn."""
    first = hows.index("summarized")
    assert hows[:first] == [None] * first, hows
    assert headers[first]["x-gateway-recovery"] == "compact"
    for n in range(first + 1, len(hows)):
        assert hows[n] in ("reused", "summarized"), hows
        if hows[n] == "summarized":
            # (the history's tokens; the system prompt and the tools fill the window too)
            before = int(headers[n]["x-gateway-compaction"].split("tokens_before=")[1]
                         .split(";")[0])
            context = dict(part.strip().split("=") for part in
                           headers[n]["x-gateway-context"].split(";")[1:])
            fixed = int(context["system"]) + int(context["tools"])
            assert before + fixed >= 0.85 * window, (n, before, fixed, window)
            assert "x-gateway-recovery" not in headers[n]
            assert hows[n - 1] == "reused"
    return first


@dataclass
class Wire:
    """The bodies an SDK put on the wire, in order (an httpx request hook)."""

    sent: list[bytes] = field(default_factory=list)

    async def hook(self, request: httpx.Request | httpx2.Request) -> None:
        self.sent.append(request.content)

    def httpx(self) -> httpx.AsyncClient:
        return httpx.AsyncClient(event_hooks={"request": [self.hook]})

    def httpx2(self) -> httpx2.AsyncClient:
        return httpx2.AsyncClient(event_hooks={"request": [self.hook]})


# -- fakes with small windows ---------------------------------------------------------------


class SmallAnthropic(FakeAnthropic):
    """The strict fake Anthropic API with a small window whose summary requests (the
    gateway's instructions as the system prompt) get a real summary, or wait for
    :attr:`summary_gate`, or fail with :attr:`summary_failure`."""

    def __init__(self, window: int) -> None:
        super().__init__(api_key="upstream-anthropic-key", context_window=window)
        self.summaries: list[dict[str, Any]] = []
        self.summary_gate: asyncio.Event | None = None
        self.summary_failure: int | None = None

    async def _messages(self, request: web.Request) -> web.StreamResponse:
        body = orjson.loads(await request.read())
        if not is_summary(body):
            return await super()._messages(request)
        await self.record(request)
        self.summaries.append(body)
        if self.summary_gate is not None:
            await self.summary_gate.wait()
        if self.summary_failure is not None:
            return web.json_response({"type": "error", "error": {
                "type": "api_error", "message": "Internal server error"}},
                status=self.summary_failure)
        return web.json_response({
            "id": "msg_summary", "type": "message", "role": "assistant", "model": body["model"],
            "content": [{"type": "text", "text": SUMMARY_WORDS}], "stop_reason": "end_turn",
            "stop_sequence": None, "usage": {"input_tokens": 100, "output_tokens": 20}})


class SmallResponses(FakeResponses):
    """The strict fake Responses API with a small window (OpenAI's 400
    ``context_length_exceeded``, counted on the whole conversation a ``previous_response_id``
    continues) whose summary requests get a real summary."""

    def __init__(self, window: int) -> None:
        super().__init__(api_key="upstream-openai-key")
        self.window = window
        self.summaries: list[dict[str, Any]] = []
        self.summary_failure: int | None = None
        self.refused: list[dict[str, Any]] = []

    async def _responses(self, request: web.Request) -> web.StreamResponse:
        body = orjson.loads(await request.read())
        if is_summary(body):
            await self.record(request)
            self.summaries.append(body)
            if self.summary_failure is not None:
                return web.json_response({"error": {
                    "message": "The server had an error while processing your request.",
                    "type": "server_error", "param": None, "code": None}},
                    status=self.summary_failure)
            return web.json_response({
                "id": "resp_summary", "object": "response", "created_at": 1700000000,
                "status": "completed", "model": body.get("model"), "output": [{
                    "type": "message", "id": "msg_summary", "status": "completed",
                    "role": "assistant", "content": [
                        {"type": "output_text", "annotations": [], "text": SUMMARY_WORDS}]}],
                "usage": {"input_tokens": 100, "output_tokens": 20, "total_tokens": 120}})
        items = body.get("input") or []
        previous = body.get("previous_response_id")
        if isinstance(previous, str):
            items = self.stored.get(previous, []) + list(items)
        tokens = rough_tokens([body.get("instructions"), items, body.get("tools")])
        if tokens > self.window:
            await self.record(request)
            self.refused.append(body)
            return responses_error(
                400, f"Your input exceeds the context window of this model. This model's "
                     f"maximum context length is {self.window} tokens. However, your "
                     f"messages resulted in {tokens} tokens.",
                code="context_length_exceeded").response()
        return await super()._responses(request)


# -- Claude Code on /v1/messages ------------------------------------------------------------


class ClaudeCode:
    """Claude Code: thinking on (signed blocks resent), system prompt and tools marked for
    caching, the breakpoint on the last block moved forward every turn, the whole history
    on every request, streamed or not."""

    def __init__(self, gw: RunningGateway, fake: FakeAnthropic, session: str | None,
                 *, system: str = "You are Claude Code, a CLI for Claude. " * 20) -> None:
        self.fake = fake
        self.session = session
        self.system = system
        self.wire = Wire()
        self.history: list[dict[str, Any]] = []
        self.headers: list[Any] = []
        self.client = anthropic.AsyncAnthropic(base_url=gw.root, api_key=KEY, max_retries=0,
                                               http_client=self.wire.httpx2())

    def ask(self, *blocks: dict[str, Any] | str) -> None:
        self.history.append({"role": "user", "content": [
            {"type": "text", "text": b} if isinstance(b, str) else b for b in blocks]})

    def body(self) -> dict[str, Any]:
        messages = [dict(m) for m in self.history]
        last = messages[-1]["content"]
        messages[-1]["content"] = [*last[:-1], {**last[-1], "cache_control": EPHEMERAL}]
        return {"model": CLAUDE, "max_tokens": 1024,
                "thinking": {"type": "enabled", "budget_tokens": 512},
                "system": [{"type": "text", "text": self.system, "cache_control": EPHEMERAL}],
                "tools": CLAUDE_TOOLS, "messages": messages}

    async def turn(self, *, stream: bool, thought: str | None = "thinking it over",
                   ) -> tuple[Any, list[dict[str, Any]], int]:
        """One request; (headers, the answer's blocks, upstream requests it took)."""
        before = len(getattr(self.fake, "requests", ()))
        extra = {"x-session-id": self.session} if self.session else {}
        if stream:
            raw = await self.client.messages.with_raw_response.create(
                **self.body(), stream=True, extra_headers=extra)
            events = [e async for e in await raw.parse()]
            assert events[-1].type == "message_stop", events[-1]
            blocks: list[dict[str, Any]] = []
            for e in events:
                if e.type == "content_block_start":
                    blocks.append(e.content_block.model_dump(exclude_none=True))
                    blocks[-1].setdefault("text" if blocks[-1]["type"] == "text" else
                                          "partial", "")
                elif e.type == "content_block_delta" and e.delta.type == "text_delta":
                    blocks[-1]["text"] += e.delta.text
                elif e.type == "content_block_delta" and e.delta.type == "input_json_delta":
                    blocks[-1]["partial"] += e.delta.partial_json
            for block in blocks:
                if "partial" in block:
                    block["input"] = orjson.loads(block.pop("partial") or "{}")
        else:
            raw = await self.client.messages.with_raw_response.create(
                **self.body(), extra_headers=extra)
            blocks = [b.model_dump(exclude_none=True) for b in (await raw.parse()).content]
        assert blocks and (blocks[0]["type"] == "tool_use" or blocks[0]["text"]), blocks
        if thought is not None:
            blocks = [{"type": "thinking", "thinking": thought,
                       "signature": sign_thinking(thought)}, *blocks]
        self.history.append({"role": "assistant", "content": blocks})
        self.headers.append(raw.headers)
        return raw.headers, blocks, len(getattr(self.fake, "requests", ())) - before

    def forwarded(self) -> list[Any]:
        """The client requests the upstream received (summary requests left out)."""
        return [r for r in self.fake.requests
                if r.path == "/v1/messages" and not is_summary(r.body)]


def claude_gateway(fake: FakeAnthropic, **extra: Any) -> dict[str, Any]:
    return {
        "model_list": [{"model_name": CLAUDE, "litellm_params": {
            "model": f"anthropic/{CLAUDE}", "api_base": fake.base_url,
            "api_key": "upstream-anthropic-key"}, "model_info": {"max_input_tokens": 200_000}}],
        "gateway": {"api_keys": [KEY]},
        "compaction": {"reserved_context_size": 0, "recall": False},
        "recovery": {"backoff_base": 0.01, "backoff_cap": 0.05},
        **extra,
    }


async def test_claude_code_24_turns_compacts_on_overflow_and_reuses_it_until_full_again(
        gateway_factory: GatewayFactory) -> None:
    """A Claude Code session of 24 steps (tool loops with signed thinking, the breakpoint
    moved forward every turn, streamed and whole turns alternating) outgrows a 4,000-token
    window. Before the overflow every turn goes byte for byte; the overflowing turn is
    compacted (``summarized``, after the provider's refusal) and answered; the turns after
    it resend the whole original history and are served from the stored compaction
    (``reused``: the moved breakpoint does not make it another history), until the
    compacted history fills the window again; the archive holds the file contents
    compaction removed."""
    async with SmallAnthropic(window=4_000) as fake:
        gw = await gateway_factory(claude_gateway(fake))
        claude = ClaudeCode(gw, fake, "cc-long-1")
        hows: list[str | None] = []
        async with claude.client:
            for n in range(24):
                reading = n < 8 or n % 6 == 0
                claude.ask(f"TOOL read module_{n}.py" if reading
                           else f"question {n}: what calls mod{n - 1}_0?")
                for _ in range(3):  # the agent loop: run the tools the model calls
                    headers, blocks, _ = await claude.turn(stream=len(hows) % 2 == 0,
                                                           thought=f"step {n}")
                    hows.append(compaction(headers))
                    assert "x-gateway-compaction-failed" not in headers
                    if blocks[-1]["type"] != "tool_use":
                        break
                    claude.ask({"type": "tool_result", "tool_use_id": blocks[-1]["id"],
                                "content": source(f"mod{n}", 30 if n < 8 else 3)})
        first = assert_compacted_when_full(hows, claude.headers, 4_000)
        again = [n for n, how in enumerate(hows) if how == "summarized"][1:]
        assert len(again) == 1 and again[0] > first + 3, hows
        assert len(fake.summaries) == 2
        # Byte for byte until the overflow; one refusal, then accepted compacted requests.
        forwarded = claude.forwarded()
        for n in range(first):
            assert forwarded[n].raw == claude.wire.sent[n]
            assert "x-gateway-repairs" not in claude.headers[n]
        assert forwarded[first].raw == claude.wire.sent[first]  # sent as it came, refused
        assert len(forwarded) == len(claude.wire.sent) + 1
        compacted = forwarded[first + 1].body
        texts = orjson.dumps(compacted["messages"]).decode()
        assert SUMMARY_PREFIX[:30] in texts and "mod0_0(value)" not in texts
        assert compacted["system"] == orjson.loads(claude.wire.sent[first])["system"]
        # Later turns: the stored compaction, then what the client added since.
        for later in forwarded[first + 2:again[0] + 1]:
            assert later.body["messages"][:len(compacted["messages"])] == compacted["messages"]
            assert "x-gateway-repairs" not in claude.headers[forwarded.index(later) - 1]
            assert "mod0_0(value)" not in orjson.dumps(later.body["messages"]).decode()
        status, archive = await read_archive(gw, "cc-long-1")
        assert status == 200
        removed = orjson.dumps(archive["messages"]).decode()
        for n in range(min(first, 7)):
            assert f"mod{n}_29(value)" in removed, n


# -- Codex / Agents SDK on /v1/responses ----------------------------------------------------


class Codex:
    """A Responses agent: Codex CLI (``store: false``, encrypted reasoning included, the
    whole input every turn) or, with ``chained``, an Agents SDK run that continues with
    ``previous_response_id`` and only the new items on some turns."""

    def __init__(self, gw: RunningGateway, fake: SmallResponses, session: str | None,
                 *, store: bool = False) -> None:
        self.fake = fake
        self.session = session
        self.store = store
        self.wire = Wire()
        self.history: list[dict[str, Any]] = []
        self.headers: list[Any] = []
        self.last_id: str | None = None
        self.client = openai.AsyncOpenAI(base_url=gw.base_url, api_key=KEY, max_retries=0,
                                         http_client=self.wire.httpx())

    def ask(self, text: str) -> None:
        self.history.append({"type": "message", "role": "user",
                             "content": [{"type": "input_text", "text": text}]})

    def body(self, new: int | None) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": GPT, "instructions": "You are Codex, a coding agent. " * 20,
            "tools": CODEX_TOOLS, "parallel_tool_calls": False,
            "reasoning": {"effort": "medium", "summary": "auto"}, "store": self.store,
            "input": self.history if new is None else self.history[-new:]}
        if not self.store:
            body["include"] = ["reasoning.encrypted_content"]
        if new is not None:
            body["previous_response_id"] = self.last_id
        if self.session:
            body["prompt_cache_key"] = self.session
        return body

    async def turn(self, *, stream: bool, new: int | None = None,
                   ) -> tuple[Any, list[dict[str, Any]]]:
        """One request (``new``: only the last ``new`` items, after ``previous_response_id``);
        the output items are added to the history and returned."""
        if stream:
            raw = await self.client.responses.with_raw_response.create(
                **self.body(new), stream=True)
            events = [e async for e in raw.parse()]
            assert events[-1].type == "response.completed", events[-1]
            response = events[-1].response
        else:
            raw = await self.client.responses.with_raw_response.create(**self.body(new))
            response = raw.parse()
        output = [i.model_dump(exclude_none=True) for i in response.output]
        assert any(i["type"] in ("message", "function_call") for i in output), output
        self.last_id = response.id
        for item in output:
            if item["type"] == "message":
                item.pop("status", None)
                item["content"] = [{"type": "output_text", "text": p["text"], "annotations": []}
                                   for p in item["content"]]
        self.history += output
        self.headers.append(raw.headers)
        return raw.headers, output

    def forwarded(self) -> list[Any]:
        return [r for r in self.fake.requests
                if r.path == "/v1/responses" and not is_summary(r.body)]


def codex_gateway(fake: SmallResponses, **extra: Any) -> dict[str, Any]:
    return {
        "model_list": [{"model_name": GPT, "litellm_params": {
            "model": f"openai/{GPT}", "api_base": f"{fake.base_url}/v1",
            "api_key": "upstream-openai-key"}, "model_info": {"max_input_tokens": 200_000}}],
        "gateway": {"api_keys": [KEY]},
        "compaction": {"reserved_context_size": 0, "recall": False},
        "recovery": {"backoff_base": 0.01, "backoff_cap": 0.05},
        **extra,
    }


def shell_output(call_id: str, text: str) -> dict[str, Any]:
    return {"type": "function_call_output", "call_id": call_id,
            "output": orjson.dumps({"output": text, "metadata": {"exit_code": 0}}).decode()}


async def codex_step(codex: Codex, ask: str, result: str, hows: list[str | None],
                     stream: bool) -> None:
    """One user ask and the agent loop after it (the shell calls the model makes run)."""
    codex.ask(ask)
    for _ in range(3):
        headers, output = await codex.turn(stream=stream)
        hows.append(compaction(headers))
        calls = [i for i in output if i["type"] == "function_call"]
        if not calls:
            return
        codex.history.append(shell_output(calls[0]["call_id"], result))


async def test_codex_stateless_session_compacts_with_encrypted_reasoning_in_its_history(
        gateway_factory: GatewayFactory) -> None:
    """Codex CLI (``store: false``, every output's encrypted reasoning resent, shell calls
    and their outputs) over 16 steps, streamed and whole, against a 3,000-token Responses
    window. Valid turns go byte for byte; the overflow is compacted after the provider's
    ``context_length_exceeded`` and answered with ``response.completed``; the turns after
    it resend the original input and are served from the compaction (compacted again only
    once that fills the window, before sending: one refusal in all); the archive holds the
    shell outputs it removed."""
    async with SmallResponses(window=3_000) as fake:
        gw = await gateway_factory(codex_gateway(fake))
        codex = Codex(gw, fake, "codex-long-1")
        hows: list[str | None] = []
        async with codex.client:
            for n in range(16):
                big = n < 6
                await codex_step(codex, f"TOOL cat src/file_{n}.py" if big or n % 5 == 0
                                 else f"question {n}: why?",
                                 source(f"file{n}", 25 if big else 2), hows,
                                 stream=len(hows) % 2 == 1)
        assert all(i.get("encrypted_content") for i in codex.history
                   if i["type"] == "reasoning")
        first = assert_compacted_when_full(hows, codex.headers, 3_000)
        assert len(fake.summaries) == hows.count("summarized") and len(fake.refused) == 1
        forwarded = codex.forwarded()
        for n in range(first + 1):  # as sent, the overflowing one too (then refused)
            assert forwarded[n].raw == codex.wire.sent[n]
            assert "x-gateway-repairs" not in codex.headers[n]
        compacted = forwarded[first + 1].body["input"]
        assert "file0_0(value)" not in orjson.dumps(compacted).decode()
        again = hows.index("summarized", first + 1) if hows.count("summarized") > 1 else None
        for later in forwarded[first + 2:again and again + 1]:
            assert later.body["input"][:len(compacted) - 1] == compacted[:-1]
            assert later.body["store"] is False
        status, archive = await read_archive(gw, "codex-long-1")
        assert status == 200
        removed = orjson.dumps(archive["messages"]).decode()
        assert all(f"file{n}_24(value)" in removed for n in range(3))


async def test_agents_sdk_chain_overflowing_on_previous_response_id_goes_on_chained(
        gateway_factory: GatewayFactory) -> None:
    """An Agents SDK run (``store: true``) continues with ``previous_response_id`` on most
    turns and sends its whole input on others. The chain outgrows the 3,000-token window on
    a ``previous_response_id`` turn: the gateway sends the conversation it relayed whole,
    compacted, and answers; the next turns chain from that answer's id (and a whole-input
    turn is served from the compaction), none refused again."""
    async with SmallResponses(window=3_000) as fake:
        gw = await gateway_factory(codex_gateway(fake))
        agent = Codex(gw, fake, "agents-chain-1", store=True)
        hows: list[str | None] = []
        async with agent.client:
            for n in range(18):
                agent.ask(f"TOOL list dir_{n}" if n < 8 else f"question {n}")
                chained = n % 4 != 3 and agent.last_id is not None
                headers, output = await agent.turn(stream=n % 2 == 0,
                                                   new=1 if chained else None)
                hows.append(compaction(headers))
                calls = [i for i in output if i["type"] == "function_call"]
                if calls:
                    agent.history.append(shell_output(calls[0]["call_id"],
                                                      source(f"dir{n}", 25)))
                    headers, output = await agent.turn(stream=n % 2 == 1, new=1)
                    hows.append(compaction(headers))
        first = hows.index("summarized")
        assert hows[:first] == [None] * first
        assert "previous_response_expanded" in agent.headers[first]["x-gateway-repairs"]
        # One refusal (the first overflow); after it the chain goes on from the compacted
        # answer: chained turns are never refused again (no strict resend), whole-input
        # turns are compacted before sending or served from the compaction.
        assert len(fake.refused) == 1
        assert not [h["x-gateway-recovery"] for h in agent.headers[first + 1:]
                    if "x-gateway-recovery" in h]
        assert "reused" in hows[first + 1:], hows
        chained = [r for r in agent.forwarded()[first + 2:]
                   if r.body.get("previous_response_id") is not None]
        assert len(chained) >= 10
        assert all(r.body["previous_response_id"] in fake.stored for r in chained)


# -- a chat-completions agent -----------------------------------------------------------------


class ChatAgent:
    """A chat-completions agent: the whole history every turn, the gateway's answers in
    it, streamed or not."""

    def __init__(self, gw: RunningGateway, ref: Referee, session: str | None,
                 model: str = "referee") -> None:
        self.ref = ref
        self.session = session
        self.model = model
        self.wire = Wire()
        self.history: list[dict[str, Any]] = [
            {"role": "system", "content": "You are a careful coding agent. " * 10}]
        self.headers: list[Any] = []
        self.client = openai.AsyncOpenAI(base_url=gw.base_url, api_key=KEY, max_retries=0,
                                         http_client=self.wire.httpx())

    async def turn(self, text: str | None, *, stream: bool) -> Any:
        if text is not None:
            self.history.append({"role": "user", "content": text})
        extra = {"prompt_cache_key": self.session} if self.session else {}
        if stream:
            raw = await self.client.chat.completions.with_raw_response.create(
                model=self.model, messages=self.history, stream=True,  # type: ignore[arg-type]
                extra_body=extra)
            chunks = [c async for c in raw.parse()]
            finishes = [c.choices[0].finish_reason for c in chunks if c.choices]
            assert finishes[-1] == "stop", finishes
            said = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        else:
            raw = await self.client.chat.completions.with_raw_response.create(
                model=self.model, messages=self.history,  # type: ignore[arg-type]
                extra_body=extra)
            said = raw.parse().choices[0].message.content or ""
        assert said.startswith("referee: accepted"), said
        self.history.append({"role": "assistant", "content": said})
        self.headers.append(raw.headers)
        return raw.headers

    def calls(self, *results: tuple[str, str | None]) -> None:
        """The model called tools in parallel; the results that came, in the order given
        (``None``: a call the user cancelled, whose result never comes)."""
        self.history.append({"role": "assistant", "content": None, "tool_calls": [
            {"id": cid, "type": "function",
             "function": {"name": "read_file", "arguments": orjson.dumps({"p": cid}).decode()}}
            for cid, _ in sorted(results)]})
        self.history += [{"role": "tool", "tool_call_id": cid, "content": out}
                         for cid, out in results if out is not None]


def referee_gateway(ref: Referee, **extra: Any) -> dict[str, Any]:
    return {
        "model_list": [{"model_name": "referee", "litellm_params": {
            "model": "openai/referee", "api_base": ref.base_url, "api_key": "k"},
            "model_info": {"max_input_tokens": 100_000}}],
        "gateway": {"api_keys": [KEY, "other-key"]},
        "compaction": {"reserved_context_size": 0, "recall": False},
        "recovery": {"backoff_base": 0.01, "backoff_cap": 0.05},
        **extra,
    }


async def test_chat_agent_parallel_calls_a_cancelled_call_and_a_trimmer_are_mended_per_turn(
        gateway_factory: GatewayFactory) -> None:
    """A chat agent over 16 turns: parallel calls answered out of order (valid: as sent),
    then a parallel call the user cancels (its result never comes: one result synthesized
    on that turn and every later turn that still carries it), then the client's own
    trimmer cutting its oldest messages between a call and its results (the orphans
    dropped), and finally a trim past both, after which the turns go byte for byte again.
    Repairs are named exactly on the turns whose history needs them."""
    async with Referee(rules="openai", style="openai") as ref:
        gw = await gateway_factory(referee_gateway(ref))
        agent = ChatAgent(gw, ref, "chat-parallel-1")
        expected: list[set[str]] = []
        async with agent.client:
            for n in range(16):
                if n == 4:
                    agent.calls(("c4b", "b.py: 2 lines"), ("c4a", "a.py: 1 line"))
                if n == 6:
                    agent.calls(("c6a", "grep: 3 hits"), ("c6b", None))
                if n == 9:  # the trimmer: keep the system prompt, cut inside turn 4's calls
                    cut = next(i for i, m in enumerate(agent.history)
                               if m.get("tool_call_id") == "c4a")
                    agent.history = [agent.history[0], *agent.history[cut:]]
                if n == 12:  # trimmed past the cancelled call
                    cut = next(i for i, m in enumerate(agent.history)
                               if m.get("tool_call_id") == "c6a") + 1
                    agent.history = [agent.history[0], *agent.history[cut:]]
                await agent.turn(f"step {n}: go on" if n != 6 else "stop, never mind",
                                 stream=n % 2 == 1)
                expected.append(({"tool_result_synthesized"} if 6 <= n < 12 else set())
                                | ({"orphan_tool_result_dropped"} if 9 <= n < 12 else set()))
        sent = [orjson.loads(b) for b in agent.wire.sent]
        for n, headers in enumerate(agent.headers):
            named = set(filter(None, headers.get("x-gateway-repairs", "").split(",")))
            assert {k.split("=")[0].strip() for k in named} == expected[n], (n, named)
            if not expected[n]:
                assert ref.requests[n].body == agent.wire.sent[n], n
            assert ref.requests[n].status == 200
            assert sent[n]["messages"] != []
        # The mended turns changed only the broken parts: the cancelled call got one result.
        mended = ref.requests[7].json()["messages"]
        answers = [m for m in mended if m.get("tool_call_id") == "c6b"]
        assert len(answers) == 1 and mended[mended.index(answers[0]) - 1].get(
            "tool_call_id") == "c6a"


# -- summarizer and session store failures ----------------------------------------------------


async def claude_steps(claude: ClaudeCode, steps: range, hows: list[str | None],
                       lines: int = 30) -> None:
    """Claude Code reading one file per step (a tool loop with signed thinking)."""
    for n in steps:
        claude.ask(f"TOOL read module_{n}.py")
        for _ in range(3):
            headers, blocks, _ = await claude.turn(stream=len(hows) % 2 == 0, thought=f"s{n}")
            hows.append(compaction(headers))
            if blocks[-1]["type"] != "tool_use":
                break
            claude.ask({"type": "tool_result", "tool_use_id": blocks[-1]["id"],
                        "content": source(f"mod{n}", lines)})


async def test_claude_code_with_a_summarizer_slower_than_the_deadline_is_answered_trimmed(
        gateway_factory: GatewayFactory) -> None:
    """The summarizer of a Claude Code session never answers within the request's share of
    the deadline: the overflowing turn (streamed, a tool result answering signed thinking)
    is answered trimmed, ends with ``message_stop``, and names the summary's failure; the
    following turns are answered from the trimmed history, not the provider's 400. When
    the summary finally comes, the next turn uses it (``background-applied``)."""
    async with SmallAnthropic(window=4_000) as fake:
        fake.summary_gate = asyncio.Event()
        gw = await gateway_factory(claude_gateway(fake, recovery={
            "deadline": 3.0, "backoff_base": 0.01, "backoff_cap": 0.05}))
        claude = ClaudeCode(gw, fake, "cc-slow-1")
        hows: list[str | None] = []
        async with claude.client:
            await claude_steps(claude, range(8), hows)
            trimmed = hows.index("trimmed")
            assert hows[:trimmed] == [None] * trimmed
            assert "x-gateway-compaction-summary-failed" in claude.headers[trimmed]
            assert all(h in ("trimmed", "reused") for h in hows[trimmed:]), hows
            fake.summary_gate.set()
            await wait_background_idle(gw)
            for n in range(3):
                claude.ask(f"and question {n}?")
                headers, _, _ = await claude.turn(stream=n % 2 == 0)
                hows.append(compaction(headers))
        # The summary of the latest trimmed history serves the next turn (the earlier
        # turns' summaries, superseded, are not waited for), and the turns after reuse it.
        applied = hows.index("background-applied", trimmed)
        assert applied == len(hows) - 3, hows
        assert hows[applied + 1:] == ["reused", "reused"], hows
        assert SUMMARY_WORDS[8:] in orjson.dumps(claude.forwarded()[-1].body["messages"]).decode()
        # Every turn went through once, refused at most on the first overflow.
        refused = [r for r in claude.forwarded() if r.raw in claude.wire.sent[trimmed:]]
        assert len(refused) <= 1
        assert len(claude.forwarded()) == len(claude.wire.sent) + 1
        assert all(h in ("trimmed", "reused", "background-applied")
                   for h in hows[trimmed:]), hows


async def test_codex_with_a_failing_summarizer_is_answered_and_does_not_retry_every_turn(
        gateway_factory: GatewayFactory) -> None:
    """Every summary call of a Codex session fails (the provider's 500): each overflow is
    answered trimmed (``response.completed``, ``x-gateway-compaction-summary-failed``),
    the later turns reuse the trimmed history, and the summarizer is not asked on every
    turn (at most three calls before it is skipped)."""
    async with SmallResponses(window=3_000) as fake:
        fake.summary_failure = 500
        gw = await gateway_factory(codex_gateway(fake))
        codex = Codex(gw, fake, "codex-failing-1")
        hows: list[str | None] = []
        async with codex.client:
            for n in range(14):
                await codex_step(codex, f"TOOL cat f{n}.py", source(f"f{n}", 25), hows,
                                 stream=len(hows) % 2 == 0)
        first = hows.index("trimmed")
        assert hows[:first] == [None] * first
        assert "x-gateway-compaction-summary-failed" in codex.headers[first]
        assert set(hows[first:]) <= {"trimmed", "reused"}, hows
        assert 1 <= len(fake.summaries) <= 3
        assert len(fake.summaries) < hows.count("trimmed") + hows.count("reused")
        status, archive = await read_archive(gw, "codex-failing-1")
        assert status == 200 and "f0_24(value)" in orjson.dumps(archive["messages"]).decode()


@contextlib.contextmanager
def unwritable(paths: list[Path]) -> Iterator[None]:
    """The files made immutable (writes fail with EPERM, reads go on), then writable again
    (root and a file system with the immutable attribute: ext4, xfs, btrfs)."""
    if subprocess.run(["chattr", "+i", *map(str, paths)], capture_output=True).returncode:
        subprocess.run(["chattr", "-i", *map(str, paths)], capture_output=True)
        pytest.skip("chattr +i needs root and a file system that has the attribute")
    try:
        yield
    finally:
        subprocess.run(["chattr", "-i", *map(str, paths)], check=True)


async def test_a_session_store_made_unwritable_mid_session_never_costs_an_answer(
        gateway_factory: GatewayFactory, tmp_path: Path) -> None:
    """A chat agent's SQLite session store becomes unwritable in the middle of its session
    (a full or read-only disk): the turns that overflow are compacted in memory and
    answered (``; unstored``), never the provider's 400; once the file is writable again,
    the compaction is stored with its archive lines and the session goes on from it."""
    async with Referee(rules="openai", style="openai", context_window=1_500) as ref:
        gw = await gateway_factory(referee_gateway(ref))
        agent = ChatAgent(gw, ref, "chat-store-1")
        async with agent.client:
            n = 0
            while not agent.headers or "x-gateway-compaction" not in agent.headers[-1]:
                await agent.turn(f"step {n}: read this\n{source(f'part{n}', 10)}",
                                 stream=n % 2 == 0)
                n += 1
            assert agent.headers[-1]["x-gateway-compaction"].startswith("summarized; ")
            stored_at = len(agent.headers)
            data = tmp_path / "data"
            # The store and its directories; never the -shm file (SQLite maps it: a write
            # to it would not fail, it would kill the process).
            files = [data, data / "sessions.sqlite3", data / "sessions.sqlite3-wal",
                     *[p for p in data.glob("archive*") if p.is_dir()]]
            assert all(p.exists() for p in files), list(data.iterdir())
            with unwritable(files):
                for k in range(n, n + 10):
                    headers = await agent.turn(f"step {k}: read this\n{source(f'part{k}', 10)}",
                                               stream=k % 2 == 0)
                    assert "x-gateway-compaction-failed" not in headers
            hows = [h.get("x-gateway-compaction") for h in agent.headers[stored_at:]]
            assert any(h is not None and h.startswith("summarized; ") and h.endswith(
                "; unstored") for h in hows), hows
            # The store is tried again at most once a second: the archive answers 503
            # (session_store_unavailable) until then.
            status, _ = await read_archive(gw, "chat-store-1")
            for _ in range(500):
                if status == 200:
                    break
                assert status == 503
                await asyncio.sleep(0.01)
                status, _ = await read_archive(gw, "chat-store-1")
            for k in range(n + 10, n + 13):
                await agent.turn(f"step {k}: and now?", stream=k % 2 == 0)
        assert [r.status for r in ref.requests if r.status != 200] == [400]
        back = [h.get("x-gateway-compaction") for h in agent.headers[-2:]]
        assert all(h is not None and not h.endswith("unstored") for h in back), back
        status, archive = await read_archive(gw, "chat-store-1")
        assert status == 200 and "part0_9(value)" in orjson.dumps(archive["messages"]).decode()


async def test_a_sub_agent_sharing_the_session_id_never_gets_the_main_agents_compaction(
        gateway_factory: GatewayFactory) -> None:
    """Claude Code's sub-agents (Task) send their own system prompt and history under the
    main session's id. The main agent outgrows the window and is compacted; the sub-agent's
    turns, interleaved with the main agent's, go byte for byte, never carry the main
    agent's summary and are never compacted; the main agent's later turns reuse its
    compaction."""
    async with SmallAnthropic(window=4_000) as fake:
        gw = await gateway_factory(claude_gateway(fake))
        main = ClaudeCode(gw, fake, "cc-shared-1")
        sub = ClaudeCode(gw, fake, "cc-shared-1",
                         system="You are a sub-agent that searches the code base. " * 10)
        sub.wire = main.wire  # one record of what went on the wire, in order
        sub.client = anthropic.AsyncAnthropic(base_url=gw.root, api_key=KEY, max_retries=0,
                                              http_client=main.wire.httpx2())
        main_hows: list[str | None] = []
        sub_at: list[int] = []  # the sub-agent's requests, by position on the wire
        async with main.client, sub.client:
            for n in range(10):
                await claude_steps(main, range(n, n + 1), main_hows)
                sub.ask(f"search step {n}: where is mod{n}_1 used?")
                headers, _, _ = await sub.turn(stream=n % 2 == 1, thought=None)
                sub_at.append(len(main.wire.sent) - 1)
                assert "x-gateway-compaction" not in headers
                assert "x-gateway-repairs" not in headers
        first = assert_compacted_when_full(main_hows, main.headers, 4_000)
        assert first > 0
        forwarded = main.forwarded()
        sub_bodies = [r for r in forwarded if r.body["system"][0]["text"] == sub.system]
        assert [r.raw for r in sub_bodies] == [main.wire.sent[i] for i in sub_at]
        assert all(SUMMARY_PREFIX[:30] not in orjson.dumps(r.body).decode()
                   for r in sub_bodies)


async def test_a_session_without_an_id_is_followed_and_its_archive_link_works(
        gateway_factory: GatewayFactory) -> None:
    """A Claude Code session that sends no session id (recognised by its system prompt and
    first message) is compacted once when it overflows, every streamed turn ends with
    ``message_stop``, later turns reuse the compaction, and the archive link the summary's
    Context Recovery note gives the model is readable with the client's key (and not with
    another key), holding the tool results compaction removed."""
    async with SmallAnthropic(window=4_000) as fake:
        gw = await gateway_factory(claude_gateway(fake, gateway={"api_keys": [KEY, "other"]}))
        claude = ClaudeCode(gw, fake, None)
        hows: list[str | None] = []
        async with claude.client:
            await claude_steps(claude, range(12), hows, lines=20)
        first = assert_compacted_when_full(hows, claude.headers, 4_000)
        compacted = orjson.dumps(claude.forwarded()[first + 1].body["messages"]).decode()
        found = re.search(r"GET (/v1/gateway/sessions/(fp-[0-9a-f]{16,})/archive\?from=1&to=\d+)",
                          compacted)
        assert found is not None, compacted[:2000]
        status, archive = await read_archive(gw, found.group(2))
        assert status == 200
        removed = orjson.dumps(archive["messages"]).decode()
        assert "mod0_19(value)" in removed and "mod1_19(value)" in removed
        status, _ = await read_archive(gw, found.group(2), key="other")
        assert status in (403, 404)


async def test_an_overflow_refused_inside_the_stream_is_compacted_into_one_clean_stream(
        gateway_factory: GatewayFactory) -> None:
    """A Claude Code session streamed on every turn, against an upstream that opens its
    stream (``message_start``) and only then refuses the prompt as too long (an ``error``
    event). The client never sees that: the overflowing turn is compacted and its stream,
    from the answering attempt alone, ends with ``message_stop``; the next turns resend
    the whole history and are served from the compaction, each answered by the upstream's
    first attempt."""
    async with NativeOverflow(window=1_500) as fake:
        gw = await gateway_factory({
            "model_list": [{"model_name": CLAUDE, "litellm_params": {
                "model": f"anthropic/{CLAUDE}", "api_base": fake.base_url.removesuffix("/v1"),
                "api_key": "k"}, "model_info": {"max_input_tokens": 200_000}}],
            "gateway": {"api_keys": [KEY]},
            "compaction": {"reserved_context_size": 0, "recall": False},
            "recovery": {"backoff_base": 0.01, "backoff_cap": 0.05}})
        claude = ClaudeCode(gw, fake, "cc-instream-1")  # type: ignore[arg-type]
        hows: list[str | None] = []
        async with claude.client:
            for n in range(14):
                claude.ask(f"step {n}: review this file\n{source(f'rev{n}', 20 if n < 8 else 2)}")
                headers, blocks, _ = await claude.turn(stream=True, thought=None)
                assert blocks[-1]["text"] == "hello there"
                hows.append(compaction(headers))
        # The window in use: the refusal's 1,500, in the gateway's own token count.
        async with aiohttp.ClientSession() as http, http.get(
                f"{gw.base_url}/models/{CLAUDE}",
                headers={"Authorization": f"Bearer {KEY}"}) as r:
            window = (await r.json())["context_window"]
        assert window <= 1_500
        first = assert_compacted_when_full(hows, claude.headers, window)
        verdicts = [v for path, body, v in fake.received if not is_summary(body)]
        assert verdicts.count("stream-error") == 1, verdicts
        assert verdicts[first] == "stream-error" and verdicts[first + 1:] == [200] * (
            len(verdicts) - first - 1)
        assert len(fake.summaries) == hows.count("summarized")
        status, archive = await read_archive(gw, "cc-instream-1")
        assert status == 200 and "rev0_19(value)" in orjson.dumps(archive["messages"]).decode()


def test_a_moved_cache_breakpoint_keeps_the_prefix_hashes() -> None:
    """What the stored compactions are found by: a breakpoint on a message (or one of its
    parts) is no part of the prefix; every other value is."""
    marked = [{"role": "user", "content": [{"type": "text", "text": "a",
                                            "cache_control": EPHEMERAL}]},
              {"role": "assistant", "content": "b", "cache_control": EPHEMERAL}]
    plain = [{"role": "user", "content": [{"type": "text", "text": "a"}]},
             {"role": "assistant", "content": "b"}]
    assert prefix_chain(marked) == prefix_chain(plain)
    assert prefix_chain(plain) != prefix_chain([plain[0], {"role": "assistant", "content": "c"}])
    assert marked[0]["content"][0]["cache_control"] == EPHEMERAL  # (not changed in place)
