"""Whole agent sessions on the two agent wires, as the two biggest coding agents drive them:
Codex CLI on OpenAI Responses and Claude Code on Anthropic Messages, through the official
SDKs, against the native fakes (tests/fakes) that refuse what the providers refuse.

Every turn resends the whole history, as the agents do, and some turn carries the breakage
a real session meets (an interrupted call, a stream cancelled halfway through, a history
trimmed between a call and its output, an edited earlier message, a signature or an
encryption the provider will not take any more, too many cache breakpoints). On every turn:

- the agent gets its answer (whole or streamed);
- a valid turn reaches the provider byte for byte as the SDK sent it, with no repairs;
- a repaired turn names its repairs in ``x-gateway-repairs`` and changes only what it must;
- what the provider received on turn N-1 is still the start of what it receives on turn N
  (the cached prefix stays put: the gateway never blames itself in the prefix telemetry),
  unless the client itself changed its history.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import anthropic
import httpx
import httpx2
import openai
import orjson
import pytest

from tests.conftest import GatewayFactory, RunningGateway
from tests.fakes.anthropic_rules import sign_thinking
from tests.fakes.anthropic_server import FakeAnthropic
from tests.fakes.native_base import RecordedRequest
from tests.fakes.responses_server import FakeResponses
from tests.telemetry.promtext import scrape

GPT = "gpt-5-codex"
CLAUDE = "claude-sonnet-4-5"
INSTRUCTIONS = "You are Codex, a coding agent in the user's terminal. " * 30
CLAUDE_SYSTEM = "You are Claude Code, Anthropic's official CLI for Claude. " * 30
INTERLEAVED = "interleaved-thinking-2025-05-14"
PNG = ("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU"
       "5ErkJggg==")
PDF = "JVBERi0xLjQKJcOkw7zDtsOfCjIgMCBvYmoKPDwvTGVuZ3RoIDMgMCBSPj4Kc3RyZWFtCg=="


@pytest.fixture
async def fakes() -> AsyncIterator[tuple[FakeResponses, FakeAnthropic]]:
    async with FakeResponses(api_key="upstream-openai-key") as responses, \
            FakeAnthropic(api_key="upstream-anthropic-key") as messages:
        yield responses, messages


@pytest.fixture
async def gw(gateway_factory: GatewayFactory,
             fakes: tuple[FakeResponses, FakeAnthropic]) -> RunningGateway:
    responses, messages = fakes
    return await gateway_factory({
        "model_list": [
            {"model_name": GPT, "litellm_params": {
                "model": f"openai/{GPT}", "api_base": f"{responses.base_url}/v1",
                "api_key": "upstream-openai-key"}},
            {"model_name": CLAUDE, "litellm_params": {
                "model": f"anthropic/{CLAUDE}", "api_base": messages.base_url,
                "api_key": "upstream-anthropic-key"}}],
        "gateway": {"api_keys": ["client-key"], "telemetry": {"context_report": True}},
        "recovery": {"backoff_base": 0.01, "backoff_cap": 0.05},
    })


def _unmarked(value: Any) -> Any:
    """``value`` without its cache breakpoints (they mark a prefix, they are not part of it)."""
    if isinstance(value, dict):
        return {k: _unmarked(v) for k, v in value.items() if k != "cache_control"}
    if isinstance(value, list):
        return [_unmarked(v) for v in value]
    return value


def _as_read(messages: list[Any], current: list[Any]) -> list[Any]:
    """``messages`` without the thinking of assistant turns before the last one of
    ``current`` (what the Messages API drops before reading a prompt)."""
    last = max(i for i, m in enumerate(current) if m["role"] == "assistant")
    return [{**m, "content": [b for b in m["content"] if b["type"] != "thinking"]}
            if m["role"] == "assistant" and i < last else m for i, m in enumerate(messages)]


@dataclass
class Session:
    """One agent's session through the gateway: the bodies its SDK sent, turn by turn, and
    what the provider accepted for each turn."""

    fake: FakeResponses | FakeAnthropic
    history_key: str  # "input" or "messages"
    sent: list[bytes] = field(default_factory=list)
    accepted: list[RecordedRequest] = field(default_factory=list)
    edited_at: set[int] = field(default_factory=set)  # turns where the client changed history
    # Compare prefixes as the Messages API reads them: it keeps the thinking of the last
    # assistant turn only (the default of its context editing), so earlier turns' thinking
    # is in no cached prefix.
    api_view: bool = False

    async def hook(self, request: httpx.Request | httpx2.Request) -> None:
        """Keep the body exactly as the SDK put it on the wire."""
        self.sent.append(request.content)

    def http(self) -> httpx.AsyncClient:
        return httpx.AsyncClient(event_hooks={"request": [self.hook]})

    def http2(self) -> httpx2.AsyncClient:
        """The same for the anthropic SDK (which is built on httpx2)."""
        return httpx2.AsyncClient(event_hooks={"request": [self.hook]})

    def check(self, headers: Any, before: int, repairs: tuple[str, ...],
              changed: Callable[[list[Any], list[Any]], None] | None,
              refused_first: bool = False, refusals: int | None = None,
              off: tuple[str, ...] = ()) -> dict[str, Any]:
        """The turn's checks (``refusals``: how many refusals came before the request the
        provider accepted, when not one or none; ``off``: request fields a repair turns
        off); returns the body the provider accepted."""
        upstream = self.fake.requests[before:]
        if refusals is not None:
            assert len(upstream) == refusals + 1
        else:
            assert len(upstream) == (2 if refused_first else 1), [r.body for r in upstream]
        accepted = upstream[-1]
        sent = orjson.loads(self.sent[-1])
        if not repairs:
            assert "x-gateway-repairs" not in headers, headers.get("x-gateway-repairs")
            assert accepted.raw == self.sent[-1]
        else:
            named = headers["x-gateway-repairs"]
            for kind in repairs:
                assert kind in named, named
            # Only the history was touched, and only where the breakage is.
            # (Breakpoints may move: they mark the prefix, they are not in it.)
            rest = {k: v for k, v in accepted.body.items() if k != self.history_key}
            assert _unmarked(rest) == _unmarked(
                {k: v for k, v in sent.items() if k != self.history_key and k not in off})
            if changed is not None:
                changed(sent[self.history_key], accepted.body[self.history_key])
        if refused_first:
            assert upstream[0].raw == self.sent[-1]  # as sent until the refusal
        if self.accepted and len(self.accepted) not in self.edited_at:
            # The prefix the provider cached on the previous turn is still this turn's start.
            previous = _unmarked(self.accepted[-1].body[self.history_key])
            now = _unmarked(accepted.body[self.history_key])
            if self.api_view:
                previous, now = _as_read(previous, now), _as_read(now, now)
            assert now[:len(previous)] == previous
            for key in ("tools", "system", "instructions"):
                assert _unmarked(accepted.body.get(key)) == _unmarked(
                    self.accepted[-1].body.get(key))
        self.accepted.append(accepted)
        body: dict[str, Any] = accepted.body
        return body


async def assert_the_gateway_kept_every_prefix(gw: RunningGateway, model: str) -> None:
    """The prefix telemetry never blames the gateway for a broken cacheable prefix."""
    metrics = await scrape(gw.root)
    assert metrics.total("gateway_prefix_turns_total", model=model) > 0
    assert metrics.total("gateway_prefix_turns_total", model=model, cause="gateway") == 0


# -- Codex CLI on Responses -------------------------------------------------------------

CODEX_TOOLS: list[Any] = [
    {"type": "function", "name": "shell", "description": "Runs a shell command",
     "strict": False, "parameters": {"type": "object", "properties": {
         "command": {"type": "array", "items": {"type": "string"}}}, "required": ["command"]}},
    {"type": "custom", "name": "apply_patch", "description": "Edit files with a patch",
     "format": {"type": "grammar", "syntax": "lark", "definition": "start: /.+/"}},
    {"type": "local_shell"},
    {"type": "web_search"},
]


class Codex(Session):
    """Codex CLI: ``store: false``, encrypted reasoning included, its prompt_cache_key."""

    def __init__(self, gw: RunningGateway, fake: FakeResponses, conversation: str) -> None:
        super().__init__(fake, "input")
        self.conversation = conversation
        self.parallel = False  # parallel_tool_calls
        self.history: list[Any] = []
        self.client = openai.AsyncOpenAI(base_url=gw.base_url, api_key="client-key",
                                         max_retries=0, http_client=self.http())

    def body(self) -> dict[str, Any]:
        return {"model": GPT, "instructions": INSTRUCTIONS, "input": self.history,
                "tools": CODEX_TOOLS, "tool_choice": "auto", "parallel_tool_calls": self.parallel,
                "reasoning": {"effort": "medium", "summary": "auto"}, "store": False,
                "include": ["reasoning.encrypted_content"],
                "prompt_cache_key": self.conversation}

    async def turn(self, *, stream: bool, repairs: tuple[str, ...] = (),
                   changed: Callable[[list[Any], list[Any]], None] | None = None,
                   refused_first: bool = False, keep: bool = True) -> list[dict[str, Any]]:
        """One request with the whole history; the model's output items are added to the
        history (``keep``) and returned."""
        before = len(self.fake.requests)
        if stream:
            raw = await self.client.responses.with_raw_response.create(**self.body(),
                                                                        stream=True)
            events = [e async for e in raw.parse()]
            assert events[-1].type == "response.completed"
            text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
            output = [i.model_dump(exclude_none=True) for i in events[-1].response.output]
            said = [i for i in output if i["type"] == "message"]
            if said:  # the streamed text is the whole answer
                assert text == said[0]["content"][0]["text"]
        else:
            raw = await self.client.responses.with_raw_response.create(**self.body())
            output = [i.model_dump(exclude_none=True) for i in raw.parse().output]
        assert any(i["type"] in ("message", "function_call") for i in output), output
        assert "x-gateway-context" in raw.headers
        self.check(raw.headers, before, repairs, changed, refused_first)
        if keep:
            self.history += [_as_input(i) for i in output]
        return output

    async def aborted_turn(self) -> list[dict[str, Any]]:
        """A streamed turn the user interrupts (Esc) once the first output item is done:
        Codex keeps the items it had received in full."""
        done: list[dict[str, Any]] = []
        async with await self.client.responses.create(**self.body(), stream=True) as events:
            async for event in events:
                if event.type == "response.output_item.done":
                    done.append(_as_input(event.item.model_dump(exclude_none=True)))
                    break
        self.accepted.append(self.fake.requests[-1])
        self.history += done
        return done


def _as_input(item: dict[str, Any]) -> dict[str, Any]:
    """An output item as Codex sends it back (what the SDK parsed, minus read-only fields)."""
    kept = {k: v for k, v in item.items() if k not in ("status",) or item["type"] != "message"}
    if kept["type"] == "message":
        kept["content"] = [{"type": "output_text", "text": p["text"], "annotations": []}
                           for p in kept["content"]]
    return kept


def user(text: str) -> dict[str, Any]:
    return {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}


def reasoning(n: int, secret: str | None = None) -> dict[str, Any]:
    return {"type": "reasoning", "id": f"rs_codex_{n}", "summary": [
        {"type": "summary_text", "text": f"**Planning step {n}**"}],
        "encrypted_content": secret or f"gAAAA-codex-{n}"}


def shell_output(call_id: str, text: str) -> dict[str, Any]:
    return {"type": "function_call_output", "call_id": call_id,
            "output": orjson.dumps({"output": text, "metadata": {"exit_code": 0}}).decode()}


def first_user_texts(items: list[Any]) -> list[str]:
    return [p["text"] for i in items if i.get("role") == "user" for p in i["content"]]


async def test_codex_session_every_item_kind_goes_as_sent_and_a_cancelled_stream_is_mended(
        gw: RunningGateway, fakes: tuple[FakeResponses, FakeAnthropic]) -> None:
    """Twelve turns: shell calls, apply_patch (a custom tool), local_shell, a web search,
    encrypted reasoning throughout, all byte for byte; then the user interrupts a streamed
    turn once its reasoning item is done (a reasoning item with nothing after it) and, later,
    a shell call the user stopped before it answered. Each is mended on the turn that sends
    it and on every later turn alike, and the provider's cached prefix stays put."""
    codex = Codex(gw, fakes[0], "conv-codex-every-kind")
    async with codex.client:
        codex.history.append(user("list the files, TOOL please"))
        out = await codex.turn(stream=True)
        assert [i["type"] for i in out] == ["reasoning", "function_call"]
        assert out[0]["encrypted_content"].startswith("gAAAA")
        call_id = out[1]["call_id"]
        codex.history.append(shell_output(call_id, "a.py b.py"))
        out = await codex.turn(stream=True)
        assert "a.py b.py" in out[-1]["content"][0]["text"]

        codex.history += [user("fix the bug in a.py"), reasoning(1),
                          {"type": "custom_tool_call", "id": "ctc_codex_1",
                           "call_id": "call_patch_1", "name": "apply_patch",
                           "input": "*** Begin Patch\n*** Update File: a.py\n-x\n+y\n"
                                    "*** End Patch\n"},
                          {"type": "custom_tool_call_output", "call_id": "call_patch_1",
                           "output": "Success. Updated the following files:\nM a.py\n"}]
        await codex.turn(stream=False)
        codex.history += [user("run the tests"), reasoning(2),
                          {"type": "local_shell_call", "id": "lsh_codex_1",
                           "call_id": "call_ls_1", "status": "completed",
                           "action": {"type": "exec", "command": ["pytest", "-q"],
                                      "env": {}, "timeout_ms": 10000}},
                          {"type": "local_shell_call_output", "call_id": "call_ls_1",
                           "output": "3 passed"}]
        await codex.turn(stream=True)
        codex.history += [user("is there a newer release of pytest?"), reasoning(3),
                          {"type": "web_search_call", "id": "ws_codex_1", "status": "completed",
                           "action": {"type": "search", "query": "pytest release"}},
                          {"type": "message", "role": "assistant", "id": "msg_codex_1",
                           "content": [{"type": "output_text", "text": "9.0 is out.",
                                        "annotations": []}]},
                          user("thanks")]
        await codex.turn(stream=False)

        # The user presses Esc once the reasoning item is done: Codex keeps it, alone.
        codex.history.append(user("now run the linter"))
        kept = await codex.aborted_turn()
        assert [i["type"] for i in kept] == ["reasoning"]
        lone = kept[0]
        codex.history.append(user("no, just tell me what you would run"))

        def without_lone(sent: list[Any], accepted: list[Any]) -> None:
            assert accepted == [i for i in sent if i != lone]

        for ask in ("and why?", "ok"):
            await codex.turn(stream=True, repairs=("reasoning_item_dropped",),
                             changed=without_lone)
            codex.history.append(user(ask))
        await codex.turn(stream=False, repairs=("reasoning_item_dropped",), changed=without_lone)

        # A shell call the user stopped (Ctrl-C) before its output came back.
        codex.history += [user("TOOL: run the slow suite"), reasoning(4),
                          {"type": "function_call", "call_id": "call_slow", "name": "shell",
                           "arguments": '{"command":["make","slow"]}'},
                          user("stop, that takes too long")]

        def answered(sent: list[Any], accepted: list[Any]) -> None:
            synthesized = [i for i in accepted if i.get("call_id") == "call_slow"
                           and i["type"] == "function_call_output"]
            assert len(synthesized) == 1
            expected: list[Any] = []
            for item in sent:
                if item != lone:
                    expected.append(item)
                if item.get("call_id") == "call_slow":
                    expected.append(synthesized[0])
            assert accepted == expected

        for ask in ("fine", "bye"):
            await codex.turn(stream=True, changed=answered,
                             repairs=("reasoning_item_dropped", "tool_result_synthesized"))
            codex.history.append(user(ask))
    await assert_the_gateway_kept_every_prefix(gw, GPT)


