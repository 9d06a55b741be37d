"""How long condensing one tool output holds the event loop, per megabyte of output.

python benchmarks/condense_time.py [--mb 1]: condenses outputs of each kind an agent's
tools print (a log with colour codes, an indented JSON answer, a source file, a progress
bar, grep output) and hostile ones (a long run of spaces, unterminated escape sequences,
JSON nested past what orjson writes, a document that is almost JSON), each ``--mb``
megabytes, and prints the milliseconds per megabyte of each (the best of three runs, a
fresh condenser each time so nothing is remembered). Condensing runs on the event loop:
every kind should stay linear, a few tens of milliseconds per megabyte.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from gateway.projection.condense import ToolOutputCondenser
from tests.factories import calls, tool, user


def _repeat(unit: str, size: int) -> str:
    return (unit * (size // len(unit) + 1))[:size]


def _kinds(size: int) -> dict[str, Callable[[], str]]:
    rows = size // 60
    return {
        "coloured log": lambda: _repeat("\x1b[33mwarning\x1b[0m: retrying the connection  \n"
                                        "\x1b[32mok\x1b[0m step done\n", size),
        "indented JSON": lambda: json.dumps(
            {"items": [{"id": n, "name": f"item {n}", "tags": ["a", "b"]}
                       for n in range(size // 110)]}, indent=2),
        "JSON of long strings": lambda: json.dumps(
            [_repeat('line "quoted" \\ and\n', 10_000)] * (size // 10_000), indent=1),
        "source file": lambda: "".join(f"    value_{n} = compute({n})  # step {n}\n"
                                       for n in range(rows)),
        "progress bar": lambda: _repeat("Downloading 12%\rDownloading 57%\rDownloading 100%\n",
                                        size),
        "grep output": lambda: "".join(f"src/m{n % 97}.py:{n}: return handle(request)\n"
                                       for n in range(rows)),
        "run of spaces": lambda: "x \n" + " " * size + "y",
        "unterminated OSC": lambda: _repeat("\x1b]0;title without an end ", size),
        "lone ESCs": lambda: _repeat("\x1b\x1b\x1b[", size),
        "deep JSON": lambda: "[\n" * 300 + _repeat(" ", size) + "]\n" * 300,
        "almost JSON": lambda: "{\n" + _repeat('"key": "value",\n', size) + "oops",
    }


def main() -> None:
    """Print the milliseconds per megabyte of each kind of output."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=float, default=1.0)
    args = parser.parse_args()
    size = int(args.mb * 1_000_000)
    for name, make in _kinds(size).items():
        text = make()
        messages = [user("go"), calls("call_1"), tool("call_1", text)]
        best = float("inf")
        for _ in range(3):
            started = time.perf_counter()
            ToolOutputCondenser().condense(messages)
            best = min(best, time.perf_counter() - started)
        per_mb = best * 1000 / (len(text) / 1_000_000)
        print(f"{name:>20}: {per_mb:7.1f} ms per MB ({len(text) / 1e6:.2f} MB)")


if __name__ == "__main__":
    main()
