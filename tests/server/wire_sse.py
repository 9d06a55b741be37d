"""Reading the SSE events of a streamed answer on each wire, and its terminal error event."""

from __future__ import annotations

from typing import Any

import orjson


def sse_events(payload: bytes) -> list[tuple[str | None, Any]]:
    """(event name, parsed data) of each SSE event ("[DONE]" kept as a string)."""
    out: list[tuple[str | None, Any]] = []
    for block in payload.replace(b"\r\n", b"\n").split(b"\n\n"):
        if not block.strip():
            continue
        name, data = None, None
        for line in block.split(b"\n"):
            if line.startswith(b"event:"):
                name = line[6:].strip().decode()
            elif line.startswith(b"data:"):
                raw = line[5:].strip()
                data = raw.decode() if raw == b"[DONE]" else orjson.loads(raw)
        out.append((name, data))
    return out


def assert_ends_with_wire_error(wire: str, events: list[tuple[str | None, Any]]) -> str:
    """The stream's terminal error event in the wire's own shape: its message."""
    if wire == "chat":
        assert events[-1] == (None, "[DONE]")
        name, data = events[-2]
        assert name is None and set(data) == {"error"}
        return str(data["error"]["message"])
    if wire == "responses":
        (error_name, error), (final_name, final) = events[-2:]
        assert error_name == "error" and error["type"] == "error"
        assert final_name == "response.failed" and final["type"] == "response.failed"
        assert final["response"]["status"] == "failed"
        assert final["response"]["error"]["message"] == error["message"]
        return str(error["message"])
    name, data = events[-1]
    assert name == "error" and data["type"] == "error"
    assert data["error"]["type"] == "api_error"
    return str(data["error"]["message"])