# -- Claude Code on Messages ------------------------------------------------------------

EPHEMERAL = {"type": "ephemeral"}
CLAUDE_TOOLS: list[Any] = [
    {"name": "Bash", "description": "Run a command",
     "input_schema": {"type": "object", "properties": {"command": {"type": "string"}}}},
    {"name": "Read", "description": "Read a file",
     "input_schema": {"type": "object", "properties": {"file_path": {"type": "string"}}}},
    {"name": "Task", "description": "Launch a sub-agent", "cache_control": EPHEMERAL,
     "input_schema": {"type": "object", "properties": {"prompt": {"type": "string"}}}},
]
CLAUDE_BETAS = f"claude-code-20250219,{INTERLEAVED},fine-grained-tool-streaming-2025-05-14"


class ClaudeCode(Session):
    """Claude Code: thinking on with the interleaved beta, its system prompt and tools
    marked for caching, and a breakpoint on the last block of the last message (moved
    forward every turn)."""

    def __init__(self, gw: RunningGateway, fake: FakeAnthropic, session: str,
                 model: str = CLAUDE) -> None:
        super().__init__(fake, "messages")
        self.model = model
        self.session = session
        self.history: list[dict[str, Any]] = []
        self.stale_marks = 0  # earlier messages that keep their breakpoint (a resumed session)
        self.client = anthropic.AsyncAnthropic(base_url=gw.root, api_key="client-key",
                                               max_retries=0, http_client=self.http2())

    def messages(self) -> list[dict[str, Any]]:
        marked = {len(self.history) - 1 - n for n in range(1 + self.stale_marks)}
        out = []
        for n, message in enumerate(self.history):
            content = message["content"]
            if n in marked and isinstance(content, list):
                content = [*content[:-1], {**content[-1], "cache_control": EPHEMERAL}]
            out.append({**message, "content": content})
        return out

    def body(self) -> dict[str, Any]:
        return {"model": self.model, "max_tokens": 1024,
                "thinking": {"type": "enabled", "budget_tokens": 512},
                "system": [{"type": "text", "text": "You are Claude Code.",
                            "cache_control": EPHEMERAL},
                           {"type": "text", "text": CLAUDE_SYSTEM, "cache_control": EPHEMERAL}],
                "tools": CLAUDE_TOOLS, "messages": self.messages(),
                "metadata": {"user_id": f"user_0123_account__session_{self.session}"}}

    def ask(self, *blocks: dict[str, Any] | str) -> None:
        self.history.append({"role": "user", "content": [
            {"type": "text", "text": b} if isinstance(b, str) else b for b in blocks]})

    async def turn(self, *, stream: bool, repairs: tuple[str, ...] = (),
                   changed: Callable[[list[Any], list[Any]], None] | None = None,
                   refused_first: bool = False, thought: str | None = None,
                   refusals: int | None = None, off: tuple[str, ...] = ()) -> list[Any]:
        """One request with the whole history; the answer, with the model's signed thinking
        before it (``thought``), goes into the history and is returned."""
        before = len(self.fake.requests)
        headers = {"anthropic-beta": CLAUDE_BETAS}
        if stream:
            raw = await self.client.messages.with_raw_response.create(
                **self.body(), stream=True, extra_headers=headers)
            events = [e async for e in await raw.parse()]
            assert events[-1].type == "message_stop"
            text = "".join(e.delta.text for e in events if e.type == "content_block_delta"
                           and e.delta.type == "text_delta")
            starts = [e.content_block.model_dump(exclude_none=True) for e in events
                      if e.type == "content_block_start"]
            blocks: list[Any] = []
            for block in starts:
                if block["type"] == "text":
                    blocks.append({"type": "text", "text": text})
                else:
                    partial = "".join(e.delta.partial_json for e in events
                                      if e.type == "content_block_delta"
                                      and e.delta.type == "input_json_delta")
                    blocks.append({**block, "input": orjson.loads(partial)})
        else:
            raw = await self.client.messages.with_raw_response.create(
                **self.body(), extra_headers=headers)
            blocks = [b.model_dump(exclude_none=True) for b in (await raw.parse()).content]
        assert blocks and (blocks[0]["type"] == "tool_use" or blocks[0]["text"]), blocks
        self.check(raw.headers, before, repairs, changed, refused_first, refusals, off)
        if thought is not None:
            blocks = [thinking(thought, self.model), *blocks]
        self.history.append({"role": "assistant", "content": blocks})
        return blocks


