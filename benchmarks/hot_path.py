"""Per-stage cost of the gateway's request logic, without the network.

Times what the gateway does to a request between reading its bytes and sending the upstream
body: parse, validate (or, for a valid clean body, the typed read that replaces both),
project, build the body, serialize; then the read of an agent's next
turn over the body it sent before (gateway/server/seen.py). Prints microseconds per request,
the best of several repeats (the machine may be shared: compare best-of figures of repeated
runs). Usage: python benchmarks/hot_path.py [REPEATS]
"""

from __future__ import annotations

import json
import sys
import timeit
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

sys.path.insert(0, str(Path(__file__).parent))
from overhead import broken, history

from gateway.projection import project
from gateway.projection.invisible import may_hold
from gateway.server.seen import SeenBodies
from gateway.telemetry.context import ContextMemo, context_breakdown
from gateway.telemetry.prefix import PrefixTracker, PromptHead
from gateway.wires.chat_typed import read_clean_chat
from gateway.wires.chat_validation import parse_json_object, validate_chat_body


def stages(raw: bytes) -> None:
    body = parse_json_object(raw)
    messages = validate_chat_body(body)
    projection = project(messages)
    out = dict(body)
    out["model"] = "upstream"
    out["messages"] = projection.messages
    orjson.dumps(out)


def two_turns(tracker: PrefixTracker, head: PromptHead, messages: list[Any]) -> None:
    """A turn and the next one (two messages more), each compared with the one before:
    the edge's incremental read hands the earlier turns' message objects over again."""
    tracker.observe("s", head, messages[:-2], None)
    tracker.observe("s", head, messages, None)


def two_contexts(memo: ContextMemo, body: dict[str, Any], messages: list[Any]) -> None:
    """The context breakdown of a turn and the next one (two messages more)."""
    memo.breakdown("s", messages[:-2], body)
    memo.breakdown("s", messages, body)


def row(label: str, msgs: list[dict[str, object]], repeats: int) -> str:
    raw = json.dumps({"model": "bench", "messages": msgs}).encode()
    body = parse_json_object(raw)
    messages = validate_chat_body(body)
    n = 2000 if len(msgs) < 300 else 300
    tracker, head, contexts = PrefixTracker(), PromptHead.of(body), ContextMemo()
    timed: tuple[tuple[str, Callable[[], object]], ...] = (
        ("parse", lambda: parse_json_object(raw)),
        ("validate", lambda: validate_chat_body(body)),
        # A body never seen, read without building its messages (wires/chat_typed.py):
        # when it is valid and clean, this replaces parse, validate and the clean check.
        ("typed read", lambda: read_clean_chat(raw, count=True)),
        ("project", lambda: project(messages)),
        ("serialize", lambda: orjson.dumps(body)),
        ("invisible precheck", lambda: may_hold(raw)),
        ("all", lambda: stages(raw)),
        # Issue 26: the context breakdown and the prefix comparison with the last turn.
        ("context cold", lambda: context_breakdown(messages, body)),
        ("context 2 turns", lambda: two_contexts(contexts, body, messages)),
        ("prefix cold", lambda: PrefixTracker().observe("s", head, messages, None)),
        ("prefix 2 turns", lambda: two_turns(tracker, head, messages)),
    )
    cells = [f"{label:16s} {len(raw) // 1024:4d} KiB"]
    for name, fn in timed:
        best = min(timeit.repeat(fn, number=n, repeat=repeats)) / n * 1e6
        cells.append(f"{name} {best:7.1f} µs")
    return " | ".join(cells)


def read_turn(seen: SeenBodies, raw: bytes) -> None:
    """The edge's read of an agent's turn over the one before it: read, validate the added
    messages, learn (and keep) it."""
    reading = seen.read(raw, None)
    assert reading is not None
    messages = validate_chat_body(reading.body, checked=reading.checked)
    seen.learn(raw, None, reading.body, messages, reading)


def turn_row(label: str, msgs: list[dict[str, object]], repeats: int, turns: int = 20) -> str:
    """Turns that each add two messages to the one before, read over it, per turn."""
    bodies = [json.dumps({"model": "bench", "messages": msgs[:len(msgs) - 2 * k]}).encode()
              for k in range(turns, -1, -1)]
    best = float("inf")
    for _ in range(repeats):
        seen = SeenBodies(64 * 1024 * 1024)
        first = parse_json_object(bodies[0])
        seen.learn(bodies[0], None, first, validate_chat_body(first), None)
        started = timeit.default_timer()
        for raw in bodies[1:]:
            read_turn(seen, raw)
        best = min(best, (timeit.default_timer() - started) / turns)
    whole = min(timeit.repeat(lambda: parse_json_object(bodies[-1]), number=50,
                              repeat=repeats)) / 50
    return (f"{label:16s} {len(bodies[-1]) // 1024:4d} KiB | parse whole {whole * 1e6:7.1f} µs"
            f" | a turn (+2 messages) read over the one before {best * 1e6:7.1f} µs")


def main() -> None:
    repeats = int(sys.argv[1]) if len(sys.argv) > 1 else 7
    for label, msgs in (("valid 41 msgs", history(10)), ("valid 201 msgs", history(50)),
                        ("broken 200 msgs", broken(history(50))),
                        ("valid 801 msgs", history(200))):
        print(row(label, msgs, repeats))
    for label, msgs in (("valid 201 msgs", history(50)), ("valid 801 msgs", history(200))):
        print(turn_row(label, msgs, repeats))


if __name__ == "__main__":
    main()
