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
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import anthropic
import httpx
import httpx2
import orjson
from aiohttp import web

from gateway.compaction import SUMMARY_PREFIX
from tests.conftest import GatewayFactory, RunningGateway
from tests.fakes.anthropic_rules import sign_thinking
from tests.fakes.anthropic_server import FakeAnthropic
from tests.fakes.native_base import rough_tokens
from tests.fakes.native_overflow import is_summary
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
        before = len(self.fake.requests)
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
        return raw.headers, blocks, len(self.fake.requests) - before

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


async def test_claude_code_24_turns_compacts_once_and_every_later_turn_reuses_it(
        gateway_factory: GatewayFactory) -> None:
    """A Claude Code session of 24 turns (tool loops with signed thinking, the breakpoint
    moved forward every turn, streamed and whole turns alternating) outgrows a 4,000-token
    window once. Before the overflow every turn goes byte for byte; the overflowing turn
    is compacted once (``summarized``, after the provider's refusal) and answered; every
    later turn resends the whole original history and is served from the stored
    compaction (``reused``), with no second summary and no refusal; the archive holds the
    file contents compaction removed."""
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
        summarized = [n for n, how in enumerate(hows) if how == "summarized"]
        first = summarized[0]
        assert hows[:first] == [None] * first
        assert set(hows[first + 1:]) == {"reused", "summarized"}, hows
        # Compacted again only once the compacted history filled the window again (the
        # block ratio), never on the turns right after a compaction: the breakpoint the
        # agent moved forward does not make its history another one.
        again = summarized[1:]
        assert len(again) == 1 and again[0] > first + 3, hows
        assert hows[again[0] + 1:] == ["reused"] * (len(hows) - again[0] - 1), hows
        before = claude.headers[again[0]]["x-gateway-compaction"].split("tokens_before=")[1]
        assert int(before.split(";")[0]) >= 0.85 * 4_000
        assert len(fake.summaries) == 2
        assert claude.headers[first]["x-gateway-recovery"] == "compact"
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