def thinking(text: str, model: str = CLAUDE) -> dict[str, Any]:
    return {"type": "thinking", "thinking": text, "signature": sign_thinking(text, model)}


def tool_result(tool_id: str, content: Any, **extra: Any) -> dict[str, Any]:
    return {"type": "tool_result", "tool_use_id": tool_id, "content": content, **extra}


@pytest.fixture
async def bound_gw(gateway_factory: GatewayFactory) -> AsyncIterator[
        tuple[RunningGateway, FakeAnthropic]]:
    """A gateway before an Anthropic API whose thinking signatures are model-bound, with
    two Claude models (Claude Code's /model switch)."""
    async with FakeAnthropic(api_key="upstream-anthropic-key", model_bound=True) as fake:
        gw = await gateway_factory({
            "model_list": [{"model_name": name, "litellm_params": {
                "model": f"anthropic/{name}", "api_base": fake.base_url,
                "api_key": "upstream-anthropic-key"}} for name in (CLAUDE, OPUS)],
            "gateway": {"api_keys": ["client-key"], "telemetry": {"context_report": True}},
            "recovery": {"backoff_base": 0.01, "backoff_cap": 0.05},
        })
        yield gw, fake


OPUS = "claude-opus-4-1"


async def test_claude_code_session_with_images_pdfs_errors_and_a_sub_agent_goes_as_sent(
        bound_gw: tuple[RunningGateway, FakeAnthropic]) -> None:
    """Eight turns of tool use with signed thinking (interleaved beta), a failed command
    (is_error), a screenshot and a PDF read back in tool results, a Task sub-agent's
    report, three cache breakpoints moving forward: every turn byte for byte."""
    gw, fake = bound_gw
    claude = ClaudeCode(gw, fake, "a1b2c3d4-valid")
    async with claude.client:
        claude.ask("read main.py TOOL")
        use = (await claude.turn(stream=True, thought="I should read the file"))[-1]
        claude.ask(tool_result(use["id"], "print('hi')"))
        await claude.turn(stream=False, thought="it prints hi")
        claude.ask("run it, TOOL")
        use = (await claude.turn(stream=True, thought="run with python"))[-1]
        claude.ask(tool_result(use["id"], "python: command not found", is_error=True))
        await claude.turn(stream=True, thought="python is missing")
        claude.ask("look at the screenshot, TOOL")
        use = (await claude.turn(stream=False, thought="read the png"))[-1]
        claude.ask(tool_result(use["id"], [
            {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                         "data": PNG}},
            {"type": "text", "text": "screenshot.png"}]))
        said = await claude.turn(stream=True, thought="a one-pixel image")
        assert "[images: 1]" in said[-1]["text"]
        claude.ask("and the spec, TOOL")
        use = (await claude.turn(stream=True, thought="read the pdf"))[-1]
        claude.ask(tool_result(use["id"], [
            {"type": "document", "source": {"type": "base64", "media_type": "application/pdf",
                                            "data": PDF}}]))
        await claude.turn(stream=False, thought="the spec is short")
        # A sub-agent (Task) the model launched; its report comes back as the result.
        claude.history.append({"role": "assistant", "content": [
            thinking("delegate the search"), {"type": "text", "text": "Delegating."},
            {"type": "tool_use", "id": "toolu_task_1", "name": "Task",
             "input": {"prompt": "find every caller of main()"}}]})
        claude.ask(tool_result("toolu_task_1", [
            {"type": "text", "text": "Found 3 callers: a.py:3, b.py:9, c.py:1"},
            {"type": "text", "text": "agentId: 7f2e (for resuming)"}]))
        said = await claude.turn(stream=True, thought="three callers")
        assert said[-1]["text"].startswith("tool results: Found 3 callers")
    await assert_the_gateway_kept_every_prefix(gw, CLAUDE)
    # The breakpoint Claude Code moves forward is no change of the prompt: every turn after
    # the first extends the one before.
    metrics = await scrape(gw.root)
    assert metrics.total("gateway_prefix_turns_total", model=CLAUDE, cause="appended") == \
        len(claude.accepted) - 1


