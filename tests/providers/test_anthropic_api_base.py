"""An ``anthropic/`` model whose ``api_base`` ends in ``/v1`` (as many configs write an
Anthropic-compatible endpoint) is reached on every path: a chat client through LiteLLM
(which appended ``/v1/messages`` to it: ``/v1/v1/messages``, a 404 on every request and on
every compaction's summary call) and a Messages client natively. Real gateway, the real SDKs,
the fake Anthropic API."""

from __future__ import annotations

import anthropic
import openai
import pytest

from tests.conftest import GatewayFactory
from tests.fakes.anthropic_server import FakeAnthropic

KEY = "sk-ant-api-base-test"

pytestmark = pytest.mark.filterwarnings("ignore:.*using the `ReadOnly` qualifier:UserWarning")


@pytest.mark.parametrize("suffix", ["", "/v1", "/v1/", "/v1/messages"])
async def test_every_way_of_writing_the_base_reaches_the_messages_endpoint(
    gateway_factory: GatewayFactory, suffix: str,
) -> None:
    async with FakeAnthropic(api_key=KEY) as fake:
        gw = await gateway_factory({"model_list": [{"model_name": "claude", "litellm_params": {
            "model": "anthropic/claude-sonnet-4-5", "api_base": fake.base_url + suffix,
            "api_key": KEY}}]})
        async with openai.AsyncOpenAI(base_url=gw.base_url, api_key="k", max_retries=0) as c:
            chat = await c.chat.completions.create(
                model="claude", messages=[{"role": "user", "content": "hi"}], max_tokens=20)
        async with anthropic.AsyncAnthropic(base_url=gw.root, api_key="k", max_retries=0) as a:
            message = await a.messages.create(
                model="claude", max_tokens=20, messages=[{"role": "user", "content": "hi"}])
    assert chat.choices[0].message.content
    assert message.content
    assert {r.path for r in fake.requests} == {"/v1/messages"}
