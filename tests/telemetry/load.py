"""A mixed load for the observability tests: valid, broken, streamed, overflowing and
failing-upstream requests, through the real openai SDK."""

from __future__ import annotations

from typing import Any

import openai

from gateway.referee import Referee
from tests.compaction.conftest import Session, agent_turn
from tests.conftest import model_entry
from tests.factories import calls, tool, user

SMALL_WINDOW = 1500  # the "small" upstream refuses more than this (estimated tokens)
BROKEN = [user("list the files"), calls("call_1"), user("never mind, say hi")]


def load_config(ref: Referee, small: Referee, **gateway: Any) -> dict[str, Any]:
    """Two models: ``demo`` (a lenient referee) and ``small`` (a tiny context window)."""
    return {
        "model_list": [model_entry("demo", ref.base_url),
                       model_entry("small", small.base_url, model="openai/referee",
                                   max_input_tokens=100_000)],
        "compaction": {"reserved_context_size": 0},
        "recovery": {"max_transient_retries": 1, "backoff_base": 0.01, "backoff_cap": 0.02},
        # The context panels read what context_report adds.
        "gateway": {"telemetry": {"context_report": True}, **gateway},
    }


async def mixed_load(base_url: str, ref: Referee, key: str = "client-key") -> dict[str, int]:
    """Send the load; returns how many requests ended with each status class."""
    statuses: dict[str, int] = {}

    def seen(status: int) -> None:
        statuses[f"{status // 100}xx"] = statuses.get(f"{status // 100}xx", 0) + 1

    async with openai.AsyncOpenAI(base_url=base_url, api_key=key, max_retries=0) as c:
        await c.chat.completions.create(model="demo", messages=[user("hi")])
        seen(200)
        await c.chat.completions.create(model="demo", messages=BROKEN)  # type: ignore[arg-type]
        seen(200)
        await c.chat.completions.create(model="demo", messages=[user("a"), tool("ghost")])
        seen(200)
        stream = await c.chat.completions.create(
            model="demo", messages=[user("stream please")], stream=True,
            stream_options={"include_usage": True})
        async for _ in stream:
            pass
        seen(200)
        try:  # a client error: a model the gateway does not serve
            await c.chat.completions.create(model="no-such-model", messages=[user("x")])
        except openai.NotFoundError as err:
            seen(err.status_code)
        # A failing upstream: every attempt answered 503, the client gets the 503.
        ref.script(503, {"error": {"message": "The server is overloaded",
                                   "type": "server_error", "param": None, "code": None}},
                   times=2)
        try:
            await c.chat.completions.create(model="demo", messages=[user("fail")])
        except openai.InternalServerError as err:
            seen(err.status_code)
    # An agent session outgrowing the small upstream's window: compacted on overflow.
    s = Session(_Target(base_url), session_id="sess-load", key=key, model="small")
    for i in range(8):
        raw = await s.send(agent_turn(i))
        seen(raw.http_response.status_code)
        if raw.headers.get("x-gateway-compaction"):
            break
    else:
        raise AssertionError("the session was never compacted")
    return statuses


class _Target:
    def __init__(self, base_url: str) -> None:
        self.base_url = base_url
