"""Every wait of a request is bounded by its deadline: a summarizer that never answers,
another process's compaction lock, and a lock whose holder was killed (``kill -9``). The
summary gets a share of the deadline; the trimming safety net answers when it runs out."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import textwrap
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from gateway.referee import Referee
from gateway.sessions import prefix_chain
from tests.compaction.conftest import SYSTEM_PROMPT, agent_turn, is_summary_call
from tests.conftest import GatewayFactory, model_entry, serve_app
from tests.factories import system, user
from tests.http import post_json

REPO = Path(__file__).resolve().parents[2]
DEADLINE = 3.0  # seconds: the request deadline of these tests (recovery.deadline)
SESSION = "deadline-1"


def too_big_history() -> list[dict[str, Any]]:
    """A history of about 2,500 tokens: over the 1,000-token window, so it must be
    compacted before it is sent."""
    history = [system(SYSTEM_PROMPT)]
    for i in range(4):
        history.extend(agent_turn(i))
    history.append(user("Now summarize what the handlers do."))
    return history


def config(ref: Referee, **extra: Any) -> dict[str, Any]:
    raw: dict[str, Any] = {
        "model_list": [model_entry("demo", ref.base_url, model="openai/referee",
                                   max_input_tokens=1000)],
        "compaction": {"reserved_context_size": 0},
        "recovery": {"deadline": DEADLINE},
    }
    raw.update(extra)
    return raw


async def ask(base_url: str, messages: list[dict[str, Any]]) -> tuple[int, Any, Any]:
    """Send the chat request in the session; (status, response headers, JSON body)."""
    return await post_json(base_url + "/chat/completions", {"model": "demo", "messages": messages},
                           headers={"x-session-id": SESSION})


@pytest.fixture
async def ref() -> AsyncIterator[Referee]:
    async with Referee(rules="openai", style="openai") as r:
        yield r


@pytest.fixture
async def silent() -> AsyncIterator[tuple[str, list[str]]]:
    """An upstream that accepts requests and never answers (until the test ends)."""
    release = asyncio.Event()
    seen: list[str] = []

    async def hang(request: web.Request) -> web.Response:
        seen.append((await request.json())["model"])
        await release.wait()
        return web.json_response({}, status=503)

    app = web.Application()
    app.router.add_post("/chat/completions", hang)
    runner, base = await serve_app(app)
    yield base, seen
    release.set()
    await runner.cleanup()


async def test_a_summarizer_that_never_answers_ends_within_the_deadline(
    gateway_factory: GatewayFactory, ref: Referee, silent: tuple[str, list[str]]
) -> None:
    base, seen = silent
    raw = config(ref, compaction={"reserved_context_size": 0, "summarizer_model": "mute"})
    raw["model_list"].append(model_entry("mute", base, model="openai/mute"))
    gw = await gateway_factory(raw)
    status, headers, body = await ask(gw.base_url, too_big_history())
    # Answered while the summary call is still unanswered (the upstream holds it to the end):
    # the summary had its share of the deadline, then the safety net trimmed.
    assert seen == ["mute"], "the summary call was sent, and never answered"
    assert status == 200, body
    assert headers["x-gateway-compaction"].startswith("trimmed; ")
    assert "no summary within its share" in headers["x-gateway-compaction-summary-failed"]
    (sent,) = ref.requests  # the trimmed history, once
    assert sent.status == 200
    assert "earlier messages of this conversation were omitted" in sent.body.decode()


# -- another process holds the compaction lock -------------------------------------------

_HOLDER = textwrap.dedent(
    """
    import asyncio, json, sys
    from gateway.sessions import SQLiteSessionStore, prefix_chain

    async def main() -> None:
        store = SQLiteSessionStore(sys.argv[1])
        messages = json.loads(sys.argv[3])
        async with store.lock(sys.argv[2], prefix_chain(messages)[-1], ttl=600) as got:
            print("held" if got else "refused", flush=True)
            await asyncio.to_thread(sys.stdin.readline)
        await store.close()

    asyncio.run(main())
    """
)


async def hold_lock(db: Path, messages: list[dict[str, Any]]) -> asyncio.subprocess.Process:
    """A separate process holding the compaction lock of ``messages`` (a 600 s lease)."""
    assert prefix_chain(messages)  # the key the gateway locks: the whole history as sent
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", _HOLDER, str(db), SESSION, json.dumps(messages),
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(REPO)}, cwd=REPO)
    assert proc.stdout is not None
    line = await asyncio.wait_for(proc.stdout.readline(), 30)
    assert line.strip() == b"held"
    return proc


async def test_waiting_for_another_process_lock_ends_within_the_deadline(
    gateway_factory: GatewayFactory, ref: Referee, tmp_path: Path
) -> None:
    gw = await gateway_factory(config(ref))
    messages = too_big_history()
    proc = await hold_lock(tmp_path / "data" / "sessions.sqlite3", messages)
    try:
        status, headers, body = await ask(gw.base_url, messages)  # the lock still held
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        await proc.wait()
    # The wait for the other compaction had the summary's share of the deadline; then the
    # safety net trimmed and the request was answered.
    assert status == 200, body
    assert headers["x-gateway-compaction"].startswith("trimmed; ")
    assert "deadline" in headers["x-gateway-compaction-summary-failed"]
    assert not [r for r in ref.requests if is_summary_call(r)], "the lock was respected"


async def test_a_killed_lock_holder_does_not_make_the_next_request_wait(
    gateway_factory: GatewayFactory, ref: Referee, tmp_path: Path
) -> None:
    gw = await gateway_factory(config(ref, recovery={"deadline": 60}))
    messages = too_big_history()
    proc = await hold_lock(tmp_path / "data" / "sessions.sqlite3", messages)
    proc.send_signal(signal.SIGKILL)
    assert await proc.wait() == -signal.SIGKILL
    # Answered within the client's 60 s timeout: the dead holder's 600 s lease was not
    # waited out.
    status, headers, body = await ask(gw.base_url, messages)
    assert status == 200, body
    assert headers["x-gateway-compaction"].startswith("summarized")
    assert len([r for r in ref.requests if is_summary_call(r)]) == 1
