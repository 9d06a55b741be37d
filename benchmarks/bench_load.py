"""Workloads and load generation for the benchmark: agent histories, interleaved sequential
latency, interleaved throughput at a concurrency, stream time to first byte, open streams."""

from __future__ import annotations

import asyncio
import itertools
import json
import random
import statistics
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import aiohttp

Message = dict[str, Any]
HEADERS = {"Content-Type": "application/json", "Authorization": "Bearer bench"}

_SYSTEM = ("You are a coding agent working in a large repository. Follow the project's "
           "conventions, run the tests after each change, and explain what you did. ") * 40
_TOOLS = [{"type": "function", "function": {
    "name": f"tool_{i}", "description": f"Tool number {i}: does one thing well. " * 6,
    "parameters": {"type": "object", "properties": {
        "path": {"type": "string", "description": "a path in the repository"},
        "limit": {"type": "integer", "description": "how many lines"}},
        "required": ["path"]}}} for i in range(12)]


def agent_history(n_messages: int, seed: int = 7, task: str = "") -> list[Message]:
    """A valid agent history of about ``n_messages`` messages: a long system prompt, then
    turns of user ask -> tool call(s) -> tool result(s) -> assistant answer. Tool outputs
    vary in size; about 0.5 KB a message, like real agent traffic. ``task`` names the
    session in its user messages (sessions of one agent share the system prompt)."""
    rng = random.Random(seed)
    msgs: list[Message] = [{"role": "system", "content": _SYSTEM}]
    turn = 0
    while len(msgs) < n_messages:
        msgs.append({"role": "user", "content": f"{task}step {turn}: look at module_{turn}.py "
                     "and fix the failing test"})
        ids = [f"call_{turn}_{k}" for k in range(rng.choice((1, 1, 2)))]
        msgs.append({"role": "assistant", "content": None, "tool_calls": [
            {"id": cid, "type": "function", "function": {
                "name": "tool_1", "arguments": json.dumps({"path": f"src/m{turn}.py"})}}
            for cid in ids]})
        for cid in ids:
            lines = rng.randint(12, 64)
            msgs.append({"role": "tool", "tool_call_id": cid,
                         "content": "".join(f"{i:4d}  value_{i} = compute({i}, cache)\n"
                                            for i in range(lines))})
        msgs.append({"role": "assistant", "content": f"Fixed module_{turn}.py: the loop "
                     "bound was off by one; tests pass now."})
        turn += 1
    return msgs  # whole turns only: a cut would break the pairing


