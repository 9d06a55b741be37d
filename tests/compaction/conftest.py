"""Helpers for the compaction end-to-end tests: agent-like sessions, a view of what the
referee (the upstream) received, and raw-byte slicing of request bodies."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import openai
import pytest
from aiohttp import web

from gateway.compaction import CONTINUATION_TEXT, SUMMARY_PREFIX
from gateway.compaction.summary_request import DEFAULT_INSTRUCTIONS
from gateway.referee import RecordedRequest, Referee
from gateway.referee.bodies import Reply, overflow
from tests.conftest import RunningGateway, gateway_state, model_entry, serve_gateway
from tests.factories import assistant, system, tool, tool_call, user

Message = dict[str, Any]

SYSTEM_PROMPT = "You are a careful coding agent working in the repository of the user."
RECOVERY_HEADING = "## Context Recovery"
SUMMARY_TEXT_PREFIX = "referee: accepted"  # what the referee answers the summary call with


def file_body(i: int, lines: int = 40) -> str:
    """A tool result that looks like a source file (about 40 bytes a line)."""
    return "\n".join(f"def handler_{i}_{n}(value):  # step {i} line {n}" for n in range(lines))


def agent_turn(i: int, lines: int = 40) -> list[Message]:
    """One agent step as the client sends it: the user's ask, a tool call, its result."""
    return [
        user(f"Step {i}: open module_{i}.py and tell me what handler_{i}_0 does."),
        assistant(None, [tool_call(f"call_{i}", "read_file", {"path": f"module_{i}.py"})]),
        tool(f"call_{i}", file_body(i, lines)),
    ]


class Target(Protocol):
    """Anything serving the gateway API (in-process or a child process)."""

    @property
    def base_url(self) -> str: ...


@dataclass
class Session:
    """A client that keeps its own history and sends it whole on every call."""

    gw: Target
    session_id: str | None = "sess-1"
    key: str = "client-key"
    model: str = "demo"
    history: list[Message] = field(default_factory=lambda: [system(SYSTEM_PROMPT)])
    replies: list[Any] = field(default_factory=list)

    def client(self, base_url: str | None = None) -> openai.AsyncOpenAI:
        return openai.AsyncOpenAI(base_url=base_url or self.gw.base_url, api_key=self.key,
                                  max_retries=0)

    async def send(self, extra: list[Message] | None = None, *,
                   base_url: str | None = None) -> Any:
        """Append ``extra``, send the whole history, append the answer; the raw response."""
        self.history.extend(extra or [])
        headers = {"x-session-id": self.session_id} if self.session_id else {}
        async with self.client(base_url) as c:
            raw = await c.chat.completions.with_raw_response.create(
                model=self.model, messages=self.history, extra_headers=headers)
        completion = raw.parse()
        content = completion.choices[0].message.content
        assert content, "every request of a growing session must get an answer"
        self.history.append(assistant(content))
        self.replies.append(raw)
        return raw


def is_summary_call(record: RecordedRequest) -> bool:
    """True for the gateway's summary requests (their system message is the instructions)."""
    try:
        messages = record.json()["messages"]
    except (ValueError, KeyError, TypeError):
        return False
    return bool(messages) and messages[0].get("content") == DEFAULT_INSTRUCTIONS


def summary_calls(ref: Referee, since: int = 0) -> list[RecordedRequest]:
    """The summary requests the upstream received (from request number ``since``)."""
    return [r for r in ref.requests[since:] if is_summary_call(r)]


def chat_calls(ref: Referee, since: int = 0) -> list[RecordedRequest]:
    """The client's requests as forwarded (everything but summary requests)."""
    return [r for r in ref.requests[since:] if not is_summary_call(r)]


def accepted(records: list[RecordedRequest]) -> list[RecordedRequest]:
    return [r for r in records if r.status == 200]


def raw_messages(body: bytes) -> tuple[str, list[tuple[int, int]]]:
    """The body as text and the (start, end) span of each element of its top-level
    ``messages`` array, found by scanning the raw JSON (nothing is re-encoded)."""
    text = body.decode("utf-8")
    decoder = json.JSONDecoder()

    def skip(pos: int, chars: str = " \t\r\n") -> int:
        while pos < len(text) and text[pos] in chars:
            pos += 1
        return pos

    pos = skip(0)
    assert text[pos] == "{"
    pos += 1
    while True:
        pos = skip(pos)
        key, pos = decoder.raw_decode(text, pos)
        pos = skip(pos)
        assert text[pos] == ":"
        pos = skip(pos + 1)
        if key == "messages":
            assert text[pos] == "["
            spans: list[tuple[int, int]] = []
            pos = skip(pos + 1)
            while text[pos] != "]":
                _, end = decoder.raw_decode(text, pos)
                spans.append((pos, end))
                pos = skip(skip(end), ",")
                pos = skip(pos)
            return text, spans
        _, pos = decoder.raw_decode(text, pos)
        pos = skip(skip(pos), ",")


