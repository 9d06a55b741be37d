"""A Chat Completions server with a small true context window that refuses an oversized
prompt in one named provider's own overflow wording (status, envelope, header and text as
that provider sends them).

It counts the prompt as :func:`tests.fakes.llamacpp_server.prompt_tokens` does, refuses a
prompt larger than its window (or one that cannot fit with the requested ``max_tokens``)
and answers everything else; the gateway's summary requests get a short summary. Each
request it received is kept in :attr:`requests` with the status it got. Summaries can be
made to fail (``fail_summaries``: OpenAI's 500 every time) or to hang (``summary_hold``).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Self

import orjson
from aiohttp import web

from tests.conftest import serve_app
from tests.fakes.llamacpp_server import LlamaCppServer, prompt_tokens

# (status, body, headers) for a refused prompt of ``tokens`` against ``window``.
Refusal = tuple[int, Any, dict[str, str]]
Phrasing = Callable[[int, int], Refusal]


def _openai(message: str, code: str | None = "context_length_exceeded",
            **extra: Any) -> dict[str, Any]:
    return {"error": {"message": message, "type": "invalid_request_error", "param": "messages",
                      "code": code, **extra}}


PHRASINGS: dict[str, Phrasing] = {
    "openai": lambda w, t: (400, _openai(
        f"This model's maximum context length is {w} tokens. However, your messages "
        f"resulted in {t} tokens. Please reduce the length of the messages."), {}),
    "anthropic": lambda w, t: (400, {"type": "error", "error": {
        "type": "invalid_request_error",
        "message": f"prompt is too long: {t} tokens > {w} maximum"},
        "request_id": "req_011CVjxiYzEFcAQC4Fk87zw2"}, {"request-id": "req_011"}),
    "azure": lambda w, t: (400, {"error": {
        "code": "context_length_exceeded", "param": "messages", "type": "invalid_request_error",
        "message": f"This model's maximum context length is {w} tokens. However, your "
                   f"messages resulted in {t} tokens. Please reduce the length of the messages."}},
        {"apim-request-id": "0c6f-azure"}),
    "bedrock": lambda w, t: (400, {
        "message": f"The model returned the following errors: prompt is too long: {t} tokens "
                   f"> {w} maximum"}, {"x-amzn-ErrorType": "ValidationException:http://"
                                       "internal.amazon.com/coral/com.amazon.bedrock/"}),
    "bedrock_unnumbered": lambda w, t: (400, {
        "message": "The model returned the following errors: Input is too long for requested "
                   "model."}, {"x-amzn-ErrorType": "ValidationException"}),
    "vertex": lambda w, t: (400, {"error": {
        "code": 400, "status": "INVALID_ARGUMENT",
        "message": f"Unable to submit request because the input token count is {t} but model "
                   f"only supports up to {w}. Reduce the input token count and try again. You "
                   "can also use the CountTokens API to calculate prompt token count and "
                   "billable characters. Learn more: https://cloud.google.com/vertex-ai/"
                   "generative-ai/docs/multimodal/send-multimodal-prompts"}}, {}),
    "gemini": lambda w, t: (400, {"error": {
        "code": 400, "status": "INVALID_ARGUMENT",
        "message": f"The input token count ({t}) exceeds the maximum number of tokens allowed "
                   f"({w})."}}, {}),
    "vllm": lambda w, t: (400, {
        "object": "error", "type": "BadRequestError", "param": None, "code": 400,
        "message": f"This model's maximum context length is {w} tokens. However, you requested "
                   f"{t + 256} tokens ({t} in the messages, 256 in the completion). Please "
                   "reduce the length of the messages or completion."}, {}),
    "vllm_v1": lambda w, t: (400, {"error": {
        "object": "error", "type": "BadRequestError", "param": None, "code": 400,
        "message": f"The decoder prompt (length {t}) is longer than the maximum model length "
                   f"of {w}. Make sure that `max_model_len` is no smaller than the number of "
                   "text tokens."}}, {}),
    "mistral": lambda w, t: (400, {
        "object": "error", "type": "invalid_request_error", "param": None, "code": None,
        "message": f"Prompt contains {t} tokens and 0 draft tokens, too large for model with "
                   f"{w} maximum context length"}, {}),
    "groq": lambda w, t: (400, _openai(
        "Please reduce the length of the messages or completion."), {}),
    "together": lambda w, t: (400, {"id": "nmPk-together", "error": {
        "message": f"Input validation error: `inputs` tokens + `max_new_tokens` must be <= "
                   f"{w}. Given: {t} `inputs` tokens and 1 `max_new_tokens`",
        "type": "invalid_request_error", "param": None, "code": None}}, {}),
    "tgi": lambda w, t: (422, {
        "error": f"Input validation error: `inputs` must have less than {w} tokens. "
                 f"Given: {t}", "error_type": "validation"}, {}),
    "fireworks": lambda w, t: (400, {"error": {
        "object": "error", "type": "invalid_request_error",
        "message": f"The prompt is too long: {t}, model maximum context length: {w}"}}, {}),
    "deepseek": lambda w, t: (400, _openai(
        f"This model's maximum context length is {w} tokens. However, you requested {t} "
        f"tokens ({t} in the messages, 0 in the completion). Please reduce the length of the "
        "messages or completion.", code="invalid_request_error"), {}),
    "openrouter": lambda w, t: (400, {"error": {
        "code": 400, "metadata": {"provider_name": None},
        "message": f"This endpoint's maximum context length is {w} tokens. However, you "
                   f"requested about {t} tokens ({t} of text input). Please reduce the length "
                   "of either one, or use the \"middle-out\" transform to compress your prompt "
                   "automatically."}}, {}),
    "xai": lambda w, t: (400, {
        "code": "Client specified an invalid argument",
        "error": f"This model's maximum prompt length is {w} but the request contains {t} "
                 "tokens."}, {}),
    "cerebras": lambda w, t: (400, {
        "message": f"Please reduce the length of the messages or completion. Current length "
                   f"is {t} while limit is {w}", "type": "invalid_request_error",
        "param": "messages", "code": "context_length_exceeded"}, {}),
    # Anthropic's 413 worded as an overflow (invalid_request_error, not request_too_large)
    "anthropic_413": lambda w, t: (413, {"type": "error", "error": {
        "type": "invalid_request_error",
        "message": "Request size exceeds model context window"}}, {}),
    # Groq: one request larger than the per-minute token budget (never passes as it is)
    "groq_tpm": lambda w, t: (413, {"error": {
        "message": f"Request too large for model `llama-3.3-70b-versatile` in organization "
                   f"`org_01j2g5d88hfvjrgw64hnapqk8y` service tier `on_demand` on tokens per "
                   f"minute (TPM): Limit {w}, Requested {t}, please reduce your message size "
                   "and try again.", "type": "tokens", "code": "rate_limit_exceeded"}}, {}),
    "moonshot": lambda w, t: (400, {"error": {
        "message": f"Invalid request: Your request exceeded model token limit: {w} "
                   f"(requested: {t})", "type": "invalid_request_error"}}, {}),
}
# The phrasings that state the window (the gateway must learn it from them).
STATES_WINDOW = frozenset(PHRASINGS) - {"bedrock_unnumbered", "groq", "anthropic_413",
                                         "groq_tpm"}


@dataclass
class PhrasedServer:
    """The fake server (``async with``); :attr:`base_url` ends in ``/v1``."""

    phrasing: str
    window: int = 6_000
    # Summary requests: answered, refused with a 500 every time, or held until this is set.
    fail_summaries: bool = False
    summary_hold: asyncio.Event | None = None
    # A streamed request over the window gets a 200 event stream whose first event is the
    # refusal (``data: {"error": ...}``, as OpenRouter sends a provider's error mid-stream).
    refuse_in_stream: bool = False
    count_tools: bool = False  # the tool table counts against the window too
    # Asked with the gateway's recall tool on offer, the model calls it once (a whole range)
    # before answering.
    calls_recall: bool = False
    requests: list[tuple[dict[str, Any], int]] = field(default_factory=list)
    base_url: str = ""
    _runner: web.AppRunner | None = None

    def summaries(self) -> list[tuple[dict[str, Any], int]]:
        """The summary requests received, with their statuses."""
        return [(b, s) for b, s in self.requests if LlamaCppServer.is_summary(b)]

    def chats(self) -> list[tuple[dict[str, Any], int]]:
        """Every other request received, with its status."""
        return [(b, s) for b, s in self.requests if not LlamaCppServer.is_summary(b)]

    async def _chat(self, request: web.Request) -> web.Response:
        body = orjson.loads(await request.read())
        tokens = prompt_tokens(body["messages"])
        if self.count_tools and body.get("tools"):
            tokens += prompt_tokens([{"content": body["tools"]}])
        wanted = body.get("max_tokens") or body.get("max_completion_tokens") or 0
        if tokens > self.window or (wanted and tokens + wanted > self.window):
            status, error, headers = PHRASINGS[self.phrasing](self.window, tokens)
            self.requests.append((body, status))
            if self.refuse_in_stream and body.get("stream") is True:
                return await self._stream_refusal(request, error)
            return web.json_response(error, status=status, headers=headers)
        summary = LlamaCppServer.is_summary(body)
        if summary and self.fail_summaries:
            self.requests.append((body, 500))
            return web.json_response({"error": {
                "message": "The server had an error while processing your request. Sorry "
                           "about that!", "type": "server_error", "param": None,
                "code": None}}, status=500)
        self.requests.append((body, 200))
        if summary and self.summary_hold is not None:
            await self.summary_hold.wait()  # (or the gateway hangs up)
        text = "## Task\nRead modules.\n\n## Next Steps\nGo on." if summary else "Done."
        offered = {t.get("function", {}).get("name") for t in body.get("tools") or []}
        if (self.calls_recall and "context_recall" in offered
                and body["messages"][-1].get("role") != "tool"):
            call = {"id": "call_recall_x", "type": "function", "function": {
                "name": "context_recall", "arguments": '{"from_line": 1, "to_line": 200}'}}
            return web.json_response({
                "id": "chatcmpl-r", "object": "chat.completion", "created": int(time.time()),
                "model": "m", "choices": [{"index": 0, "finish_reason": "tool_calls",
                                           "message": {"role": "assistant", "content": None,
                                                       "tool_calls": [call]}}],
                "usage": {"prompt_tokens": tokens, "completion_tokens": 5,
                          "total_tokens": tokens + 5}})
        if body.get("stream") is True:
            return await self._stream_answer(request, text)
        return web.json_response({
            "id": f"chatcmpl-{len(self.requests)}", "object": "chat.completion",
            "created": int(time.time()), "model": body.get("model", "m"),
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": text}}],
            "usage": {"prompt_tokens": tokens, "completion_tokens": 5,
                      "total_tokens": tokens + 5},
        })

    async def _stream_refusal(self, request: web.Request, error: Any) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        error = error if isinstance(error, dict) and "error" in error else {"error": error}
        await response.write(b"data: " + orjson.dumps(error) + b"\n\n")
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response

    async def _stream_answer(self, request: web.Request, text: str) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        base = {"id": "chatcmpl-s", "object": "chat.completion.chunk", "created": 0,
                "model": "m"}
        for delta, finish in (({"role": "assistant", "content": text}, None), ({}, "stop")):
            chunk = {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
            await response.write(b"data: " + orjson.dumps(chunk) + b"\n\n")
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response

    async def __aenter__(self) -> Self:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._chat)
        self._runner, root = await serve_app(app)
        self.base_url = f"{root}/v1"
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