async def test_claude_code_interrupted_tool_call_resumed_with_continue_then_compacted(
        bound_gw: tuple[RunningGateway, FakeAnthropic]) -> None:
    """Claude Code killed while a command ran, resumed with ``--continue``: the tool_use has
    no result and the next user turn says so. The result is supplied (first in that turn),
    the signed thinking of the interrupted turn goes as it came, and the next turns are
    mended the same way (the prefix stays). After ``/compact`` the summary starts a new
    history that goes as sent."""
    gw, fake = bound_gw
    claude = ClaudeCode(gw, fake, "e5f6-continue")
    async with claude.client:
        claude.ask("build the project")
        await claude.turn(stream=True, thought="a plain answer first")
        claude.ask("now TOOL make")
        await claude.turn(stream=False, thought="run make")
        interrupted = claude.history[-1]
        assert interrupted["content"][-1]["type"] == "tool_use"
        tool_id = interrupted["content"][-1]["id"]
        claude.ask("[Request interrupted by user for tool use]", "make it quicker: make -j8")

        def supplied(sent: list[Any], accepted: list[Any]) -> None:
            # A user turn of its own with the result, right after the signed turn (the API
            # reads consecutive user turns as one); everything else as the client sent it.
            n = next(i for i, m in enumerate(sent) if m["content"] == interrupted["content"])
            answer = accepted[n + 1]
            assert answer["role"] == "user"
            assert [(b["type"], b["tool_use_id"]) for b in answer["content"]] == [
                ("tool_result", tool_id)]
            assert accepted[:n + 1] + accepted[n + 2:] == sent

        await claude.turn(stream=True, repairs=("tool_result_synthesized",), changed=supplied,
                          thought="make -j8 then")
        for ask in ("is it faster?", "good"):
            claude.ask(ask)
            await claude.turn(stream=ask == "good", repairs=("tool_result_synthesized",),
                              changed=supplied, thought="answering")
        # /compact: the conversation so far is replaced by its summary.
        claude.edited_at.add(len(claude.accepted))
        claude.history = []
        claude.ask("This session is being continued from a previous conversation that ran "
                   "out of context. The conversation is summarized below:\nBuilt with make.",
                   "what next?")
        await claude.turn(stream=True, thought="after the summary")
        claude.ask("ship it")
        await claude.turn(stream=False)
    await assert_the_gateway_kept_every_prefix(gw, CLAUDE)