def broken(msgs: list[Message]) -> list[Message]:
    """The same history broken the way agents break it: a tool result lost in the middle
    (cancelled call), an orphan result, two user messages in a row."""
    out = list(msgs)
    middle = next(i for i in range(len(out) // 2, len(out)) if out[i].get("role") == "tool")
    del out[middle]
    out.insert(3, {"role": "tool", "tool_call_id": "call_gone", "content": "orphan output"})
    out.append({"role": "user", "content": "and also update the changelog"})
    out.append({"role": "user", "content": "then commit"})
    return out


def request_body(msgs: list[Message], *, stream: bool = False, model: str = "bench") -> bytes:
    """The JSON a client sends (tools included, as agents send them)."""
    body: dict[str, Any] = {"model": model, "messages": msgs, "tools": _TOOLS,
                            "temperature": 0}
    if stream:
        body["stream"] = True
    return json.dumps(body).encode()


class Traffic:
    """What each client sends, request after request.

    ``repeat``: the same body every time (a client retrying). ``turns``: agent sessions,
    one per client: each body is the client's previous one with the model's next tool calls
    and their results (or a user message) added, as agents resend their whole history; a
    session starts over after its last turn. ``cold``: every body new to the gateway from
    its first bytes on (each request a session it never saw)."""

    def __init__(self, kind: str, size: int, *, broken_history: bool = False,
                 clients: int = 16, turns: int = 16) -> None:
        self.kind = kind
        shape = broken if broken_history else (lambda m: m)
        if kind == "turns":
            self.sessions = []
            for client in range(clients):
                full = shape(agent_history(size, seed=client, task=f"[task {client}] "))
                # A request is made whenever the model is to answer: after a user message or
                # after the last result of a group of tool calls.
                cuts = [i + 1 for i, m in enumerate(full) if m["role"] in ("user", "tool")
                        and (i + 1 == len(full) or full[i + 1]["role"] != "tool")]
                self.sessions.append([request_body(full[:cut]) for cut in cuts[-turns:]])
            self.example = self.sessions[0][-1]
            self.messages = size
            return
        msgs = shape(agent_history(size))
        self.messages = len(msgs)
        self.example = request_body(msgs)
        if kind == "cold":
            # A new system prompt start on every request: no body ever extends a seen one.
            cut = self.example.index(b"You are a coding agent")
            self._head, self._rest = self.example[:cut], self.example[cut:]
            self._counter = itertools.count()

    def bodies(self, client: int) -> Iterator[bytes]:
        """The bodies one client sends, in order, without end."""
        if self.kind == "turns":
            return itertools.cycle(self.sessions[client % len(self.sessions)])
        if self.kind == "cold":
            return (b"".join((self._head, b"#%012d " % next(self._counter), self._rest))
                    for _ in itertools.count())
        return itertools.repeat(self.example)


def _bodies(body: bytes | Traffic, client: int) -> Iterator[bytes]:
    return body.bodies(client) if isinstance(body, Traffic) else itertools.repeat(body)


@dataclass
class Samples:
    """Latencies (ms) and a request count over a measured time."""

    ms: list[float] = field(default_factory=list)
    seconds: float = 0.0
    errors: int = 0
    cpu_s: float | None = None  # CPU time the server spent on these requests

    @property
    def cpu_us(self) -> float | None:
        """Server CPU microseconds per request."""
        return None if self.cpu_s is None or not self.ms else self.cpu_s / len(self.ms) * 1e6

    @property
    def median(self) -> float:
        return statistics.median(self.ms) if self.ms else float("nan")

    def pct(self, p: float) -> float:
        xs = sorted(self.ms)
        return xs[min(len(xs) - 1, int(len(xs) * p))] if xs else float("nan")

    @property
    def rps(self) -> float:
        return len(self.ms) / self.seconds if self.seconds else 0.0


def session(limit: int = 0) -> aiohttp.ClientSession:
    """A keep-alive client; ``limit`` 0 = unbounded connections."""
    return aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=limit),
                                 timeout=aiohttp.ClientTimeout(total=60))


async def _one(s: aiohttp.ClientSession, url: str, body: bytes) -> float:
    t = time.perf_counter()
    async with s.post(url, data=body, headers=HEADERS) as r:
        await r.read()
        if r.status != 200:
            raise RuntimeError(f"{url}: {r.status} {(await r.text())[:300]}")
    return (time.perf_counter() - t) * 1000


async def sequential(urls: dict[str, str], body: bytes | Traffic, n: int, warmup: int = 20
                     ) -> dict[str, Samples]:
    """One request at a time, the targets interleaved request by request (shuffled order
    each round) so that machine noise falls on all of them alike."""
    out = {name: Samples() for name in urls}
    sessions = {name: session(1) for name in urls}
    bodies = {name: _bodies(body, 0) for name in urls}
    try:
        names = list(urls)
        for i in range(warmup + n):
            random.shuffle(names)
            for name in names:
                ms = await _one(sessions[name], urls[name] + "/v1/chat/completions",
                                next(bodies[name]))
                if i >= warmup:
                    out[name].ms.append(ms)
    finally:
        for s in sessions.values():
            await s.close()
    return out


