"""The inspector as a person uses it: open /ui in a real browser, click through to the
repaired request and see the synthesized tool result in the before/after diff."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import openai
import pytest
from playwright.async_api import expect

from gateway.projection.exchanges import SYNTHETIC_TOOL_RESULT_TEXT
from gateway.referee import Referee
from tests.conftest import GatewayFactory, model_entry
from tests.factories import calls, tool, user
from tests.server.browser import chromium

KEY = "browser-client-key-42"
SCREENSHOT = Path(__file__).resolve().parents[2] / "docs" / "inspector.png"
BROKEN = [user("list the files"), calls("call_ls"), user("never mind, say hi")]

pytestmark = pytest.mark.slow


async def test_inspector_shows_the_repair_in_a_browser(
    gateway_factory: GatewayFactory, tmp_path: Path
) -> None:
    async with Referee(rules="strict") as ref:
        gw = await gateway_factory({
            "model_list": [model_entry("demo", ref.base_url)],
            "gateway": {"api_keys": [KEY], "ui": True, "capture_bodies": True},
        })
        async with openai.AsyncOpenAI(base_url=gw.base_url, api_key=KEY, max_retries=0) as c:
            await c.chat.completions.create(model="demo", messages=[user("hello")])
            raw = await c.chat.completions.with_raw_response.create(
                model="demo", messages=BROKEN,  # type: ignore[arg-type]
                extra_headers={"x-session-id": "browser-session"})
            await c.chat.completions.create(model="demo", messages=[user("a"), tool("ghost")])
        request_id = raw.headers["x-request-id"]
        async with chromium() as browser:
            context = await browser.new_context(
                http_credentials={"username": "me", "password": KEY},
                viewport={"width": 1280, "height": 900})
            page = await context.new_page()
            errors: list[str] = []
            page.on("pageerror", lambda exc: errors.append(str(exc)))
            await page.goto(gw.root + "/ui/")
            rows = page.locator("#requests tbody tr")
            await rows.first.wait_for()
            assert await rows.count() == 3
            # Filter to the requests that had a result synthesized: only ours is left.
            await page.select_option("select[name=kind]", "tool_result_synthesized")
            await expect(rows).to_have_count(1)
            await page.click(f"a.request-link:text('{request_id}')")
            diff = page.locator("#diff")
            await diff.wait_for()
            added = diff.locator(".cell.added[data-side=provider]")
            assert await added.count() == 1
            text = await added.inner_text()
            assert "tool" in text.lower() and "call_ls" in text
            assert SYNTHETIC_TOOL_RESULT_TEXT in text
            assert "added by the gateway" in text
            # Every message the client sent is on the left, unchanged, next to its copy.
            assert await diff.locator(".cell.same[data-side=client]").count() == 3
            anomalies = await page.locator("#anomalies").inner_text()
            assert "tool_result_synthesized" in anomalies
            attempts = await page.locator("#attempts tbody tr").all_inner_texts()
            assert len(attempts) == 1 and "ok" in attempts[0]
            shot = tmp_path / "inspector.png"
            await page.screenshot(path=str(shot), full_page=True)
            assert shot.stat().st_size > 10_000
            if os.environ.get("GATEWAY_UPDATE_SCREENSHOT"):
                SCREENSHOT.parent.mkdir(exist_ok=True)
                shutil.copyfile(shot, SCREENSHOT)
            # The session page lists the request and links the archive.
            await page.click("a:text('browser-session')")
            await page.locator("#archive").wait_for()
            assert request_id in await page.locator("#requests").inner_text()
            assert not errors, errors
            await context.close()