async def test_claude_code_switched_model_has_the_other_models_thinking_dropped_on_refusal(
        bound_gw: tuple[RunningGateway, FakeAnthropic]) -> None:
    """Three turns on Opus with signed thinking go as sent; after ``/model sonnet`` the
    provider refuses Opus's signatures. The first turn after the switch goes once as it
    came; on the refusal the thinking goes. The blocks that refusal covered are remembered
    for Sonnet: later turns leave them out up front (no refusal again) and keep Sonnet's own
    thinking, so a turn answering a tool call Sonnet made keeps thinking on. Every turn is
    answered, and what the provider accepts only grows."""
    gw, fake = bound_gw
    claude = ClaudeCode(gw, fake, "0a0b-switch", model=OPUS)
    async with claude.client:
        claude.ask("explain the repo")
        await claude.turn(stream=True, thought="a survey")
        claude.ask("TOOL read setup.py")
        use = (await claude.turn(stream=False, thought="read setup"))[-1]
        claude.ask(tool_result(use["id"], "setup()"))
        await claude.turn(stream=True, thought="setup is trivial")
        claude.model = CLAUDE  # /model sonnet: another model, whose cache starts empty
        claude.edited_at.add(len(claude.accepted))
        claude.ask("what does setup do?")
        await claude.turn(stream=True, refused_first=True, changed=no_thinking,
                          repairs=("thinking_block_dropped",), thought="sonnet thinks now")
        claude.ask("TOOL read it again")
        use = (await claude.turn(stream=False, changed=no_opus_thinking,
                                 repairs=("thinking_block_dropped",), thought="re-read"))[-1]
        claude.ask(tool_result(use["id"], "setup(name='x')"))
        said = await claude.turn(stream=True, changed=no_opus_thinking,
                                 repairs=("thinking_block_dropped",), thought="named x")
        assert said[-1]["text"] == "tool results: setup(name='x')"
        assert fake.requests[-1].body["thinking"]["type"] == "enabled"  # Sonnet's own turn
        claude.ask("thanks")
        await claude.turn(stream=False, changed=no_opus_thinking,
                          repairs=("thinking_block_dropped",))
    await assert_the_gateway_kept_every_prefix(gw, CLAUDE)