async def concurrent(urls: dict[str, str], body: bytes | Traffic, conc: int, rounds: int,
                     slice_s: float, cpu: dict[str, Callable[[], float]] | None = None
                     ) -> dict[str, Samples]:
    """``conc`` keep-alive clients hammering one target for ``slice_s`` seconds, targets
    taking turns for ``rounds`` rounds; latencies and throughput summed over the slices,
    and the server's CPU time when ``cpu`` has a reader for it. A target given as base URLs
    joined by ``|`` is a fleet: each client sends its requests to them in turn (round robin,
    no affinity: an agent's consecutive turns land on different replicas)."""
    cpu = cpu or {}
    out = {name: Samples() for name in urls}
    sessions = {name: session(conc) for name in urls}
    bodies = {name: [_bodies(body, client) for client in range(conc)] for name in urls}
    try:
        for name, s in sessions.items():  # open the connections before measuring
            await asyncio.gather(*(_one(s, urls[name].split("|")[0] + "/v1/chat/completions",
                                        next(b)) for b in bodies[name]))
        names = list(urls)
        for _ in range(rounds):
            random.shuffle(names)
            for name in names:
                before = cpu[name]() if name in cpu else 0.0
                await _hammer(sessions[name], urls[name] + "/v1/chat/completions",
                              bodies[name], slice_s, out[name])
                if name in cpu:
                    out[name].cpu_s = (out[name].cpu_s or 0.0) + cpu[name]() - before
    finally:
        for s in sessions.values():
            await s.close()
    return out


async def _hammer(s: aiohttp.ClientSession, url: str, bodies: list[Iterator[bytes]],
                  slice_s: float, into: Samples) -> None:
    start = time.perf_counter()
    stop = start + slice_s

    replicas = [base + "/v1/chat/completions" for base in url.removesuffix(
        "/v1/chat/completions").split("|")]

    async def worker(sends: Iterator[bytes]) -> None:
        turn = itertools.cycle(replicas)
        while time.perf_counter() < stop:
            try:
                into.ms.append(await _one(s, next(turn), next(sends)))
            except (RuntimeError, aiohttp.ClientError, TimeoutError):
                into.errors += 1

    await asyncio.gather(*(worker(sends) for sends in bodies))
    into.seconds += time.perf_counter() - start


async def ttfb(urls: dict[str, str], body: bytes, n: int, warmup: int = 20
               ) -> dict[str, Samples]:
    """Time to the first body byte of a stream (then the stream is read to its end),
    interleaved like :func:`sequential`."""
    out = {name: Samples() for name in urls}
    sessions = {name: session(1) for name in urls}
    try:
        names = list(urls)
        for i in range(warmup + n):
            random.shuffle(names)
            for name in names:
                t = time.perf_counter()
                async with sessions[name].post(urls[name] + "/v1/chat/completions",
                                               data=body, headers=HEADERS) as r:
                    first = await r.content.readany()
                    ms = (time.perf_counter() - t) * 1000
                    rest = await r.read()
                    if r.status != 200 or not first or b"[DONE]" not in first + rest:
                        raise RuntimeError(f"{name}: bad stream {r.status} {first[:200]!r}")
                if i >= warmup:
                    out[name].ms.append(ms)
    finally:
        for s in sessions.values():
            await s.close()
    return out


async def open_streams(url: str, body: bytes, count: int, measure: Any,
                       batch: int = 100) -> tuple[int, float]:
    """Open ``count`` streams to ``url`` (a full URL) that stay open (the upstream holds
    them after the first event), call ``measure()`` while all are open, then close them.
    Returns how many streams were open and what ``measure`` returned."""
    s = session(0)
    opened: list[aiohttp.ClientResponse] = []
    try:
        async def open_one() -> None:
            r = await s.post(url, data=body, headers=HEADERS)
            if r.status == 200 and await r.content.readany():
                opened.append(r)
            else:
                r.close()

        for start in range(0, count, batch):
            await asyncio.gather(*(open_one() for _ in range(min(batch, count - start))),
                                 return_exceptions=True)
        await asyncio.sleep(0.5)  # let the processes settle before reading their memory
        value = float(measure())
    finally:
        for r in opened:
            r.close()
        await s.close()
    return len(opened), value

