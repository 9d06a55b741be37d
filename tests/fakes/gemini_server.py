"""A real aiohttp server speaking the Gemini API: POST ``.../models/{model}:generateContent``
and ``...:streamGenerateContent?alt=sse`` (any path prefix: ``/v1beta/models/...``, the bare
``/models/...`` litellm uses with a custom api_base, or a Vertex publisher path).

Requests are validated as the real API does (proto JSON: camelCase and snake_case field
names both accepted, unknown top-level fields refused) with the real error texts from
tests/data/provider-errors.jsonl, in the native envelope ``{"error":{code,message,status}}``.
Function-call pairing: a function call turn must follow a user turn or a function response
turn; a function response turn must follow a function call turn, with as many
functionResponse parts as the call turn had functionCall parts. Consecutive same-role turns
are accepted (the API takes them as sent).

Replies mirror the fake Anthropic server: ``you said: ...``, ``tool results: ...``,
``[images: N]``, or a functionCall of the first declared function when the last user text
contains "TOOL".

    async with FakeGemini() as f:
        f.base_url, f.requests, f.script(gemini_error(429, "Resource exhausted."))
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from itertools import count
from typing import Any

import orjson
from aiohttp import web

from tests.fakes.native_base import (
    Canned,
    FakeServer,
    MidStreamError,
    RequestRefused,
    decode_base64,
    rough_tokens,
    sniff_image,
)

PATH = re.compile(r"^(?:/[^/]+)*/models/(?P<model>[^/:]+):(?P<action>[A-Za-z]+)$")
STATUS_NAMES = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    429: "RESOURCE_EXHAUSTED",
    500: "INTERNAL",
    503: "UNAVAILABLE",
}
TOP_LEVEL_FIELDS = frozenset(
    {
        "contents",
        "systemInstruction",
        "tools",
        "toolConfig",
        "generationConfig",
        "safetySettings",
        "cachedContent",
        "labels",
        "model",
    }
)
DATA_FIELDS = (
    "text",
    "inlineData",
    "functionCall",
    "functionResponse",
    "fileData",
    "executableCode",
    "codeExecutionResult",
)
CALL_AFTER_USER = (
    "Please ensure that function call turn comes immediately after a user turn "
    "or after a function response turn."
)
RESPONSE_AFTER_CALL = (
    "Please ensure that function response turn comes immediately after a function call turn."
)
PART_COUNT = (
    "Please ensure that the number of function response parts is equal to the number "
    "of function call parts of the function call turn."
)
BAD_IMAGE = (
    "Unable to process input image. Please retry or report in "
    "https://developers.generativeai.google/guide/troubleshooting"
)
NO_IDENTITY = (
    "Method doesn't allow unregistered callers (callers without established "
    "identity). Please use API Key or other form of API consumer identity to call "
    "this API."
)


def gemini_error(
    code: int, message: str, status: str | None = None, headers: dict[str, str] | None = None
) -> Canned:
    """A native Gemini error answer (``{"error": {"code", "message", "status"}}``)."""
    body = {
        "error": {
            "code": code,
            "message": message,
            "status": status or STATUS_NAMES.get(code, "UNKNOWN"),
        }
    }
    return Canned(code, body, headers or {})


def _refusal(exc: RequestRefused) -> web.Response:
    return gemini_error(exc.status, exc.message, exc.kind or None).response()


def _snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def field(obj: Any, name: str) -> Any:
    """Read a proto JSON field by its camelCase name or its snake_case twin."""
    if not isinstance(obj, dict):
        return None
    value = obj.get(name)
    return value if value is not None else obj.get(_snake(name))


def _data_fields(part: dict[str, Any]) -> list[str]:
    found = []
    for name in DATA_FIELDS:
        value = field(part, name)
        if value is not None and value != "":
            found.append(name)
    return found


def _check_part(i: int, j: int, part: Any) -> None:
    where = f"contents[{i}].parts[{j}]"
    if not isinstance(part, dict) or not _data_fields(part):
        raise RequestRefused(
            400,
            f"* GenerateContentRequest.{where}.data: required oneof field "
            "'data' must have one initialized field\n",
        )
    inline = field(part, "inlineData")
    if inline is not None:
        raw = field(inline, "data")
        data = decode_base64(raw)
        if data is None:
            raise RequestRefused(
                400,
                f"Invalid value at '{where}.inline_data.data' (TYPE_BYTES), "
                f'Base64 decoding failed for "{str(raw)[:40]}"',
            )
        mime = str(field(inline, "mimeType") or "")
        if mime.startswith("image/") and sniff_image(data) is None:
            raise RequestRefused(400, BAD_IMAGE)


def _kind(content: dict[str, Any]) -> str:
    parts = field(content, "parts") or []
    if any(isinstance(p, dict) and field(p, "functionCall") is not None for p in parts):
        return "call"
    if any(isinstance(p, dict) and field(p, "functionResponse") is not None for p in parts):
        return "response"
    return "plain"


def _count_parts(content: dict[str, Any], name: str) -> int:
    return sum(
        1
        for p in field(content, "parts") or []
        if isinstance(p, dict) and field(p, name) is not None
    )


def _check_pairing(contents: list[dict[str, Any]]) -> None:
    for i, content in enumerate(contents):
        kind = _kind(content)
        previous = contents[i - 1] if i > 0 else None
        if kind == "call":
            if previous is None or (field(previous, "role") or "user") != "user":
                raise RequestRefused(400, CALL_AFTER_USER)
            following = contents[i + 1] if i + 1 < len(contents) else None
            responses = 0 if following is None else _count_parts(following, "functionResponse")
            if responses != _count_parts(content, "functionCall"):
                raise RequestRefused(400, PART_COUNT)
        elif kind == "response" and (previous is None or _kind(previous) != "call"):
            raise RequestRefused(400, RESPONSE_AFTER_CALL)


def validate_generate_request(body: Any) -> list[dict[str, Any]]:
    """Validate a generateContent body as the real API does; returns ``contents``.

    Raises RequestRefused with the native status and message on the first problem.
    """
    if not isinstance(body, dict):
        raise RequestRefused(400, "Invalid JSON payload received.")
    for name in body:
        camel = re.sub(r"_([a-z])", lambda m: m.group(1).upper(), name)
        if camel not in TOP_LEVEL_FIELDS:
            raise RequestRefused(
                400, f'Invalid JSON payload received. Unknown name "{name}": Cannot find field.'
            )
    contents = field(body, "contents")
    if not contents:
        raise RequestRefused(400, "* GenerateContentRequest.contents: contents is not specified\n")
    for i, content in enumerate(contents):
        role = field(content, "role")
        if role not in (None, "user", "model"):
            raise RequestRefused(400, "Please use a valid role: user, model.")
        parts = field(content, "parts")
        if not parts:
            raise RequestRefused(
                400,
                f"* GenerateContentRequest.contents[{i}].parts: "
                "contents.parts must not be empty.\n",
            )
        for j, part in enumerate(parts):
            _check_part(i, j, part)
    system = field(body, "systemInstruction")
    if system is not None:
        for j, part in enumerate(field(system, "parts") or []):
            if not isinstance(part, dict) or not _data_fields(part):
                raise RequestRefused(
                    400,
                    f"* GenerateContentRequest.system_instruction.parts[{j}]"
                    ".data: required oneof field 'data' must have one "
                    "initialized field\n",
                )
    _check_pairing(contents)
    return list(contents)


def _declarations(body: dict[str, Any]) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    for tool in field(body, "tools") or []:
        found.extend(d for d in field(tool, "functionDeclarations") or [] if isinstance(d, dict))
    return found


class FakeGemini(FakeServer):
    """The fake Gemini API. ``api_key`` (optional) is the only key accepted;
    ``context_window`` is the input token limit (4 bytes of JSON per token)."""

    def __init__(self, *, api_key: str | None = None, context_window: int = 1_048_576) -> None:
        super().__init__()
        self.api_key = api_key
        self.context_window = context_window
        self._ids = count(1)

    def _routes(self, app: web.Application) -> None:
        app.router.add_route("*", "/{tail:.*}", self._dispatch)

    async def _dispatch(self, request: web.Request) -> web.StreamResponse:
        recorded = await self.record(request)
        match = PATH.match(request.path)
        action = match.group("action") if match else ""
        if request.method != "POST" or action not in ("generateContent", "streamGenerateContent"):
            return _refusal(RequestRefused(404, f"Not found: {request.path}"))
        scripted = self.next_scripted()
        if isinstance(scripted, Canned):
            return scripted.response()
        assert match is not None
        try:
            self._check_key(recorded.headers, recorded.query)
            contents = validate_generate_request(recorded.body)
            prompt = rough_tokens(
                [
                    recorded.body.get("systemInstruction"),
                    recorded.body.get("system_instruction"),
                    contents,
                    field(recorded.body, "tools"),
                ]
            )
            if prompt > self.context_window:
                raise RequestRefused(
                    400,
                    f"The input token count ({prompt}) exceeds the maximum "
                    f"number of tokens allowed ({self.context_window}).",
                )
        except RequestRefused as exc:
            return _refusal(exc)
        parts, finish = self._reply(recorded.body, contents)
        chunks = list(self._chunks(match.group("model"), parts, finish, prompt))
        if action == "generateContent":
            return web.json_response(self._merge(chunks), dumps=lambda v: orjson.dumps(v).decode())
        failure = scripted if isinstance(scripted, MidStreamError) else None
        response = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await response.prepare(request)
        for n, chunk in enumerate(chunks):
            await response.write(b"data: " + orjson.dumps(chunk) + b"\r\n\r\n")
            if failure is not None and n == 0:
                error = {
                    "code": failure.code,
                    "message": failure.message,
                    "status": STATUS_NAMES.get(failure.code, "UNKNOWN"),
                }
                await response.write(b"data: " + orjson.dumps({"error": error}) + b"\r\n\r\n")
                break
        await response.write_eof()
        return response

    def _check_key(self, headers: dict[str, str], query: dict[str, str]) -> None:
        key = headers.get("x-goog-api-key") or query.get("key")
        if key is None and not headers.get("authorization", "").startswith("Bearer "):
            raise RequestRefused(403, NO_IDENTITY)
        if self.api_key is not None and key != self.api_key:
            raise RequestRefused(400, "API key not valid. Please pass a valid API key.")

    def _reply(self, body: dict[str, Any], contents: list[Any]) -> tuple[list[Any], str]:
        last = contents[-1] if (field(contents[-1], "role") or "user") == "user" else {}
        parts = [p for p in field(last, "parts") or [] if isinstance(p, dict)]
        text = " ".join(str(field(p, "text")) for p in parts if field(p, "text"))
        declarations = _declarations(body)
        mode = field(field(field(body, "toolConfig"), "functionCallingConfig"), "mode")
        if declarations and "TOOL" in text and mode != "NONE":
            call = {"name": declarations[0].get("name"), "args": {"query": text}}
            return [{"functionCall": call}], "STOP"
        pieces = []
        responses = [field(p, "functionResponse") for p in parts if field(p, "functionResponse")]
        if responses:
            pieces.append(
                "tool results: "
                + "; ".join(orjson.dumps(field(r, "response")).decode() for r in responses)
            )
        if text:
            pieces.append(f"you said: {text}")
        images = sum(
            1
            for p in parts
            if str(field(field(p, "inlineData"), "mimeType") or "").startswith("image/")
        )
        if images:
            pieces.append(f"[images: {images}]")
        words = " | ".join(pieces or ["ok"]).split(" ")
        limit = field(field(body, "generationConfig"), "maxOutputTokens")
        if isinstance(limit, int) and len(words) > limit:
            return [{"text": " ".join(words[:limit])}], "MAX_TOKENS"
        return [{"text": " ".join(words)}], "STOP"

    def _chunks(
        self, model: str, parts: list[Any], finish: str, prompt: int
    ) -> Iterator[dict[str, Any]]:
        response_id = f"resp_fake_{next(self._ids):04d}"
        output = sum(len(str(p.get("text", "")).split()) or rough_tokens(p) for p in parts)
        pieces: list[dict[str, Any]] = []
        for part in parts:
            if "text" in part:
                words = part["text"].split(" ")
                pieces += [
                    {"text": " ".join(words[k : k + 3]) + (" " if k + 3 < len(words) else "")}
                    for k in range(0, len(words), 3)
                ]
            else:
                pieces.append(part)
        for n, piece in enumerate(pieces):
            candidate: dict[str, Any] = {"content": {"role": "model", "parts": [piece]}, "index": 0}
            chunk: dict[str, Any] = {
                "candidates": [candidate],
                "modelVersion": model,
                "responseId": response_id,
            }
            if n == len(pieces) - 1:
                candidate["finishReason"] = finish
                chunk["usageMetadata"] = {
                    "promptTokenCount": prompt,
                    "candidatesTokenCount": output,
                    "totalTokenCount": prompt + output,
                }
            yield chunk

    @staticmethod
    def _merge(chunks: list[dict[str, Any]]) -> dict[str, Any]:
        """The non-stream answer: the stream's parts joined into one candidate."""
        parts: list[dict[str, Any]] = []
        for chunk in chunks:
            for part in chunk["candidates"][0]["content"]["parts"]:
                if "text" in part and parts and "text" in parts[-1]:
                    parts[-1] = {"text": parts[-1]["text"] + part["text"]}
                else:
                    parts.append(part)
        last = chunks[-1]
        candidate = {**last["candidates"][0], "content": {"role": "model", "parts": parts}}
        return {**last, "candidates": [candidate]}