def no_opus_thinking(sent: list[Any], accepted: list[Any]) -> None:
    """Every block Opus signed gone (Sonnet refused them a turn before), Sonnet's kept."""
    def opus(block: dict[str, Any]) -> bool:
        return block["type"] == "thinking" and block["signature"] == sign_thinking(
            block["thinking"], OPUS)
    assert any(opus(b) for m in sent if m["role"] == "assistant" for b in m["content"])
    assert any(b["type"] == "thinking" for m in accepted if m["role"] == "assistant"
               for b in m["content"])
    assert accepted == [{**m, "content": [b for b in m["content"] if not opus(b)]}
                        if m["role"] == "assistant" else m for m in sent]


def no_thinking(sent: list[Any], accepted: list[Any]) -> None:
    """Every thinking block gone, nothing else touched."""
    assert accepted == [{**m, "content": [b for b in m["content"] if b["type"] != "thinking"]}
                        if m["role"] == "assistant" else m for m in sent]


async def test_claude_code_resumed_with_a_stale_breakpoint_has_five_trimmed_stably(
        bound_gw: tuple[RunningGateway, FakeAnthropic]) -> None:
    """A resumed Claude Code session keeps the breakpoint of the message before the last
    one: five with the system's two and the tools'. The provider takes four; the gateway
    removes one, keeping the system prompt's head and the newest three, the same way on
    every turn, so the prefix the provider cached stays."""
    gw, fake = bound_gw
    claude = ClaudeCode(gw, fake, "0c0d-breakpoints")
    async with claude.client:
        claude.ask("hello")
        await claude.turn(stream=False, thought="greet")
        claude.ask("again")
        await claude.turn(stream=True)
        claude.stale_marks = 1

        def one_breakpoint_less(sent: list[Any], accepted: list[Any]) -> None:
            assert _unmarked(accepted) == _unmarked(sent)
            body = fake.requests[-1].body
            marks = orjson.dumps(body).count(b'"cache_control"')
            assert marks == 4
            assert "cache_control" in body["messages"][-1]["content"][-1]

        for ask in ("one", "two", "three"):
            claude.ask(ask)
            await claude.turn(stream=ask != "two", repairs=("cache_breakpoint_removed",),
                              changed=one_breakpoint_less)
        body = fake.requests[-1].body
        assert "cache_control" in body["tools"][-1]  # the head of the prefix stays marked
        assert "cache_control" in body["system"][-1]
    await assert_the_gateway_kept_every_prefix(gw, CLAUDE)


