"""The inspector as a platform team uses it, in a real browser (Debian's Chromium through
Playwright): hostile message text (HTML, script, event handlers) in every place a team can
put it is shown as text and never runs; no key of any kind reaches the page; a reject team's
refusal is shown to the platform team with its rule, and not to another team."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import anthropic
import openai
import pytest
from playwright.async_api import Page, expect

from tests.conftest import GatewayFactory, RunningGateway
from tests.factories import assistant, system, tool, tool_call, user
from tests.fakes.three_wires import ThreeWires, wire_models
from tests.server.browser import chromium

pytestmark = pytest.mark.slow

KEYS = {"platform": "key-platform-browser-0001", "team-a": "key-team-a-browser-0002",
        "team-b": "key-team-b-browser-0003"}
MASTER_KEY = "sk-master-browser-key-0004"
UPSTREAM_SECRET = "sk-upstream-browser-secret-0005"
IMG = '<img src=x onerror="window.__pwned=1">'
SCRIPT = "<script>window.__pwned=2</script>"
HANDLER = '"><svg onload="window.__pwned=3">'
SESSION = 'sess"><img src=x onerror="window.__pwned=4">'


@pytest.fixture
async def upstream() -> AsyncIterator[ThreeWires]:
    async with ThreeWires() as up:
        yield up


@pytest.fixture
async def gw(gateway_factory: GatewayFactory, upstream: ThreeWires) -> RunningGateway:
    models = wire_models(upstream.base_url)
    for entry in models:
        entry["litellm_params"]["api_key"] = UPSTREAM_SECRET
    return await gateway_factory({
        "model_list": models,
        "gateway": {"api_keys": [{"key": k, "owner": o} for o, k in KEYS.items()],
                    "ui": True, "capture_bodies": True, "ui_admin_owners": ["platform"]},
        "general_settings": {"master_key": MASTER_KEY},
        "repair": {"owners": {"team-a": {"policy": "report"}, "team-b": {"policy": "reject"}}},
    })


async def hostile_traffic(gw: RunningGateway) -> dict[str, str]:
    """Team A (report) sends hostile text as content, tool call names, arguments and ids, in
    two turns of a session whose id is hostile too; team B (reject) sends a broken history
    that is refused. The request ids, by what they are."""
    ids: dict[str, str] = {}
    first: list[Any] = [system(f"rules {IMG}"), user(f"read {SCRIPT}"),
                        assistant(None, tool_calls=[tool_call(f"call_{HANDLER}", "read",
                                                              {"path": IMG})]),
                        tool(f"call_{HANDLER}", f"file: {HANDLER} {KEYS['team-b']}"),
                        tool("call_orphan", f"orphan {SCRIPT}"),
                        user(f"and {IMG}")]
    async with openai.AsyncOpenAI(base_url=gw.base_url, api_key=KEYS["team-a"], max_retries=0,
                                  default_headers={"x-session-id": SESSION}) as c:
        raw = await c.chat.completions.with_raw_response.create(model="chat", messages=first)
        ids["first"] = raw.headers["x-request-id"]
        assert raw.headers["x-gateway-would-repair"] == "orphan_tool_result_dropped=1"
        edited = [system(f"rules changed {SCRIPT}"), *first[1:], assistant("ok"),
                  user("next")]
        raw = await c.chat.completions.with_raw_response.create(model="chat", messages=edited)
        ids["second"] = raw.headers["x-request-id"]
    async with anthropic.AsyncAnthropic(base_url=gw.root, api_key=KEYS["team-b"],
                                        max_retries=0) as a:
        with pytest.raises(anthropic.BadRequestError) as info:
            await a.messages.create(model="claude", max_tokens=8, messages=[
                {"role": "user", "content": f"hi {IMG}"},
                {"role": "assistant", "content": "hello"},
                {"role": "user", "content": [{"type": "tool_result",
                                              "tool_use_id": f"toolu_{HANDLER}",
                                              "content": SCRIPT}]}])
        ids["rejected"] = info.value.response.headers["x-request-id"]
    return ids


async def watched_page(context: Any) -> tuple[Page, list[str]]:
    """A page recording script errors and dialogs (either means injected code ran)."""
    page = await context.new_page()
    problems: list[str] = []
    page.on("pageerror", lambda exc: problems.append(f"error: {exc}"))
    page.on("dialog", lambda dialog: problems.append(f"dialog: {dialog.message}"))
    return page, problems


async def assert_clean(page: Page, problems: list[str]) -> None:
    assert await page.evaluate("window.__pwned") is None
    assert await page.locator("#app img, #app script, #app svg").count() == 0
    assert not problems, problems
    html = await page.content()
    for secret in (*KEYS.values(), MASTER_KEY, UPSTREAM_SECRET):
        assert secret not in html, secret


async def test_hostile_text_is_shown_as_text_on_every_page(gw: RunningGateway) -> None:
    ids = await hostile_traffic(gw)
    async with chromium() as browser:
        context = await browser.new_context(
            http_credentials={"username": "platform", "password": KEYS["platform"]})
        page, problems = await watched_page(context)
        response = await page.goto(gw.root + "/ui/")
        assert response is not None
        assert "script-src 'self'" in response.headers["content-security-policy"]
        rows = page.locator("#requests tbody tr")
        await expect(rows).to_have_count(3)
        await assert_clean(page, problems)
        # The report team's request: the diff shows every hostile string literally.
        await page.goto(gw.root + f"/ui/#/request/{ids['first']}")
        diff = page.locator("#diff")
        await diff.wait_for()
        text = await diff.inner_text()
        for hostile in (IMG, SCRIPT, HANDLER):
            assert hostile in text
        assert "orphan_tool_result_dropped" in await page.locator("#would-repair").inner_text()
        assert KEYS["team-b"] not in text and "***" in text  # a pasted key, masked
        await assert_clean(page, problems)
        # The session page (hostile id): the system prompt change, both versions as text.
        await page.goto(gw.root + f"/ui/#/request/{ids['second']}")
        await page.locator("#diff").wait_for()
        link = page.locator("#app .fact a[href^='#/session/']")
        await link.click()
        prefix = page.locator("#prefix tbody tr")
        await expect(prefix).to_have_count(2)
        second = await prefix.nth(1).inner_text()
        assert "system" in second and SCRIPT in second
        assert SESSION in await page.locator("h1 code").inner_text()
        await assert_clean(page, problems)
        # The reject team's refusal: its rule, its owner, and the hostile ids as text.
        await page.goto(gw.root + f"/ui/#/request/{ids['rejected']}")
        violations = page.locator("#violations")
        await violations.wait_for()
        assert "orphan_tool_result_dropped" in await violations.inner_text()
        assert "team-b" in await page.locator(".facts").inner_text()
        await assert_clean(page, problems)
        await context.close()


async def test_another_team_opening_a_refusal_by_its_link_sees_nothing_of_it(
    gw: RunningGateway,
) -> None:
    ids = await hostile_traffic(gw)
    async with chromium() as browser:
        context = await browser.new_context(
            http_credentials={"username": "a", "password": KEYS["team-a"]})
        page, problems = await watched_page(context)
        await page.goto(gw.root + f"/ui/#/request/{ids['rejected']}")
        note = page.locator("#app p.note")
        await note.wait_for()
        assert "Could not load" in await note.inner_text()
        assert "team-b" not in await page.content()
        await page.goto(gw.root + "/ui/#/?owner=team-b")
        await page.locator("#requests, #app p.muted").first.wait_for()
        assert await page.locator("#requests tbody tr").count() == 0
        options = await page.locator("select[name=owner] option").all_inner_texts()
        assert options == ["all", "team-a"]  # other teams' names are not offered
        await assert_clean(page, problems)
        await context.close()


async def test_a_wrong_key_in_the_browser_gets_the_password_prompt_and_no_data(
    gw: RunningGateway,
) -> None:
    await hostile_traffic(gw)
    async with chromium() as browser:
        context = await browser.new_context(
            http_credentials={"username": "x", "password": KEYS["team-a"] + "-wrong"})
        page, _ = await watched_page(context)
        response = await page.goto(gw.root + "/ui/api/requests")
        assert response is not None and response.status == 401
        body = await page.content()
        assert "the inspector needs a client key" in body
        assert "team-a" not in body and KEYS["team-a"] not in body
        await context.close()


async def test_the_platform_team_sees_each_teams_cache_advice_on_a_shared_session_id(
        gw: RunningGateway) -> None:
    rules = "Rule: cite the file you read. " * 60
    for team, prompts in (("team-a", [rules, rules]), ("team-b", [rules, "Today: " + rules])):
        async with openai.AsyncOpenAI(base_url=gw.base_url, api_key=KEYS[team], max_retries=0,
                                      default_headers={"x-session-id": "shared"}) as c:
            history: list[Any] = [user("read a")]
            for prompt in prompts:
                await c.chat.completions.create(model="chat",
                                                messages=[system(prompt), *history])
                history += [assistant("done"), user("next")]
    async with chromium() as browser:
        context = await browser.new_context(
            http_credentials={"username": "platform", "password": KEYS["platform"]})
        page, problems = await watched_page(context)
        await page.goto(gw.root + "/ui/#/session/shared")
        headings = page.locator("#app h2", has_text="Prompt cache (")
        await expect(headings).to_have_count(2)
        texts = await headings.all_inner_texts()  # the most recent team's first
        assert "(team-b)" in texts[0] and "(team-a)" in texts[1]
        advice = page.locator("#app .cache-advice")
        await expect(advice).to_have_count(2)
        assert "changed on 1 of 1 later turns" in await advice.nth(0).inner_text()
        assert "Every turn kept" in await advice.nth(1).inner_text()
        await assert_clean(page, problems)
