"""End to end: a PDF read early in a session takes every later request past the upstream's
size limit; the media rung sends it without that PDF (a note names it), the newest turn's
documents as sent."""

from __future__ import annotations

from typing import Any

import openai
import orjson
from aiohttp import web

from gateway.projection.media import REASON_EARLIER_DOCUMENT
from tests.conftest import GatewayFactory, model_entry, serve_app
from tests.projection.test_media_documents import chat_file, history, notes

NGINX_413 = (b"<html>\r\n<head><title>413 Request Entity Too Large</title></head>\r\n<body>\r\n"
             b"<center><h1>413 Request Entity Too Large</h1></center>\r\n<hr><center>nginx"
             b"</center>\r\n</body>\r\n</html>\r\n")


async def test_a_request_refused_as_too_large_goes_without_the_earlier_pdf(
    gateway_factory: GatewayFactory,
) -> None:
    received: list[dict[str, Any]] = []

    async def chat(request: web.Request) -> web.Response:
        raw = await request.read()
        if len(raw) > 1024 * 1024:  # nginx's client_max_body_size 1m in front of vLLM
            return web.Response(status=413, body=NGINX_413, content_type="text/html")
        received.append(orjson.loads(raw))
        return web.json_response(completion("Both PDFs compared."))

    app = web.Application(client_max_size=64 * 1024 * 1024)
    app.router.add_post("/v1/chat/completions", chat)
    runner, root = await serve_app(app)
    try:
        gw = await gateway_factory({
            "model_list": [model_entry("local", f"{root}/v1", model="openai/qwen3")],
            "recovery": {"backoff_base": 0.001, "backoff_cap": 0.002}})
        small = {"type": "file", "file": {"filename": "draft.pdf",
                                          "file_data": "data:application/pdf;base64,JVBERi0x"}}
        async with openai.AsyncOpenAI(base_url=gw.base_url, api_key="k",
                                      max_retries=0) as api:
            raw = await api.chat.completions.with_raw_response.create(
                model="local", messages=history(chat_file("spec.pdf"), small))  # type: ignore[arg-type]
        assert raw.http_response.status_code == 200
        assert raw.headers["x-gateway-recovery"] == "media=degraded"
        assert raw.parse().choices[0].message.content == "Both PDFs compared."
        (sent,) = received
        assert notes(sent["messages"]) == [
            f"[document removed: spec.pdf (1.1 MB): {REASON_EARLIER_DOCUMENT}]"]
        assert sent["messages"][2]["content"][0] == small  # the new one went as sent
    finally:
        await runner.cleanup()


def completion(text: str) -> dict[str, Any]:
    return {"id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "qwen3",
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": text}}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 3, "total_tokens": 13}}