async def test_claude_code_switched_model_in_the_middle_of_a_tool_loop_is_answered(
        bound_gw: tuple[RunningGateway, FakeAnthropic]) -> None:
    """``/model`` while Opus waits for a tool's result: the turn the result answers is
    Opus's too. The session is answered (thinking off for that turn), and goes on."""
    gw, fake = bound_gw
    claude = ClaudeCode(gw, fake, "0e0f-switch-in-loop", model=OPUS)
    async with claude.client:
        claude.ask("explain the repo")
        await claude.turn(stream=False, thought="a survey")
        claude.ask("TOOL list it")
        use = (await claude.turn(stream=True, thought="list"))[-1]
        claude.model = CLAUDE
        claude.edited_at.add(len(claude.accepted))
        claude.ask(tool_result(use["id"], "a.py b.py"))
        said = await claude.turn(stream=True, refused_first=True, changed=no_thinking,
                                 repairs=("thinking_block_dropped", "thinking_disabled"),
                                 off=("thinking",), thought="two files")
        assert said[-1]["text"] == "tool results: a.py b.py"
        claude.ask("thanks")  # Opus's blocks, refused a turn before, are left out up front
        await claude.turn(stream=False, changed=no_opus_thinking,
                          repairs=("thinking_block_dropped",), thought="welcome")
        claude.ask("bye")
        await claude.turn(stream=True, changed=no_opus_thinking,
                          repairs=("thinking_block_dropped",))
    await assert_the_gateway_kept_every_prefix(gw, CLAUDE)


async def test_codex_session_trimmed_between_a_call_and_its_output_after_a_compaction(
        gw: RunningGateway, fakes: tuple[FakeResponses, FakeAnthropic]) -> None:
    """A Codex session resumed from a compaction item goes as sent; Codex then trims its
    oldest items to fit the window and the cut falls between a shell call and its output.
    The orphan output goes (on that turn and every later one alike: the prefix the provider
    cached stays); an earlier message the user edits is the client's change, still mended."""
    codex = Codex(gw, fakes[0], "conv-codex-trimmed")
    async with codex.client:
        codex.history += [
            {"type": "message", "role": "developer", "content": [
                {"type": "input_text", "text": "<environment_context>cwd=/repo"
                                               "</environment_context>"}]},
            user("fix the flaky test"),
            {"type": "compaction", "encrypted_content": "gAAAA-compacted-summary-1"},
            user("continue where we were")]
        await codex.turn(stream=True)
        codex.history.append(user("TOOL grep for sleep("))
        out = await codex.turn(stream=False)
        call = out[-1]
        assert call["type"] == "function_call"
        codex.history.append(shell_output(call["call_id"], "tests/test_a.py:3: sleep(1)"))
        await codex.turn(stream=True)

        # The window is nearly full: Codex drops its oldest items, the call among them.
        at = codex.history.index(call)
        codex.history = codex.history[at + 1:]
        orphan = codex.history[0]
        assert orphan["type"] == "function_call_output"
        codex.edited_at.add(len(codex.accepted))
        codex.history.append(user("so remove the sleep"))

        def without_orphan(sent: list[Any], accepted: list[Any]) -> None:
            assert accepted == [i for i in sent if i != orphan]

        for ask in ("and run it", "thanks"):
            await codex.turn(stream=ask != "thanks", repairs=("orphan_tool_result_dropped",),
                             changed=without_orphan)
            codex.history.append(user(ask))
        await codex.turn(stream=False, repairs=("orphan_tool_result_dropped",),
                         changed=without_orphan)

        # The user goes back (Esc Esc) and edits the message after the orphan.
        first_ask = next(n for n, i in enumerate(codex.history) if i.get("role") == "user")
        codex.history = [*codex.history[:first_ask], user("so remove the sleep, and the retry")]
        codex.edited_at.add(len(codex.accepted))
        await codex.turn(stream=True, repairs=("orphan_tool_result_dropped",),
                         changed=without_orphan)
        codex.history.append(user("good"))
        await codex.turn(stream=True, repairs=("orphan_tool_result_dropped",),
                         changed=without_orphan)
    await assert_the_gateway_kept_every_prefix(gw, GPT)


