"""The shipped ``configs/gateway.yaml`` as ``make run`` serves it (the gateway in front of
the referee, a strict chat-only upstream): the README's Responses example works, translated
to Chat Completions, and so does continuing its answer with ``previous_response_id``."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import openai
import pytest
import yaml

from gateway.referee import Referee
from gateway.server.wire_routes import RESPONSE_STATE
from tests.conftest import GatewayFactory, RunningGateway

SHIPPED = Path(__file__).resolve().parents[2] / "configs" / "gateway.yaml"


@pytest.fixture
async def referee() -> AsyncIterator[Referee]:
    async with Referee(rules="strict") as ref:  # `gateway referee`'s default rules
        yield ref


@pytest.fixture
async def demo(gateway_factory: GatewayFactory, referee: Referee,
               tmp_path: Path) -> RunningGateway:
    raw: dict[str, Any] = yaml.safe_load(SHIPPED.read_text())
    for entry in raw["model_list"]:  # the referee's port is this test's, not 4001
        entry["litellm_params"]["api_base"] = referee.base_url
    raw["sessions"]["data_dir"] = str(tmp_path / "data")
    return await gateway_factory(raw)


async def test_the_readme_responses_example_works_on_the_demo_config(
        demo: RunningGateway, referee: Referee) -> None:
    items: list[Any] = [
        {"role": "user", "content": "read the config"},
        {"type": "function_call", "call_id": "call_1", "name": "read_file",
         "arguments": "{}"},
        {"type": "function_call_output", "call_id": "call_1", "output": "port: 4000"},
    ]
    client = openai.AsyncOpenAI(base_url=demo.base_url, api_key="k", max_retries=0)
    async with client as c:
        answer = await c.responses.create(model="demo", input=items)
        assert answer.status == "completed"
        assert answer.output_text.startswith("referee: accepted 3 messages")
        async with c.responses.stream(model="demo", input="and streamed?") as stream:
            streamed = await stream.get_final_response()
        assert streamed.output_text.startswith("referee: accepted")
        await demo.app[RESPONSE_STATE].flush()
        follow_up = await c.responses.create(model="demo", input="thanks",
                                             previous_response_id=answer.id)
    assert follow_up.output_text.startswith("referee: accepted 5 messages")
    assert [r.path for r in referee.requests] == ["/v1/chat/completions"] * 3
