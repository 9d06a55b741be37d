"""Agent turns on the three wires, side by side (a few seconds a size).

python benchmarks/wire_turns.py [--messages 30 300] [--slice 3] [--against CHECKOUT]
[--cold]: the same agent history as
Chat Completions, as Anthropic Messages and as Responses input (tool calls and results in
each wire's own form), sent by 16 sessions turn after turn to the passthrough and to the
gateway (native Messages and Responses upstreams: the mock's ``/v1/messages`` and
``/v1/responses``); prints req/s and CPU per request of each, and the gateway's CPU over
the passthrough's. ``--against``: another checkout's gateway (a ``git worktree``) measured
in turn with this one, in the same run (an A/B). ``--cold``: every body is one the gateway
never saw (each request's system prompt and first ask open with its own number): the first
turn of a session, as ``make bench``'s never-seen bodies.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_load import _TOOLS, agent_history, session
from bench_servers import Server, start_gateway, start_script

SESSIONS = 16
_SYSTEM_START = b"You are a coding agent"
_TASK_START = b"[session "


def _as_wire(wire: str, messages: list[dict[str, Any]]) -> tuple[str, dict[str, Any]]:
    """The path and body of ``messages`` (Chat Completions) on ``wire``."""
    # The tools each wire declares them with, as agents send them every turn.
    if wire == "chat":
        return "/v1/chat/completions", {"model": "bench", "messages": messages,
                                        "tools": _TOOLS}
    system, rest = messages[0]["content"], messages[1:]
    if wire == "messages":
        out: list[dict[str, Any]] = []
        for m in rest:
            if m["role"] == "tool":
                block = {"type": "tool_result", "tool_use_id": m["tool_call_id"],
                         "content": m["content"]}
                if out and out[-1]["role"] == "user" and isinstance(out[-1]["content"], list):
                    out[-1]["content"].append(block)
                else:
                    out.append({"role": "user", "content": [block]})
            elif m.get("tool_calls"):
                out.append({"role": "assistant", "content": [
                    {"type": "tool_use", "id": c["id"], "name": c["function"]["name"],
                     "input": json.loads(c["function"]["arguments"])}
                    for c in m["tool_calls"]]})
            else:
                out.append({"role": m["role"], "content": m["content"]})
        tools = [{"name": t["function"]["name"], "description": t["function"]["description"],
                  "input_schema": t["function"]["parameters"]} for t in _TOOLS]
        return "/v1/messages", {"model": "claude", "max_tokens": 1024, "system": system,
                                "messages": out, "tools": tools}
    items: list[dict[str, Any]] = []
    for m in rest:
        if m["role"] == "tool":
            items.append({"type": "function_call_output", "call_id": m["tool_call_id"],
                          "output": m["content"]})
        elif m.get("tool_calls"):
            items += [{"type": "function_call", "call_id": c["id"],
                       "name": c["function"]["name"], "arguments": c["function"]["arguments"]}
                      for c in m["tool_calls"]]
        else:
            items.append({"role": m["role"], "content": m["content"]})
    tools = [{"type": "function", **t["function"]} for t in _TOOLS]
    return "/v1/responses", {"model": "gpt", "instructions": system, "input": items,
                             "tools": tools}


def _turns(wire: str, n: int) -> tuple[str, list[list[bytes]]]:
    """Each session's last ten turns, as request bodies: each ends with a user's ask, and
    the next one is the same history and what followed (as an agent resends it)."""
    path, sessions = "", []
    for k in range(SESSIONS):
        history = agent_history(n, seed=k, task=f"[session {k}] ")
        cuts = [i + 1 for i, m in enumerate(history) if m["role"] == "user"][-10:]
        bodies = []
        for cut in cuts:
            path, body = _as_wire(wire, history[:cut])
            bodies.append(json.dumps(body, separators=(",", ":")).encode())
        sessions.append(bodies)
    return path, sessions


async def _load(url: str, sessions: list[list[bytes]], seconds: float,
                cold: bool = False) -> int:
    """Requests sent in ``seconds``; ``cold``: each body made new to the gateway (its
    system prompt and first ask open with a number no other request has: a new session's
    body, never seen)."""
    done = 0
    stop = time.perf_counter() + seconds
    sent = 0
    async with session(SESSIONS) as s:
        async def one(turns: list[bytes]) -> None:
            nonlocal done, sent
            i = 0
            while time.perf_counter() < stop:
                data = turns[i % len(turns)]
                if cold:  # (a new system prompt and first ask: a new session)
                    cut, task = data.index(_SYSTEM_START), data.index(_TASK_START)
                    data = b"%s[%d] %s[%d] %s" % (data[:cut], sent, data[cut:task], sent,
                                                  data[task:])
                    sent += 1
                async with s.post(url, data=data,
                                  headers={"Content-Type": "application/json"}) as r:
                    await r.read()
                    assert r.status == 200, (r.status, url)
                done += 1
                i += 1
        await asyncio.gather(*(one(t) for t in sessions))
    return done


def _settle(server: Server) -> None:
    """Wait (up to 60 s) until ``server`` is idle: its start-up loads litellm in a thread
    (an Anthropic model is configured), which must not be counted as requests' CPU."""
    deadline = time.monotonic() + 60
    used = server.cpu_seconds()
    while time.monotonic() < deadline:
        time.sleep(0.5)
        now = server.cpu_seconds()
        if now - used < 0.01:
            return
        used = now