async def test_codex_session_resumed_on_another_account_has_its_reasoning_resent_stateless(
        gw: RunningGateway, fakes: tuple[FakeResponses, FakeAnthropic]) -> None:
    """``codex resume`` of a session recorded under another organization: its encrypted
    reasoning goes once as it came, the provider cannot decrypt it, and the turn is resent
    without what it refused. That refusal is remembered: the turns after leave those items
    out up front (not refused again), and what the provider accepted on one turn is the
    start of what it accepts on the next."""
    codex = Codex(gw, fakes[0], "conv-codex-resumed")
    async with codex.client:
        codex.history += [user("what does main.py do?"),
                          reasoning(1, "gAAAB-other-org-1"),
                          {"type": "message", "role": "assistant", "id": "msg_other_1",
                           "content": [{"type": "output_text", "text": "It prints hi.",
                                        "annotations": []}]},
                          user("TOOL run it"), reasoning(2, "gAAAB-other-org-2"),
                          {"type": "function_call", "id": "fc_other_2", "call_id": "call_o2",
                           "name": "shell", "arguments": '{"command":["python","main.py"]}'},
                          shell_output("call_o2", "hi"),
                          {"type": "message", "role": "assistant", "id": "msg_other_2",
                           "content": [{"type": "output_text", "text": "It printed hi.",
                                        "annotations": []}]},
                          user("now on this machine")]
        foreign = {i["id"] for i in codex.history if i["type"] == "reasoning"}

        def stateless(sent: list[Any], accepted: list[Any]) -> None:
            assert not [i for i in accepted if i.get("id") in foreign]
            texts = [p.get("text") for i in accepted if i["type"] == "message"
                     for p in i["content"]]
            assert texts == [p.get("text") for i in sent if i["type"] == "message"
                             for p in i["content"]]

        for turn, ask in enumerate(("and again", "TOOL list files", "and the tests?",
                                    "thanks", None)):
            out = await codex.turn(stream=True, refused_first=turn == 0, changed=stateless,
                                   repairs=("encrypted_item_dropped",))
            if out[-1]["type"] == "function_call":
                codex.history.append(shell_output(out[-1]["call_id"], "a.py"))
            elif ask is not None:
                codex.history.append(user(ask))
    await assert_the_gateway_kept_every_prefix(gw, GPT)


async def test_codex_parallel_calls_answered_out_of_order_then_one_cut_by_an_interrupt(
        gw: RunningGateway, fakes: tuple[FakeResponses, FakeAnthropic]) -> None:
    """``parallel_tool_calls``: two shell calls in one answer, their outputs back in the
    order they finished, go as sent. Later the user interrupts a pair after one output came
    back: the other call gets its output, after the one that came, on every turn alike."""
    codex = Codex(gw, fakes[0], "conv-codex-parallel")

    def pair(n: int) -> list[dict[str, Any]]:
        return [reasoning(10 + n),
                *[{"type": "function_call", "call_id": f"call_p{n}{k}", "name": "shell",
                   "arguments": orjson.dumps({"command": ["cat", f"{k}.py"]}).decode()}
                  for k in "ab"]]

    async with codex.client:
        codex.parallel = True
        codex.history.append(user("what is in this repo?"))
        await codex.turn(stream=False)
        codex.history += [user("read a.py and b.py"), *pair(1),
                          shell_output("call_p1b", "b"), shell_output("call_p1a", "a")]
        await codex.turn(stream=True)
        codex.history += [user("now c.py and d.py"), *pair(2),
                          shell_output("call_p2a", "c")]  # Ctrl-C before the second
        codex.history.append(user("skip d.py"))

        def second_answered(sent: list[Any], accepted: list[Any]) -> None:
            # After the outputs that came back, before the user's next message.
            at = next(n for n, i in enumerate(sent) if i.get("call_id") == "call_p2a"
                      and i["type"] == "function_call_output")
            added = accepted[at + 1]
            assert (added["type"], added["call_id"]) == ("function_call_output", "call_p2b")
            assert accepted[:at + 1] + accepted[at + 2:] == sent

        for ask in ("fine", "done"):
            await codex.turn(stream=ask == "fine", repairs=("tool_result_synthesized",),
                             changed=second_answered)
            codex.history.append(user(ask))
        await codex.turn(stream=True, repairs=("tool_result_synthesized",),
                         changed=second_answered)
    await assert_the_gateway_kept_every_prefix(gw, GPT)
