"""What ``repair.tool_outputs: condense`` saves on a coding agent's session (a few seconds).

python benchmarks/condense_savings.py [--turns 60] [--sessions 5]: builds a coding session the
way a coding agent's tools answer (files read and read again, directory listings, indented
JSON from an API, test runs with colour codes and repeated warnings, installs drawing
progress bars, grep and diff output), sends every turn through the condenser the gateway
runs, and prints how many fewer input tokens (o200k_base, counted offline) the last turn
and all turns together carry condensed, over sessions of different makeups, and whether
each turn resent the previous turn's condensed bytes unchanged (the provider's cacheable
prefix). ``make bench`` prints the same lines.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path
from typing import Any

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from gateway.compaction.tokens import count_text_tokens
from gateway.projection.condense import ToolOutputCondenser

MODEL = "gpt-4o"
GREEN, RED, YELLOW, RESET = "\x1b[32m", "\x1b[31m", "\x1b[33m", "\x1b[0m"


def _source(rng: random.Random, name: str, lines: int) -> str:
    body = [f'"""{name}: part of the service."""', "", "import os", "import json", ""]
    for n in range(lines // 6):
        fn = f"{rng.choice(['load', 'parse', 'check', 'send', 'render'])}_{n}"
        body += [f"def {fn}(value: dict) -> dict:",
                 f"    # {rng.choice(['TODO', 'NOTE', 'why'])}: keep the {name} shape stable",
                 f"    out = {{k: v for k, v in value.items() if k != '{fn}'}}",
                 f"    out['seen'] = {rng.randint(0, 999)}",
                 "    return out", ""]
    return "\n".join(body)


def _listing(rng: random.Random, files: list[str]) -> str:
    return "\n".join(f"-rw-r--r-- 1 dev dev {rng.randint(200, 9000):>6} Nov 30 12:{n:02d} {f}"
                     for n, f in enumerate(files))


def _api_json(rng: random.Random) -> str:
    issues = [{"number": 100 + n, "title": f"Bug in {rng.choice(['parser', 'loader'])} #{n}",
               "state": rng.choice(["open", "closed"]), "labels": [{"name": "bug"}],
               "user": {"login": f"dev{n}", "id": 1000 + n}, "comments": rng.randint(0, 9)}
              for n in range(rng.randint(4, 10))]
    return json.dumps(issues, indent=2)


def _test_run(rng: random.Random, failing: bool) -> str:
    lines = [f"{'=' * 20} test session starts {'=' * 20}",
             "platform linux -- Python 3.11.7, pytest-8.3.3", "collected 48 items", ""]
    for n in range(6):
        lines.append(f"tests/test_mod{n}.py {GREEN}{'.' * rng.randint(4, 10)}{RESET}  "
                     f"[{(n + 1) * 16:>3}%]")
    lines += [f"{YELLOW}DeprecationWarning: datetime.utcnow() is deprecated{RESET}"] * \
        rng.randint(5, 30)
    if failing:
        lines += [f"{RED}FAILED{RESET} tests/test_mod3.py::test_parse - KeyError: 'seen'"]
    lines.append(f"{GREEN if not failing else RED}{'=' * 20} 47 passed, "
                 f"{int(failing)} failed in 2.31s {'=' * 20}{RESET}")
    return "\n".join(lines)


def _install(rng: random.Random) -> str:
    bars = "".join(f"\rDownloading wheels {p}%" for p in range(0, 101, 5))
    return (f"Collecting packages{bars}\n" + "Requirement already satisfied: six\n" *
            rng.randint(3, 12) + "Successfully installed demo-1.0")


def session(turns: int, seed: int) -> list[list[dict[str, Any]]]:
    """The bodies' messages of a coding session, turn by turn (each resends the last)."""
    rng = random.Random(seed)
    files = [f"src/{a}_{b}.py" for a in ("parser", "loader", "render", "api", "models")
             for b in ("core", "io", "cli")]
    sources = {f: _source(rng, f, rng.randint(60, 250)) for f in files}
    rules = "\n".join(f"- Rule {n}: {rng.choice(['prefer', 'avoid', 'always run'])} "
                       f"{rng.choice(['small diffs', 'the tests', 'new dependencies'])} "
                       f"when working on {rng.choice(files)}." for n in range(120))
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": f"You are a coding agent.\n{rules}"},
        {"role": "user", "content": "The parser test fails with KeyError 'seen'. Fix it."}]
    out: list[list[dict[str, Any]]] = []
    read: list[str] = []
    for n in range(turns):
        kind = rng.choices(["read", "ls", "api", "test", "install", "grep", "edit"],
                           [40, 5, 3, 12, 2, 13, 25])[0]
        call = f"call_{n}"
        if kind == "read":
            # Now and then a file read before (edited since or not), else a new one.
            target = rng.choice(read) if read and rng.random() < 0.35 else rng.choice(files)
            read.append(target)
            output = sources[target]
        elif kind == "ls":
            output = _listing(rng, files)
        elif kind == "api":
            output = _api_json(rng)
        elif kind == "test":
            output = _test_run(rng, failing=n < turns * 2 // 3)
        elif kind == "install":
            output = _install(rng)
        elif kind == "grep":
            word = rng.choice(["seen", "value", "out"])
            output = "\n".join(f"{f}:{i}:    out['{word}'] = {i}" for f in files
                               for i in range(3))
        else:
            target = rng.choice(read or files)
            sources[target] += f"\n# fix {n}\n"
            output = f"Edited {target}: 1 line added."
        messages.append({"role": "assistant", "content": None, "tool_calls": [
            {"id": call, "type": "function",
             "function": {"name": kind, "arguments": json.dumps({"n": n})}}]})
        messages.append({"role": "tool", "tool_call_id": call, "content": output})
        out.append(list(messages))
    return out


def _tokens(messages: list[dict[str, Any]]) -> int:
    return count_text_tokens(orjson.dumps(messages).decode(), MODEL)


def measure(turns: int = 60, seed: int = 3) -> dict[str, float]:
    """Tokens as sent and condensed (last turn, all turns) and the prefix resent."""
    condenser = ToolOutputCondenser()
    sent_total = condensed_total = 0
    last_sent = last_condensed = 0
    previous: bytes | None = None
    prefix_kept = 0
    for messages in session(turns, seed):
        condensed = condenser.condense(messages).messages
        last_sent, last_condensed = _tokens(messages), _tokens(condensed)
        sent_total += last_sent
        condensed_total += last_condensed
        raw = orjson.dumps(condensed)
        if previous is not None and raw.startswith(previous[:-1]):
            prefix_kept += 1
        previous = raw
    return {"last_sent": last_sent, "last_condensed": last_condensed,
            "sent_total": sent_total, "condensed_total": condensed_total,
            "prefix_kept": prefix_kept, "turns": turns}


def report(turns: int = 60, seeds: range = range(1, 6)) -> str:
    """The line ``make bench`` prints: sessions with different makeups (``seeds``)."""
    runs = [measure(turns, seed) for seed in seeds]
    last = sorted(1 - m["last_condensed"] / m["last_sent"] for m in runs)
    total = sorted(1 - m["condensed_total"] / m["sent_total"] for m in runs)
    kept = sum(m["prefix_kept"] for m in runs)
    return (f"condensed tool outputs, {len(runs)} synthetic {turns}-turn coding sessions "
            f"(o200k_base tokens): all turns' input {total[len(total) // 2]:.1%} fewer "
            f"(median; {total[0]:.1%} to {total[-1]:.1%}), the last turn's "
            f"{last[len(last) // 2]:.1%} ({last[0]:.1%} to {last[-1]:.1%}); a turn resent the "
            f"previous turn's condensed bytes unchanged {kept:.0f} times of "
            f"{len(runs) * (turns - 1)}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--turns", type=int, default=60)
    parser.add_argument("--sessions", type=int, default=5)
    args = parser.parse_args()
    print(report(args.turns, range(1, args.sessions + 1)))


if __name__ == "__main__":
    main()
