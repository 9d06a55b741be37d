"""A Chat Completions upstream with one provider's quirk on top of OpenAI's rules.

The referee (gateway.referee) enforces OpenAI's rules and the strict providers' role and
pairing rules. Some refusals are one provider's own: a relay that takes no ``developer``
role, OpenAI's limits on a tool call id's length and emptiness, vLLM parsing the arguments
of every call in the history, Anthropic (behind a LiteLLM proxy) refusing a prefill that
ends in whitespace, Mistral taking only an assistant turn after tool results.
:class:`PickyChat` checks its quirks first, each answering with the provider's real error
body, then the referee's OpenAI rules, and answers an accepted request with a
``chat.completion``. Every request body is recorded.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from itertools import pairwise
from types import TracebackType
from typing import Any

from aiohttp import web

from gateway.referee import completions
from gateway.referee.rules import check

# A quirk: the refusal (status, JSON body) for a request body, or None when it takes it.
Quirk = Callable[[dict[str, Any]], tuple[int, dict[str, Any]] | None]


def _messages(body: dict[str, Any]) -> list[dict[str, Any]]:
    return [m for m in body.get("messages", []) if isinstance(m, dict)]


def _openai_error(message: str, param: str | None, code: str | None,
                  kind: str = "invalid_request_error") -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


def no_developer_role_new_api(body: dict[str, Any]) -> tuple[int, dict[str, Any]] | None:
    """new-api / one-api relays in front of providers without the role (new-api #5330)."""
    for i, message in enumerate(_messages(body)):
        if message.get("role") == "developer":
            return 400, {"error": {
                "message": f"invalid parameter 'messages[{i}].role': invalid role 'developer', "
                           "must be one of: system, user, assistant, tool",
                "type": "gateway_error", "param": "", "code": "400002"}}
    return None


def no_developer_role_deepseek(body: dict[str, Any]) -> tuple[int, dict[str, Any]] | None:
    """DeepSeek's serde deserialization of the roles it knows."""
    for i, message in enumerate(_messages(body)):
        if message.get("role") == "developer":
            return 400, _openai_error(
                "Failed to deserialize the JSON body into the target type: "
                f"messages[{i}].role: unknown variant `developer`, expected one of `system`, "
                "`user`, `assistant`, `tool`, `latest_reminder` at line 1 column 60",
                None, "invalid_request_error")
    return None


def openai_call_id_limits(body: dict[str, Any]) -> tuple[int, dict[str, Any]] | None:
    """OpenAI's length limits on a history's tool call ids (1 to 40 characters)."""
    for i, message in enumerate(_messages(body)):
        calls = message.get("tool_calls")
        for k, tool_call in enumerate(calls if isinstance(calls, list) else []):
            cid = tool_call.get("id") if isinstance(tool_call, dict) else None
            if not isinstance(cid, str):
                continue
            param = f"messages[{i}].tool_calls[{k}].id"
            if not cid:
                return 400, _openai_error(
                    f"Invalid '{param}': empty string. Expected a string with minimum length "
                    "1, but got an empty string instead.", param, "empty_string")
            if len(cid) > 40:
                return 400, _openai_error(
                    f"Invalid '{param}': string too long. Expected a string with maximum "
                    f"length 40, but got a string with length {len(cid)} instead.",
                    param, "string_above_max_length")
    return None


def vllm_json_arguments(body: dict[str, Any]) -> tuple[int, dict[str, Any]] | None:
    """vLLM's chat-template preprocessing: ``json.loads`` of every call's arguments."""
    for message in _messages(body):
        calls = message.get("tool_calls")
        for tool_call in calls if isinstance(calls, list) else []:
            function = tool_call.get("function") if isinstance(tool_call, dict) else None
            arguments = function.get("arguments") if isinstance(function, dict) else None
            if not isinstance(arguments, str) or not arguments:
                continue
            try:
                json.loads(arguments)
            except ValueError as err:
                return 400, {"object": "error", "message": str(err),
                             "type": "BadRequestError", "param": None, "code": 400}
    return None


def anthropic_trailing_whitespace(body: dict[str, Any]) -> tuple[int, dict[str, Any]] | None:
    """Anthropic behind a LiteLLM proxy: a final assistant turn (a prefill) must not end in
    whitespace; the proxy wraps Anthropic's error in OpenAI's shape."""
    messages = _messages(body)
    last = messages[-1] if messages else {}
    content = last.get("content")
    texts = [content] if isinstance(content, str) else [
        p.get("text") for p in content if isinstance(p, dict) and p.get("type") == "text"
    ] if isinstance(content, list) else []
    if last.get("role") != "assistant" or not texts or not isinstance(texts[-1], str) or (
            texts[-1] == texts[-1].rstrip()):
        return None
    inner = json.dumps({"type": "error", "error": {
        "type": "invalid_request_error",
        "message": "messages: final assistant content cannot end with trailing whitespace"}})
    return 400, {"error": {
        "message": f"litellm.BadRequestError: AnthropicException - {inner}. Received Model "
                   "Group=claude\nAvailable Model Group Fallbacks=None",
        "type": None, "param": None, "code": "400"}}


def mistral_message_order(body: dict[str, Any]) -> tuple[int, dict[str, Any]] | None:
    """Mistral's API: after a tool result, only more results or an assistant turn."""
    messages = _messages(body)
    for before, message in pairwise(messages):
        role = message.get("role")
        if before.get("role") == "tool" and role not in ("tool", "assistant"):
            return 400, {"object": "error",
                         "message": f"Unexpected role '{role}' after role 'tool'",
                         "type": "invalid_request_message_order", "param": None,
                         "code": "3230"}
    return None


class PickyChat:
    """The upstream on 127.0.0.1 (random port) for the length of an ``async with``:
    ``base_url`` ends in ``/v1``, ``bodies`` lists the parsed request bodies and
    ``statuses`` what each got."""

    def __init__(self, quirks: Sequence[Quirk]) -> None:
        self.quirks = tuple(quirks)
        self.bodies: list[dict[str, Any]] = []
        self.statuses: list[int] = []
        self.base_url = ""
        self._runner: web.AppRunner | None = None

    async def _chat(self, request: web.Request) -> web.Response:
        body = json.loads(await request.read())
        self.bodies.append(body)
        for quirk in self.quirks:
            refused = quirk(body)
            if refused is not None:
                self.statuses.append(refused[0])
                return web.json_response(refused[1], status=refused[0])
        violation = check(body, "openai", "openai")
        if violation is not None:
            self.statuses.append(violation.status)
            return web.Response(status=violation.status, body=violation.body,
                                content_type="application/json")
        self.statuses.append(200)
        answer = completions.decide(body)
        return web.json_response(
            completions.completion(body, answer, completions.new_completion_id()))

    async def __aenter__(self) -> PickyChat:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._chat)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        host, port = self._runner.addresses[0][:2]
        self.base_url = f"http://{host}:{port}/v1"
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None,
                        exc: BaseException | None, tb: TracebackType | None) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