def messages_prefix_bytes(record: RecordedRequest, count: int) -> bytes:
    """The raw bytes of the ``messages`` array from its ``[`` through element ``count``."""
    text, spans = raw_messages(record.body)
    assert len(spans) >= count
    start = text.rindex("[", 0, spans[0][0] + 1)
    return text[start:spans[count - 1][1]].encode("utf-8")


def assert_compacted_shape(sent: list[Message], original: list[Message],
                           session_id: str) -> tuple[list[Message], Message]:
    """SPEC §4.2: system, kept real user messages verbatim, summary, continuation.

    Returns the kept user messages and the summary message.
    """
    systems = [m for m in original if m["role"] in ("system", "developer")]
    assert sent[: len(systems)] == systems
    rest = sent[len(systems):]
    assert all(m["role"] == "user" for m in rest), "only user-role messages after system"
    assert not any("tool_calls" in m or m["role"] == "tool" for m in sent)
    summary, continuation = rest[-2], rest[-1]
    assert continuation == {"role": "user", "content": CONTINUATION_TEXT}
    assert summary["content"].startswith(SUMMARY_PREFIX)
    recovery = summary["content"].rindex(RECOVERY_HEADING)
    assert recovery > summary["content"].index(SUMMARY_TEXT_PREFIX), \
        "Context Recovery ends the summary"
    tail = summary["content"][recovery:]
    assert f"session `{session_id}`" in tail
    assert f"/v1/gateway/sessions/{session_id}/archive?from=1&to=" in tail
    kept = rest[:-2]
    real_users = [m for m in original if m["role"] == "user"
                  and not str(m["content"]).startswith("<system-reminder>")]
    assert kept == real_users, "the real user messages are kept verbatim, in order"
    return kept, summary


def success_body(text: str, finish_reason: str = "stop") -> dict[str, Any]:
    """A chat.completion body for scripted summary replies."""
    return {
        "id": "chatcmpl-scripted", "object": "chat.completion", "created": 1_700_000_000,
        "model": "referee",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                     "finish_reason": finish_reason}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 10, "total_tokens": 20},
    }


def overflow_reply(style: str = "openai", window: int = 100_000,
                   tokens: int = 150_000) -> Reply:
    """The provider's real overflow answer (OpenAI or Anthropic wording). By default it
    states the window ``demo_config`` configures: a smaller one would be learned and win
    over the configuration."""
    return overflow(style, window=window, message_tokens=tokens)  # type: ignore[arg-type]


async def wait_for(condition: Callable[[], bool], what: str, rounds: int = 2000) -> None:
    """Yield to the loop until ``condition()`` holds (bounded: fails, never hangs)."""
    for _ in range(rounds):
        if condition():
            return
        await asyncio.sleep(0.005)
    raise AssertionError(f"timed out waiting for {what}")


async def wait_background_idle(gw: RunningGateway) -> None:
    """Wait until the in-process gateway has no background compaction running."""
    compactor = gateway_state(gw).driver.compactor
    await wait_for(lambda: not compactor.running, "background compaction to finish")


def compaction_header(raw: Any) -> tuple[str, int, int] | None:
    """``x-gateway-compaction`` as (how, tokens_before, tokens_after), or None."""
    value = raw.headers.get("x-gateway-compaction")
    if value is None:
        return None
    how, *fields = [p.strip() for p in value.split(";")]
    numbers = dict(f.split("=") for f in fields if "=" in f)  # ("unstored" has no value)
    return how, int(numbers["tokens_before"]), int(numbers["tokens_after"])


def demo_config(ref: Referee, *, window: int = 100_000, compaction: dict[str, Any] | None = None,
                **extra: Any) -> dict[str, Any]:
    """A gateway config with one model ``demo`` served by ``ref``."""
    raw: dict[str, Any] = {
        "model_list": [model_entry("demo", ref.base_url, model="openai/referee",
                                   max_input_tokens=window)],
        "compaction": {"reserved_context_size": 0, "recall": False, **(compaction or {})},
    }
    raw.update(extra)
    return raw


@dataclass
class Gateways:
    """Start and stop in-process gateways explicitly (for restarts)."""

    data_dir: Path
    runners: dict[int, web.AppRunner] = field(default_factory=dict)

    async def start(self, raw: dict[str, Any]) -> RunningGateway:
        gw, runner = await serve_gateway({"sessions": {"data_dir": str(self.data_dir)}, **raw})
        self.runners[id(gw)] = runner
        return gw

    async def stop(self, gw: RunningGateway) -> None:
        await self.runners.pop(id(gw)).cleanup()


@pytest.fixture
async def gateways(tmp_path: Path) -> AsyncIterator[Gateways]:
    """In-process gateways sharing ``tmp_path/data``; all stopped at the end."""
    started = Gateways(tmp_path / "data")
    yield started
    for runner in reversed(list(started.runners.values())):
        await runner.cleanup()
