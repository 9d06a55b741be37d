"""A big chat body does not stall the worker (issue 23): a 19 MB body is parsed and checked,
and a 19 MB history prepared for its summary, off the event loop (``/healthz`` answers
meanwhile)."""

from __future__ import annotations

import asyncio
import io
import threading
from collections.abc import Callable
from typing import Any

import aiohttp
import orjson
import pytest

from gateway.compaction import summarizer
from gateway.server import routes
from tests.conftest import GatewayFactory, model_entry
from tests.fakes.faulty_upstream import FaultyUpstream

BIG_BYTES = 19 * 1024 * 1024


def big_body(model: str) -> bytes:
    """A Messages body of about 19 MB: many turns of ordinary words."""
    text = " ".join(f"w{i % 997}" for i in range(20_000))
    turns = BIG_BYTES // len(text) | 1
    messages = [{"role": "user" if i % 2 == 0 else "assistant", "content": text}
                for i in range(turns)]
    return orjson.dumps({"model": model, "max_tokens": 10, "messages": messages})


def held_until(release: threading.Event, arrived: threading.Semaphore,
               real: Callable[..., Any]) -> tuple[Callable[..., Any], list[bool]]:
    """``real``, made to wait for ``release`` after saying it started: run on the event loop
    it would stall the loop until its bound (and record False)."""
    released: list[bool] = []

    def held(*args: Any, **kwargs: Any) -> Any:
        arrived.release()
        released.append(release.wait(30))
        return real(*args, **kwargs)

    return held, released


async def test_healthz_answers_while_a_big_chat_history_is_prepared_for_its_summary(
    gateway_factory: GatewayFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with FaultyUpstream() as up:  # answers every request (summary included) with "fine"
        gw = await gateway_factory({"model_list": [
            model_entry("gpt", up.base_url, model="openai/gpt-4o")]})
        release, arrived = threading.Event(), threading.Semaphore(0)
        held, released = held_until(release, arrived, summarizer._transcript)
        monkeypatch.setattr(summarizer, "_transcript", held)
        # 19 MB of history: far over the model's window, so it is summarized first.
        messages = orjson.loads(big_body("gpt"))["messages"]
        body = orjson.dumps({"model": "gpt", "messages": messages})
        async with aiohttp.ClientSession() as http:
            chat = asyncio.create_task(http.post(gw.base_url + "/chat/completions",
                                                 data=io.BytesIO(body),
                                                 headers={"Content-Type": "application/json"}))
            assert await asyncio.to_thread(arrived.acquire, True, 120)
            async with http.get(gw.root + "/healthz") as r:
                assert r.status == 200
            release.set()
            async with await chat as answer:
                assert answer.status == 200
                assert (await answer.json())["choices"][0]["message"]["content"] == "fine"
    assert released == [True]


async def test_healthz_answers_while_a_big_chat_body_is_checked(
    gateway_factory: GatewayFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with FaultyUpstream() as up:
        gw = await gateway_factory({"model_list": [
            model_entry("gpt", up.base_url, model="openai/gpt-4o",
                        max_input_tokens=100_000_000)]})  # no compaction: only the edge
        release, arrived = threading.Event(), threading.Semaphore(0)
        held, released = held_until(release, arrived, routes.read_clean_chat)
        monkeypatch.setattr(routes, "read_clean_chat", held)
        messages = orjson.loads(big_body("gpt"))["messages"]
        body = orjson.dumps({"model": "gpt", "messages": messages})
        async with aiohttp.ClientSession() as http:
            chat = asyncio.create_task(http.post(gw.base_url + "/chat/completions",
                                                 data=io.BytesIO(body),
                                                 headers={"Content-Type": "application/json"}))
            assert await asyncio.to_thread(arrived.acquire, True, 120)
            async with http.get(gw.root + "/healthz") as r:
                assert r.status == 200
            release.set()
            async with await chat as answer:
                assert answer.status == 200
    assert released == [True]
    assert orjson.loads(up.received[-1].body)["messages"] == messages  # sent as it came
