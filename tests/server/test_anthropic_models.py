"""``GET /v1/models`` for an Anthropic client (``anthropic-version`` sent) carries the fields
of Anthropic's model list next to the OpenAI ones; OpenAI clients get the list unchanged."""

from __future__ import annotations

import aiohttp

from tests.conftest import GatewayFactory, model_entry


async def test_models_for_anthropic_and_openai_clients(gateway_factory: GatewayFactory) -> None:
    gw = await gateway_factory({"model_list": [model_entry("a", "http://127.0.0.1:9/v1"),
                                               model_entry("b", "http://127.0.0.1:9/v1")]})
    version = {"anthropic-version": "2023-06-01"}
    async with aiohttp.ClientSession() as http:
        async with http.get(f"{gw.base_url}/models") as plain:
            openai_list = await plain.json()
        async with http.get(f"{gw.base_url}/models", headers=version) as listed:
            anthropic_list = await listed.json()
        async with http.get(f"{gw.base_url}/models/b", headers=version) as one:
            card = await one.json()
    assert "has_more" not in openai_list
    assert all("type" not in m for m in openai_list["data"])
    assert [m["id"] for m in anthropic_list["data"]] == ["a", "b"]
    assert anthropic_list["has_more"] is False
    assert (anthropic_list["first_id"], anthropic_list["last_id"]) == ("a", "b")
    first = anthropic_list["data"][0]
    assert (first["type"], first["display_name"], first["object"]) == ("model", "a", "model")
    assert first["created_at"] == "1970-01-01T00:00:00Z"
    assert (card["id"], card["type"], card["display_name"]) == ("b", "model", "b")
