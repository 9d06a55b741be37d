"""A Vertex AI deployment signing in with a service account (``vertex_credentials``), end
to end: the openai SDK -> gateway -> litellm -> Google's OAuth token exchange (a local token
endpoint, the account's own ``token_uri``) -> a local generateContent API that takes the
token it issued. The cloud SDKs LiteLLM signs in with (google-auth, azure-identity) are the
gateway's own dependencies: a config that names such credentials is served, not answered
with "No module named ..."."""

from __future__ import annotations

import json
import urllib.parse
from collections.abc import AsyncIterator
from typing import Any

import openai
import pytest
from aiohttp import web
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from tests.conftest import GatewayFactory
from tests.fakes.gemini_server import FakeGemini
from tests.providers.e2e_litellm import IGNORE_SCHEMA_WARNINGS

pytestmark = IGNORE_SCHEMA_WARNINGS
TOKEN = "ya29.local-token-0123456789"


@pytest.fixture
async def token_endpoint(unused_tcp_port: int) -> AsyncIterator[tuple[str, list[dict[str, str]]]]:
    """Google's OAuth 2.0 token endpoint: a signed JWT assertion in, an access token out."""
    asked: list[dict[str, str]] = []

    async def token(request: web.Request) -> web.Response:
        form = dict(urllib.parse.parse_qsl((await request.read()).decode()))
        asked.append(form)
        if form.get("grant_type") != "urn:ietf:params:oauth:grant-type:jwt-bearer":
            return web.json_response({"error": "unsupported_grant_type"}, status=400)
        return web.json_response({"access_token": TOKEN, "expires_in": 3600,
                                  "token_type": "Bearer"})

    app = web.Application()
    app.router.add_post("/token", token)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", unused_tcp_port).start()
    try:
        yield f"http://127.0.0.1:{unused_tcp_port}/token", asked
    finally:
        await runner.cleanup()


def _service_account(token_uri: str) -> str:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                            serialization.NoEncryption()).decode()
    return json.dumps({
        "type": "service_account", "project_id": "my-project", "private_key_id": "k1",
        "private_key": pem, "client_email": "gateway@my-project.iam.gserviceaccount.com",
        "client_id": "1", "token_uri": token_uri})


async def test_a_vertex_service_account_signs_in_and_is_served(
        gateway_factory: GatewayFactory,
        token_endpoint: tuple[str, list[dict[str, str]]]) -> None:
    uri, asked = token_endpoint
    async with FakeGemini() as fake:
        gw = await gateway_factory({"model_list": [{"model_name": "gemini", "litellm_params": {
            "model": "vertex_ai/gemini-2.0-flash", "vertex_project": "my-project",
            "vertex_location": "us-central1", "vertex_credentials": _service_account(uri),
            "api_base": fake.base_url}}]})
        async with openai.AsyncOpenAI(base_url=gw.base_url, api_key="k",
                                      max_retries=0) as client:
            answer = await client.chat.completions.create(
                model="gemini", messages=[{"role": "user", "content": "hi"}])
        assert answer.choices[0].message.content == "you said: hi"
        sent: Any = fake.requests[-1]
        assert sent.headers["authorization"] == f"Bearer {TOKEN}"
        assert asked and asked[0]["assertion"].count(".") == 2  # (a signed JWT)
