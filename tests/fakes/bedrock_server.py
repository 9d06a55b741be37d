"""A real aiohttp server speaking Amazon Bedrock's Converse API (non-streaming), as a
deployment reached through litellm with ``litellm_params.api_base``.

It answers ``POST /model/{modelId}/converse`` with Bedrock's own response shape, refuses a
request that is not SigV4-signed (``Authorization: AWS4-HMAC-SHA256 Credential=...``) as
Bedrock does, names itself in the answer (``from bedrock: <last user text>``) and can be
made to fail (``mode = "dead"``: Bedrock's ``500 InternalServerException``).

Histories are validated as Converse does, with its own ``400 ValidationException`` words:
the first message must be the user's, roles must alternate, text blocks must not be blank,
and a turn's toolResult blocks must answer exactly the toolUse blocks of the turn before.
::

    async with FakeBedrock() as bedrock:
        bedrock.base_url, bedrock.hits, bedrock.requests[0].headers["authorization"]
"""

from __future__ import annotations

from typing import Any
from urllib.parse import unquote

from aiohttp import web

from tests.fakes.native_base import FakeServer, RequestRefused, rough_tokens

START_WITH_USER = (
    "A conversation must start with a user message. Try again with a conversation that "
    "starts with a user message."
)
ALTERNATE = (
    "A conversation must alternate between user and assistant roles. Make sure the "
    "conversation alternates between user and assistant roles and try again."
)
BLANK_TEXT = (
    "The text field in the ContentBlock object at messages.{i}.content.{j} is blank. "
    "Add text to the text field, and try again."
)
TOO_MANY_RESULTS = (
    "The number of toolResult blocks at messages.{i}.content exceeds the number of "
    "toolUse blocks of previous turn."
)
MISSING_RESULTS = (
    "Expected toolResult blocks at messages.{i}.content for the following Ids: {ids}"
)


def _ids(message: dict[str, Any], kind: str, key: str) -> list[str]:
    return [str(b[kind].get(key)) for b in message.get("content") or []
            if isinstance(b, dict) and isinstance(b.get(kind), dict)]


def validate_converse(body: dict[str, Any]) -> None:
    """Refuse a Converse history as Bedrock does (RequestRefused carries its words)."""
    messages = [m for m in body.get("messages") or [] if isinstance(m, dict)]
    if messages and messages[0].get("role") != "user":
        raise RequestRefused(400, START_WITH_USER)
    for i, message in enumerate(messages):
        if i and message.get("role") == messages[i - 1].get("role"):
            raise RequestRefused(400, ALTERNATE)
        for j, block in enumerate(message.get("content") or []):
            if isinstance(block, dict) and "text" in block and not str(block["text"]).strip():
                raise RequestRefused(400, BLANK_TEXT.format(i=i, j=j))
        uses = _ids(messages[i - 1], "toolUse", "toolUseId") if i else []
        results = _ids(message, "toolResult", "toolUseId")
        if len(results) > len(uses):
            raise RequestRefused(400, TOO_MANY_RESULTS.format(i=i))
        missing = [u for u in uses if u not in results]
        if missing:
            raise RequestRefused(400, MISSING_RESULTS.format(i=i, ids=", ".join(missing)))


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
        if self.mode == "garbled":  # (a 200 that is no Converse answer: a proxy's, say)
            return web.json_response({"unexpected": True}, headers=headers)
        body = recorded.body if isinstance(recorded.body, dict) else {}
        try:
            validate_converse(body)
        except RequestRefused as exc:
            return web.json_response({"message": exc.message}, status=exc.status, headers={
                **headers, "x-amzn-ErrorType": "ValidationException"})
        model = unquote(request.match_info["model_id"])
        tokens = rough_tokens(body.get("messages"))
        return web.json_response({
            "output": {"message": {"role": "assistant", "content": [
                {"text": f"from bedrock {model}: {_last_user_text(body)}"}]}},
            "stopReason": "end_turn",
            "usage": {"inputTokens": tokens, "outputTokens": 4, "totalTokens": tokens + 4},
            "metrics": {"latencyMs": 1},
        }, headers=headers)
