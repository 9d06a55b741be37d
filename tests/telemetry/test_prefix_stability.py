"""Prefix stability per session (issue 26): a volatile note early in the system prompt breaks
the cacheable prefix on every turn, in ``/metrics``, the access log and the inspector; the
same session with the note moved to the end is appended-only; the gateway's own repairs keep
the prefix (and a client's change is never blamed on the gateway)."""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import anthropic
import openai
import pytest
import yaml
from playwright.async_api import expect

from gateway.cli import main
from gateway.referee import Referee
from gateway.server.keys import STATE
from tests.conftest import GatewayFactory, RunningGateway, model_entry
from tests.factories import assistant, calls, system, user
from tests.fakes.three_wires import ThreeWires, wire_models
from tests.server.browser import chromium
from tests.telemetry.promtext import scrape

STABLE = "Rule: answer in English and cite the file you read. " * 40  # ~2,100 characters
TURNS = 4
KEY = "prefix-client-key-0123"
INSPECTOR = {"ui": True, "capture_bodies": True, "api_keys": [KEY],
             "telemetry": {"context_report": True}}


def note(turn: int) -> str:
    return f"Progress note: {turn} of {TURNS} steps done, {turn * 7} files read."


@pytest.fixture
async def upstream() -> AsyncIterator[ThreeWires]:
    async with ThreeWires() as up:
        yield up


@pytest.fixture
async def gw(gateway_factory: GatewayFactory, upstream: ThreeWires) -> RunningGateway:
    return await gateway_factory({"model_list": wire_models(upstream.base_url),
                                  "gateway": INSPECTOR})


async def run_session(gw: RunningGateway, wire: str, model: str, session: str, *,
                      volatile_first: bool) -> None:
    """TURNS turns of one agent session; the progress note sits before the stable rules in
    the system prompt (``volatile_first``) or at the end of the new user message."""
    history: list[dict[str, Any]] = []
    headers = {"x-session-id": session}
    for turn in range(TURNS):
        instructions = note(turn) + "\n" + STABLE if volatile_first else STABLE
        ask = f"step {turn}" + ("" if volatile_first else "\n" + note(turn))
        history.append({"role": "user", "content": ask})
        if wire == "anthropic":
            async with anthropic.AsyncAnthropic(base_url=gw.root, api_key=KEY,
                                                max_retries=0) as a:
                await a.messages.create(model=model, max_tokens=50, system=instructions,
                                        messages=history,  # type: ignore[arg-type]
                                        extra_headers=headers)
        else:
            async with openai.AsyncOpenAI(base_url=gw.base_url, api_key=KEY,
                                          max_retries=0) as c:
                if wire == "chat":
                    await c.chat.completions.create(
                        model=model, messages=[system(instructions), *history],  # type: ignore[list-item]
                        extra_headers=headers)
                else:
                    await c.responses.create(model=model, instructions=instructions,
                                             input=history,  # type: ignore[arg-type]
                                             extra_headers=headers)
        history.append({"role": "assistant", "content": "hello there"})


async def inspector_prefixes(gw: RunningGateway, session: str) -> list[dict[str, Any]]:
    async with aiohttp.ClientSession() as s, s.get(
            f"{gw.root}/ui/api/requests?session={session}",
            headers={"Authorization": f"Bearer {KEY}"}) as r:
        rows = (await r.json())["requests"]
    return [row["prefix"] for row in reversed(rows)]  # oldest first


@pytest.mark.parametrize(("wire", "model"), [("chat", "chat"), ("responses", "resp"),
                                             ("anthropic", "claude")])
