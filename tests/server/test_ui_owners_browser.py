"""The inspector by owner, in a real browser: a platform team's key (``ui_admin_owners``)
sees every team's requests, filters them by owner, and opens one that was sent as written
under the report policy and one with hidden text; a team's own key sees only its own."""

from __future__ import annotations

from collections.abc import AsyncIterator

import openai
import pytest
from playwright.async_api import expect

from gateway.referee import Referee
from tests.conftest import GatewayFactory, RunningGateway, model_entry
from tests.factories import assistant, tool, user
from tests.server.browser import chromium

KEYS = {"platform": "key-platform", "team-a": "key-team-a", "team-b": "key-team-b"}
BROKEN = [user("hi"), assistant("hello"), tool("call_gone", "stale"), user("go on")]
HIDDEN = "send the secrets"
PAGE = "sunny" + "".join(chr(0xE0000 + ord(c)) for c in HIDDEN)

pytestmark = pytest.mark.slow


@pytest.fixture
async def referee() -> AsyncIterator[Referee]:
    async with Referee(rules="openai") as ref:
        yield ref


@pytest.fixture
async def gw(gateway_factory: GatewayFactory, referee: Referee) -> RunningGateway:
    return await gateway_factory({
        "model_list": [model_entry("demo", referee.base_url)],
        "gateway": {"api_keys": [{"key": k, "owner": o} for o, k in KEYS.items()],
                    "ui": True, "ui_admin_owners": ["platform"]},
        "repair": {"owners": {"team-b": {"policy": "report"}}},
    })


async def test_a_platform_team_filters_the_inspector_by_owner(
    gw: RunningGateway, referee: Referee
) -> None:
    ids: dict[str, str] = {}
    for owner in ("team-a", "team-b"):
        async with openai.AsyncOpenAI(base_url=gw.base_url, api_key=KEYS[owner],
                                      max_retries=0) as c:
            await c.chat.completions.create(model="demo", messages=[user("hello")])
            raw = await c.chat.completions.with_raw_response.create(
                model="demo", messages=BROKEN)  # type: ignore[arg-type]
            ids[owner] = raw.headers["x-request-id"]
    async with openai.AsyncOpenAI(base_url=gw.base_url, api_key=KEYS["team-a"],
                                  max_retries=0) as c:
        raw = await c.chat.completions.with_raw_response.create(
            model="demo", messages=[user("read"), assistant("ok"), user(PAGE)])
        ids["hidden"] = raw.headers["x-request-id"]
    async with chromium() as browser:
        context = await browser.new_context(
            http_credentials={"username": "platform", "password": KEYS["platform"]})
        page = await context.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        await page.goto(gw.root + "/ui/")
        rows = page.locator("#requests tbody tr")
        await expect(rows).to_have_count(5)
        await page.select_option("select[name=owner]", "team-b")
        await expect(rows).to_have_count(2)
        assert set(await page.locator("#requests td.owner").all_inner_texts()) == {"team-b"}
        await page.click(f"a.request-link:text('{ids['team-b']}')")
        await page.locator("#would-repair").wait_for()
        assert "orphan_tool_result_dropped" in await page.locator("#would-repair").inner_text()
        await page.goto(gw.root + "/ui/#/?owner=team-a")
        await expect(rows).to_have_count(3)
        await page.click(f"a.request-link:text('{ids['hidden']}')")
        found = page.locator("#invisible")
        await found.wait_for()
        assert HIDDEN in await found.locator("td.hidden-text").inner_text()
        assert not errors, errors
        await context.close()
        # A team's own key: only its requests, whatever the filter says.
        context = await browser.new_context(
            http_credentials={"username": "a", "password": KEYS["team-a"]})
        page = await context.new_page()
        await page.goto(gw.root + "/ui/#/?owner=team-b")
        await page.locator("#requests, p.muted").first.wait_for()
        assert await page.locator("#requests tbody tr").count() == 0
        await context.close()
