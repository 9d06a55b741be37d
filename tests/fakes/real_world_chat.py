"""Chat Completions stream bytes as real OpenAI-compatible servers send them.

Each builder makes one ``chat.completion.chunk`` (or a whole stream) with the quirks of a
named server, as their docs and bug reports show them: vLLM and SGLang (explicit nulls,
``reasoning_content``, a usage chunk with ``choices: []``), llama.cpp (``content: null`` in
the role chunk, ``timings``, its ``error:`` field), Ollama (the role in every chunk, a whole
tool call in one chunk), OpenRouter (``: OPENROUTER PROCESSING`` comments, ``reasoning``,
mid-stream ``{"error": ...}`` chunks with ``finish_reason: "error"``), Azure
(``prompt_filter_results`` first, ``content_filter_results`` on choices, an annotation
chunk without a delta), Groq (``x_groq`` usage), DeepSeek (``reasoning_content`` before
content, usage in the finish chunk), Gemini's OpenAI endpoint (no ``index`` on tool calls,
a call's arguments whole in one chunk, ``finish_reason: "stop"`` after a call).
"""

from __future__ import annotations

import json
from typing import Any

DONE = b"data: [DONE]\n\n"
OPENROUTER_COMMENT = b": OPENROUTER PROCESSING\n\n"


def chunk(delta: dict[str, Any] | None = None, finish: str | None = None, *,
          usage: dict[str, Any] | None = None, choices: Any = ..., cid: str = "chatcmpl-rw",
          choice_extra: dict[str, Any] | None = None, **extra: Any) -> dict[str, Any]:
    """One ``chat.completion.chunk`` (``choices`` given: those, else one choice with
    ``delta`` and ``finish``)."""
    data: dict[str, Any] = {"id": cid, "object": "chat.completion.chunk", "created": 1,
                            "model": "m-upstream"}
    if choices is ...:
        choice: dict[str, Any] = {"index": 0, "delta": delta if delta is not None else {},
                                  "logprobs": None, "finish_reason": finish}
        data["choices"] = [{**choice, **(choice_extra or {})}]
    else:
        data["choices"] = choices
    if usage is not None:
        data["usage"] = usage
    return {**data, **extra}


def sse(data: Any, *, prefix: bytes = b"data: ", end: bytes = b"\n\n") -> bytes:
    """One SSE event carrying ``data`` as JSON."""
    return prefix + json.dumps(data, ensure_ascii=False).encode() + end


def usage(prompt: int, completion: int, **extra: Any) -> dict[str, Any]:
    """An OpenAI ``usage`` object."""
    return {"prompt_tokens": prompt, "completion_tokens": completion,
            "total_tokens": prompt + completion, **extra}


def call(index: int | None, *, id: str | None = None, name: str | None = None,
         args: str | None = None, **extra: Any) -> dict[str, Any]:
    """One tool call delta (``index`` None: left out, as Gemini does)."""
    function: dict[str, Any] = {}
    if name is not None:
        function["name"] = name
    if args is not None:
        function["arguments"] = args
    out: dict[str, Any] = {"function": function, **extra}
    if index is not None:
        out["index"] = index
    if id is not None:
        out |= {"id": id, "type": "function"}
    return out


def texts(*words: str, role: dict[str, Any] | None = None) -> list[bytes]:
    """A role chunk, then one chunk a word."""
    opening = [sse(chunk(role))] if role is not None else []
    return [*opening, *(sse(chunk({"content": w})) for w in words)]


def plain(*words: str, finish: str = "stop", use: dict[str, Any] | None = None) -> bytes:
    """A whole ordinary stream: role chunk, words, finish, usage chunk, ``[DONE]``."""
    tail = [sse(chunk(choices=[], usage=use))] if use is not None else []
    return b"".join([*texts(*words, role={"role": "assistant", "content": ""}),
                     sse(chunk({}, finish)), *tail, DONE])


AZURE_PROMPT_FILTER = sse({
    "choices": [], "created": 0, "id": "", "model": "", "object": "",
    "prompt_filter_results": [{"prompt_index": 0, "content_filter_results": {
        "hate": {"filtered": False, "severity": "safe"},
        "self_harm": {"filtered": False, "severity": "safe"}}}]})
AZURE_SAFE = {"content_filter_results": {"hate": {"filtered": False, "severity": "safe"}}}


def azure_annotation() -> bytes:
    """Azure's asynchronous-filter annotation chunk: a choice with no delta."""
    return sse({"id": "", "object": "", "created": 0, "model": "", "usage": None,
                "choices": [{"index": 0, "finish_reason": None, **AZURE_SAFE,
                             "content_filter_offsets": {"check_offset": 4, "start_offset": 4,
                                                        "end_offset": 20}}]})


def openrouter_error(message: str, code: int = 502) -> bytes:
    """OpenRouter's mid-stream failure: an ``error`` next to a choice finished with
    ``"error"``."""
    return sse(chunk({"content": ""}, "error", provider="SomeProvider",
                     error={"code": code, "message": message}))


def vllm_error(message: str, code: int = 500, kind: str = "InternalServerError") -> bytes:
    """vLLM's in-stream failure event."""
    return sse({"error": {"object": "error", "message": message, "type": kind,
                          "param": None, "code": code}})


def chunked(*parts: bytes) -> Any:
    """A fault-server answer (``tests.fakes.faulty_upstream``) streaming ``parts`` with
    ``Transfer-Encoding: chunked``, one HTTP chunk each, as most servers frame a stream."""
    from tests.fakes.faulty_upstream import Received, Writer

    async def run(_: Received, w: Writer) -> None:
        w.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream; charset=utf-8\r\n"
                b"Cache-Control: no-cache\r\nTransfer-Encoding: chunked\r\n"
                b"Connection: close\r\n\r\n")
        for part in parts:
            if part:
                w.write(b"%x\r\n" % len(part) + part + b"\r\n")
                await w.drain()
        w.write(b"0\r\n\r\n")
        await w.drain()
    return run