def _measure(server: Server, url: str, sessions: list[list[bytes]],
             seconds: float, cold: bool) -> tuple[float, float]:
    """(req/s, CPU µs per request)."""
    before = server.cpu_seconds()
    done = asyncio.run(_load(url, sessions, seconds, cold))
    return done / seconds, (server.cpu_seconds() - before) / done * 1e6


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, nargs="+", default=[30, 300])
    parser.add_argument("--slice", type=float, default=3.0)
    parser.add_argument("--against", type=Path, default=None)
    parser.add_argument("--cold", action="store_true",
                        help="every body one the gateway never saw (a first turn)")
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="gateway-wires-"))
    upstream = start_script("upstream")
    servers = {"passthrough": start_script("passthrough", upstream.url),
               "gateway": start_gateway(upstream.url, tmp, wires=True)}
    if args.against is not None:
        servers["against"] = start_gateway(upstream.url, tmp, root=args.against.resolve(),
                                           wires=True)
    for server in servers.values():
        _settle(server)
    against = " | against req/s / CPU µs" if args.against is not None else ""
    print(f"| history | wire | passthrough req/s / CPU µs | gateway req/s / CPU µs{against} "
          "| gateway ÷ passthrough (CPU) |\n| --- | --- | --- | --- | --- |"
          + (" --- |" if against else ""), flush=True)
    try:
        for n in args.messages:
            for wire in ("chat", "messages", "responses"):
                path, sessions = _turns(wire, n)
                got = {}
                for name, server in servers.items():
                    asyncio.run(_load(server.url + path, sessions, 0.5, args.cold))  # warm
                    got[name] = _measure(server, server.url + path, sessions, args.slice,
                                         args.cold)
                (p_rate, p_cpu), (g_rate, g_cpu) = got["passthrough"], got["gateway"]
                other = ""
                if "against" in got:
                    other = " {:,.0f} / {:,.0f} |".format(*got["against"])
                print(f"| ~{n} msgs | {wire} | {p_rate:,.0f} / {p_cpu:,.0f} | "
                      f"{g_rate:,.0f} / {g_cpu:,.0f} |{other} {g_cpu / p_cpu:.2f}× |",
                      flush=True)
    finally:
        for server in (*servers.values(), upstream):
            server.stop()


if __name__ == "__main__":
    main()