async def test_a_volatile_note_early_breaks_every_turn_and_at_the_end_it_does_not(
    gw: RunningGateway, wire: str, model: str, caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="gateway.access")
    before = await scrape(gw.root)
    await run_session(gw, wire, model, f"early-{wire}", volatile_first=True)
    mid = await scrape(gw.root)
    grew = mid.total("gateway_prefix_turns_total", model=model, cause="system") - before.total(
        "gateway_prefix_turns_total", model=model, cause="system")
    assert grew == TURNS - 1  # every turn after the first
    lost = mid.total("gateway_prefix_lost_tokens_total", model=model, cause="system")
    assert lost >= (TURNS - 1) * len(STABLE) // 4  # the stable rules left the prefix each time
    early = await inspector_prefixes(gw, f"early-{wire}")
    assert [p["cause"] for p in early] == ["first"] + ["system"] * (TURNS - 1)
    assert all(p["lost_tokens"] > len(STABLE) // 4 for p in early[1:])

    await run_session(gw, wire, model, f"late-{wire}", volatile_first=False)
    after = await scrape(gw.root)
    late = await inspector_prefixes(gw, f"late-{wire}")
    assert [p["cause"] for p in late] == ["first"] + ["appended"] * (TURNS - 1)
    assert after.total("gateway_prefix_turns_total", model=model, cause="system") == \
        mid.total("gateway_prefix_turns_total", model=model, cause="system")
    lines = [r.access for r in caplog.records  # type: ignore[attr-defined]
             if r.name == "gateway.access" and "prefix" in getattr(r, "access", {})]
    assert [line["prefix"] for line in lines] == (
        ["first"] + ["system"] * (TURNS - 1) + ["first"] + ["appended"] * (TURNS - 1))


async def test_a_changed_message_is_located_and_shown_side_by_side(
    gw: RunningGateway,
) -> None:
    async with openai.AsyncOpenAI(base_url=gw.base_url, api_key=KEY, max_retries=0) as c:
        first = [system(STABLE), user("read a.py"), assistant("done"), user("now b.py")]
        await c.chat.completions.create(model="chat", messages=first,  # type: ignore[arg-type]
                                        extra_headers={"x-session-id": "edited"})
        edited = [system(STABLE), user("read a.py please"), assistant("done"),
                  user("now b.py"), assistant("ok"), user("and c.py")]
        await c.chat.completions.create(model="chat", messages=edited,  # type: ignore[arg-type]
                                        extra_headers={"x-session-id": "edited"})
    broke = (await inspector_prefixes(gw, "edited"))[-1]
    assert broke["cause"] == "message" and broke["index"] == 1 and broke["field"] == "content"
    assert (broke["before"], broke["after"]) == ("read a.py", "read a.py please")
    assert 0 < broke["lost_tokens"] < len(STABLE) // 4  # the system prompt stayed cached


async def test_the_gateways_repairs_keep_the_prefix(gateway_factory: GatewayFactory) -> None:
    """A client resending a broken history (a tool call without its result) gets the same
    repair every turn: what the upstream receives only grows."""
    async with Referee(rules="openai") as ref:
        gw = await gateway_factory({"model_list": [model_entry("demo", ref.base_url)],
                                    "gateway": INSPECTOR})
        history = [system(STABLE), user("look it up"), calls("call_1"), user("go on")]
        async with openai.AsyncOpenAI(base_url=gw.base_url, api_key=KEY, max_retries=0) as c:
            for turn in range(3):
                raw = await c.chat.completions.with_raw_response.create(
                    model="demo", messages=history,  # type: ignore[arg-type]
                    extra_headers={"x-session-id": "repaired"})
                assert raw.headers["x-gateway-repairs"]  # the gateway did repair it
                history = [*history, assistant(f"answer {turn}"), user(f"next {turn}")]
        causes = [p["cause"] for p in await inspector_prefixes(gw, "repaired")]
        assert causes == ["first", "appended", "appended"]
        metrics = await scrape(gw.root)
        assert metrics.total("gateway_prefix_turns_total", cause="gateway") == 0


async def session_view(gw: RunningGateway, session: str) -> dict[str, Any]:
    async with aiohttp.ClientSession() as s, s.get(
            f"{gw.root}/ui/api/sessions/{session}",
            headers={"Authorization": f"Bearer {KEY}"}) as r:
        found: dict[str, Any] = await r.json()
        return found


async def test_advice_in_the_inspector_and_the_cli(
    gw: RunningGateway, tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    await run_session(gw, "chat", "chat", "advise-early", volatile_first=True)
    await run_session(gw, "chat", "chat", "advise-late", volatile_first=False)
    early = (await session_view(gw, "advise-early"))["cache"]
    assert early["causes"] == {"first": 1, "system": TURNS - 1}
    (tip,) = early["advice"]
    assert "system prompt changed on 3 of 3 later turns" in tip
    assert "Move the part that changes" in tip and "Progress note" in tip  # where it differs
    late = (await session_view(gw, "advise-late"))["cache"]
    assert late["causes"] == {"first": 1, "appended": TURNS - 1}
    assert late["advice"] == ["Every turn kept the previous prompt as its prefix: nothing to "
                              "move."]
    inspector = gw.app[STATE].telemetry.inspector
    assert inspector is not None
    await inspector.flush()
    config = tmp_path / "advice.yaml"
    config.write_text(yaml.safe_dump({"sessions": {"data_dir": gw.config.sessions.data_dir},
                                      "gateway": {"ui": True}}))
    assert main(["cache-advice", "--config", str(config), "--session", "advise-early"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("session advise-early: 4 turns (first 1, system 3); about ")
    assert "- The system prompt changed on 3 of 3 later turns" in out
    assert main(["cache-advice", "--config", str(config), "--session", "advise-late",
                 "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["causes"] == {"first": 1, "appended": 3}
    assert main(["cache-advice", "--config", str(config), "--session", "nope"]) != 0


@pytest.mark.slow
async def test_the_session_page_shows_the_breaks_side_by_side(gw: RunningGateway) -> None:
    await run_session(gw, "chat", "chat", "browse-early", volatile_first=True)
    async with chromium() as browser:
        context = await browser.new_context(
            http_credentials={"username": "me", "password": KEY})
        page = await context.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        await page.goto(gw.root + "/ui/#/session/browse-early")
        rows = page.locator("#prefix tbody tr")
        await expect(rows).to_have_count(TURNS)
        texts = await rows.all_inner_texts()
        assert "first" in texts[0] and all("system" in t for t in texts[1:])
        assert note(0) in texts[1] and note(1) in texts[1]  # before and after, side by side
        assert "Move the part that changes" in await page.locator("#cache-advice").inner_text()
        assert not errors, errors
        await context.close()
