"""Helpers for the referee tests: the recorded provider answers and small request builders."""

from __future__ import annotations

import base64
import io
import json
from functools import cache
from pathlib import Path
from typing import Any

from PIL import Image

from tests.factories import user

RECORDS_PATH = Path(__file__).resolve().parents[1] / "data" / "provider-errors.jsonl"


@cache
def _records() -> list[dict[str, Any]]:
    return [json.loads(line) for line in RECORDS_PATH.read_text().splitlines() if line.strip()]


def record(n: int) -> dict[str, Any]:
    """Record number ``n`` (0-based line) of provider-errors.jsonl."""
    return _records()[n]


def record_body(n: int) -> str:
    """The recorded body text of record ``n``."""
    return str(record(n)["body"])


def with_request_id(recorded: str, ours: str) -> bytes:
    """A recorded Anthropic body with its request_id swapped for the one we received."""
    theirs = json.loads(recorded)["request_id"]
    return recorded.replace(theirs, ours).encode()



def assistant(text: str | None = "ok", *call_ids: str) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": text}
    if call_ids:
        message["tool_calls"] = [call(i) for i in call_ids]
    return message


def call(call_id: str, name: str = "read_file") -> dict[str, Any]:
    return {
        "id": call_id,
        "type": "function",
        "function": {"name": name, "arguments": '{"path": "a.txt"}'},
    }


def tool(call_id: str, text: str = "file contents") -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "content": text}


def chat(*messages: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"model": "referee", "messages": list(messages), **extra}


def image_bytes(fmt: str = "PNG", size: tuple[int, int] = (8, 8)) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", size, (200, 30, 30)).save(buffer, format=fmt)
    return buffer.getvalue()


def data_url(raw: bytes, media_type: str = "image/png") -> str:
    return f"data:{media_type};base64,{base64.b64encode(raw).decode()}"


def image_part(url: str) -> dict[str, Any]:
    return {"type": "image_url", "image_url": {"url": url}}


def padded_user(tokens: int, *before: dict[str, Any]) -> list[dict[str, Any]]:
    """``before`` plus one user message sized so the messages estimate exactly ``tokens``."""
    messages = [*before, user("")]
    base = len(json.dumps(messages, separators=(",", ":")))
    messages[-1] = user("x" * (tokens * 4 - base))
    return messages
