"""A real aiohttp server speaking Amazon Bedrock's Converse API (non-streaming), as a
deployment reached through litellm with ``litellm_params.api_base``.

It answers ``POST /model/{modelId}/converse`` with Bedrock's own response shape, refuses a
request that is not SigV4-signed (``Authorization: AWS4-HMAC-SHA256 Credential=...``) as
Bedrock does, names itself in the answer (``from bedrock: <last user text>``) and can be
made to fail (``mode = "dead"``: Bedrock's ``500 InternalServerException``)::

    async with FakeBedrock() as bedrock:
        bedrock.base_url, bedrock.hits, bedrock.requests[0].headers["authorization"]
"""

from __future__ import annotations

from typing import Any
from urllib.parse import unquote

from aiohttp import web

from tests.fakes.native_base import FakeServer, rough_tokens


def _last_user_text(body: dict[str, Any]) -> str:
    for message in reversed(body.get("messages") or []):
        if message.get("role") == "user":
            return " ".join(str(b.get("text", "")) for b in message.get("content") or []
                            if isinstance(b, dict) and "text" in b)
    return ""


class FakeBedrock(FakeServer):
    """Bedrock's Converse endpoint (see the module docstring)."""

    def __init__(self, *, mode: str = "ok") -> None:
        super().__init__()
        self.mode = mode

    @property
    def hits(self) -> int:
        """Converse requests received."""
        return len(self.requests)

    def _routes(self, app: web.Application) -> None:
        app.router.add_post("/model/{model_id}/converse", self._converse)

    async def _converse(self, request: web.Request) -> web.Response:
        recorded = await self.record(request)
        headers = {"x-amzn-RequestId": f"bedrock-req-{self.hits}"}
        if not recorded.headers.get("authorization", "").startswith(
                "AWS4-HMAC-SHA256 Credential="):
            return web.json_response({"message": "Missing Authentication Token"}, status=403,
                                     headers={**headers, "x-amzn-ErrorType":
                                              "MissingAuthenticationTokenException"})
        if self.mode == "dead":
            return web.json_response({"message": "The server encountered an internal error."},
                                     status=500, headers={**headers, "x-amzn-ErrorType":
                                                          "InternalServerException"})
        body = recorded.body if isinstance(recorded.body, dict) else {}
        model = unquote(request.match_info["model_id"])
        tokens = rough_tokens(body.get("messages"))
        return web.json_response({
            "output": {"message": {"role": "assistant", "content": [
                {"text": f"from bedrock {model}: {_last_user_text(body)}"}]}},
            "stopReason": "end_turn",
            "usage": {"inputTokens": tokens, "outputTokens": 4, "totalTokens": tokens + 4},
            "metrics": {"latencyMs": 1},
        }, headers=headers)
