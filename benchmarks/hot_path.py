"""Per-stage cost of the gateway's request logic, without the network.

Times what the gateway does to a request between reading its bytes and sending the upstream
body: parse, validate, project, build the body, serialize. Prints microseconds per request,
the best of several repeats (the machine may be shared: compare best-of figures of repeated
runs). Usage: python benchmarks/hot_path.py [REPEATS]
"""

from __future__ import annotations

import json
import sys
import timeit
from collections.abc import Callable
from pathlib import Path

import orjson

sys.path.insert(0, str(Path(__file__).parent))
from overhead import broken, history

from gateway.projection import project
from gateway.server.validation import parse_json_object, validate_chat_body


def stages(raw: bytes) -> None:
    body = parse_json_object(raw)
    messages = validate_chat_body(body)
    projection = project(messages)
    out = dict(body)
    out["model"] = "upstream"
    out["messages"] = projection.messages
    orjson.dumps(out)


def row(label: str, msgs: list[dict[str, object]], repeats: int) -> str:
    raw = json.dumps({"model": "bench", "messages": msgs}).encode()
    body = parse_json_object(raw)
    messages = validate_chat_body(body)
    n = 2000 if len(msgs) < 300 else 300
    timed: tuple[tuple[str, Callable[[], object]], ...] = (
        ("parse", lambda: parse_json_object(raw)),
        ("validate", lambda: validate_chat_body(body)),
        ("project", lambda: project(messages)),
        ("serialize", lambda: orjson.dumps(body)),
        ("all", lambda: stages(raw)),
    )
    cells = [f"{label:16s} {len(raw) // 1024:4d} KiB"]
    for name, fn in timed:
        best = min(timeit.repeat(fn, number=n, repeat=repeats)) / n * 1e6
        cells.append(f"{name} {best:7.1f} µs")
    return " | ".join(cells)


def main() -> None:
    repeats = int(sys.argv[1]) if len(sys.argv) > 1 else 7
    for label, msgs in (("valid 41 msgs", history(10)), ("valid 201 msgs", history(50)),
                        ("broken 200 msgs", broken(history(50))),
                        ("valid 801 msgs", history(200))):
        print(row(label, msgs, repeats))


if __name__ == "__main__":
    main()
