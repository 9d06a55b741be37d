"""The project's benchmark (``make bench``): the gateway against the physical floor.

In one run, on 127.0.0.1, interleaved so that machine noise falls on every target alike:
  - targets: the mock upstream directly, a minimal aiohttp passthrough (the floor any aiohttp
    proxy pays), the gateway (one worker, repair on) and the LiteLLM proxy when
    ``litellm[proxy]`` is installed;
  - agent histories of 30, 300 and 600+ messages (about 0.5 KB a message, a long system
    prompt and 12 tools), valid and broken, one request at a time and at concurrency 16,
    sent as agents send them (each client a session: every turn resends the history with
    the next messages added), and as bodies the gateway never saw (its worst case);
  - a fleet: agent turns on two replicas, each client's requests alternating between them
    (no affinity), CPU summed over both;
  - stream time to first byte; memory (RSS) with 1,000 concurrent open streams;
  - ``--workers 2`` against one worker.
Prints added median/p99 (over the direct upstream), req/s and the ratios to the passthrough,
then the issue's targets with met/missed. Usage: python benchmarks/bench.py [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import platform
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import aiohttp
from bench_load import (
    Samples,
    Traffic,
    agent_history,
    concurrent,
    open_streams,
    request_body,
    sequential,
    ttfb,
)
from bench_servers import (
    Server,
    litellm_proxy_available,
    start_gateway,
    start_litellm,
    start_script,
)

SIZES = (30, 300, 600)


@dataclass
class Check:
    """One performance target (docs/performance.md) and whether this run met it."""

    what: str
    value: str
    met: bool


def machine() -> str:
    """CPU model, cores, memory, OS, Python and aiohttp versions."""
    cpu = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
        mem_kb = int(Path("/proc/meminfo").read_text().split()[1])
        mem = f"{mem_kb / 1024 / 1024:.0f} GB RAM"
    except (OSError, ValueError, IndexError):
        mem = "? GB RAM"
    return (f"{cpu}, {os.cpu_count()} cores, {mem}, {platform.system()} "
            f"{platform.release()}, Python {platform.python_version()}, "
            f"aiohttp {aiohttp.__version__}")


def _ms(x: float) -> str:
    return f"{x:.2f}"


def _ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}×" if b > 0 else "n/a"


def latency_row(label: str, kb: int, mode: str, res: dict[str, Samples]) -> str:
    """One markdown row: direct, then per proxy the added median / p99 and req/s."""
    direct = res["direct"]
    cells = [label, str(kb), mode, f"{_ms(direct.median)} / {direct.rps:,.0f}"]
    pt = res["passthrough"]
    pt_added = pt.median - direct.median
    for name in ("passthrough", "gateway", "litellm proxy"):
        if name not in res:
            continue
        s = res[name]
        added = s.median - direct.median
        cpu = f" / {s.cpu_us:,.0f}" if s.cpu_us is not None else ""
        cells.append(f"+{_ms(added)} / {_ms(s.pct(0.99))} / {s.rps:,.0f}{cpu}")
        if name != "passthrough":
            ratio = f"{_ratio(added, pt_added)} / {_ratio(s.rps, pt.rps)}"
            if s.cpu_us is not None and pt.cpu_us:
                ratio += f" / {_ratio(s.cpu_us, pt.cpu_us)}"
            cells.append(ratio)
    return "| " + " | ".join(cells) + " |"


def table_header(names: list[str]) -> str:
    """The header of the latency table."""
    cols = ["history", "KB", "mode", "direct median ms / req/s",
            "passthrough added ms / p99 ms / req/s [/ CPU µs per req]"]
    for name in names:
        if name != "passthrough":
            cols += [f"{name} added ms / p99 ms / req/s [/ CPU µs per req]",
                     f"{name} ÷ passthrough (added / req/s [/ CPU])"]
    return "| " + " | ".join(cols) + " |\n|" + " --- |" * len(cols)


async def run(args: argparse.Namespace, servers: dict[str, Server], upstream: Server,
              tmp: Path) -> list[Check]:
    """Every measurement, in order; returns the targets."""
    checks: list[Check] = []
    urls = {"direct": upstream.url, **{n: s.url for n, s in servers.items()}}
    parts = set(args.only.split(","))
    if "latency" in parts:
        checks += await _latency(args, urls, servers)
    if "streams" in parts:
        checks.append(await _streams(args, urls))
    if "memory" in parts:
        checks.append(await _memory(args, servers, upstream, tmp))
    if "fleet" in parts:
        await _fleet(args, servers, upstream, tmp)
    if "workers" in parts:
        checks.append(await _workers(args, upstream, servers["gateway"], tmp))
    if "savings" in parts:
        from condense_savings import report

        print(report(turns=40 if args.quick else 60), flush=True)
    return checks


async def _latency(args: argparse.Namespace, urls: dict[str, str], servers: dict[str, Server]
                   ) -> list[Check]:
    checks: list[Check] = []
    gateway_cpu: dict[tuple[int, str], float] = {}  # (size, traffic kind) -> µs per request
    proxies = list(servers)
    cpu = {name: server.cpu_seconds for name, server in servers.items()}
    print(table_header(proxies), flush=True)
    for size in SIZES:
        # What agents send: sessions whose every turn resends the history with a few
        # messages added (valid and broken); then bodies the gateway never saw before.
        for kind, traffic_kind, modes in (("valid", "turns", ("sequential", "concurrency 16")),
                                          ("broken", "turns", ("concurrency 16",)),
                                          ("valid", "cold", ("concurrency 16",))):
            traffic = Traffic(traffic_kind, size, broken_history=kind == "broken")
            label = (f"~{traffic.messages} msgs, {kind}, "
                     f"{'agent turns' if traffic_kind == 'turns' else 'never seen'}")
            kb = len(traffic.example) // 1024
            for mode in modes:
                if mode == "sequential":
                    res = await sequential(urls, traffic, args.requests)
                    for s in res.values():  # sequential: req/s is one over the mean latency
                        s.seconds = sum(s.ms) / 1000
                else:
                    res = await concurrent(urls, traffic, 16, args.rounds, args.slice, cpu)
                print(latency_row(label, kb, mode, res), flush=True)
                if mode != "sequential" and traffic_kind == "turns":
                    checks += _latency_checks(size, kind, res)
                if mode != "sequential" and kind == "valid" and res["gateway"].cpu_us:
                    gateway_cpu[(size, traffic_kind)] = res["gateway"].cpu_us
    print()
    checks += _added_work(gateway_cpu)
    return checks


def _added_work(gateway_cpu: dict[tuple[int, str], float]) -> list[Check]:
    """What two optional pieces of work cost, as a share of the gateway's CPU per request
    just measured: the context breakdown with prefix tracking (``context_report``) and the
    invisible-character precheck. Timed in this process on the same bodies, the way the
    gateway runs them (a turn over the one before it; a never-seen body whole). The
    context report's counting happens inside the read (validation of a turn's added
    messages, the typed read's walk of a new body): its share there is the read with
    counting less the read without."""
    import orjson

    from gateway.projection.invisible import may_hold
    from gateway.telemetry import context as telemetry_context
    from gateway.telemetry.context import ContextMemo, CountedMessages, EdgeTurn, common_prefix
    from gateway.telemetry.prefix import PrefixTracker, PromptHead
    from gateway.wires.chat_typed import read_clean_chat
    from gateway.wires.chat_validation import read_chat_body

    checks = []
    for (size, traffic_kind), cpu_us in sorted(gateway_cpu.items()):
        traffic = Traffic(traffic_kind, size)
        # Sixteen sessions, their turns interleaved as the load sends them (never seen: one
        # turn each, all of the same body).
        sessions = (traffic.sessions if traffic_kind == "turns"
                    else [[traffic.example] for _ in range(16)])
        # (session, messages, body, prompt head, messages validated before, edge count)
        order: list[tuple[str, list[Any], dict[str, Any], Any, int,
                          CountedMessages | None]] = []
        added: list[bytes] = []
        for number, bodies in enumerate(sessions):
            last = orjson.loads(bodies[-1])
            head = PromptHead.of(last)
            checked = 0
            for turn, raw in enumerate(bodies):
                # Turns share the earlier turn's message objects, as the edge's read does.
                count = len(orjson.loads(raw)["messages"])
                body = {**last, "messages": last["messages"][:count]}
                counted = read_chat_body(body, checked=checked, count=True)[1]
                order.append((f"s{number}", body["messages"], body, head, checked, counted))
                checked = count
                # Only the bytes a turn adds are searched (the first turn's whole body).
                added.append(raw[common_prefix(bodies[turn - 1], raw):] if turn else raw)
        order.sort(key=lambda entry: len(entry[1]))  # turn by turn, across the sessions
        precheck = _per_call(lambda added=added: [may_hold(b) for b in added], len(added))
        # The same bytes as a model writes its prose: dashes and curly quotes (UTF-8, and
        # the lead byte most invisible characters share).
        prose = [b.replace(b": the", b": \xe2\x80\x9cthe").replace(b"; ", b" \xe2\x80\x94 ")
                 for b in added]
        precheck_utf8 = _per_call(lambda prose=prose: [may_hold(b) for b in prose], len(prose))

        def validate(count: bool, order: list[Any] = order) -> None:
            for _, _, body, _, checked, _ in order:
                read_chat_body(body, checked=checked, fields_checked=True, count=count)

        def typed(count: bool, bodies: list[bytes] = added) -> None:
            for raw in bodies:
                read_clean_chat(raw, count=count)

        # A never-seen body the gateway can take without building it is counted in the
        # typed read's walk (wires/chat_typed.py); a turn over the previous one, while
        # validating its added messages.
        counting = (_marginal(lambda: typed(True), lambda: typed(False), len(added))
                    if traffic_kind != "turns" else
                    _marginal(lambda: validate(True), lambda: validate(False), len(order)))

        def context(order: list[Any] = order) -> None:
            # A session's first turn serializes its tool schemas.
            telemetry_context.forget_schemas()
            memo, tracker = ContextMemo(), PrefixTracker()
            last_turn: dict[str, object] = {}
            for key, messages, body, head, checked, counted in order:
                edge = EdgeTurn(object(), last_turn.get(key), checked, counted)
                last_turn[key] = edge.turn
                memo.breakdown(key, messages, body, edge=edge)
                tracker.observe(key, head, messages, None, edge)

        report = counting + _per_call(context, len(order))
        what = "agent turns" if traffic_kind == "turns" else "never seen"
        print(f"added work, ~{size} msgs {what} (gateway {cpu_us:,.0f} µs CPU per request): "
              f"context report {report:,.1f} µs ({report / cpu_us:.1%}; counting while "
              f"validating {counting:,.1f} µs), invisible precheck "
              f"{precheck:,.1f} µs ({precheck / cpu_us:.1%}; with the prose in UTF-8 "
              f"{precheck_utf8:,.1f} µs, {precheck_utf8 / cpu_us:.1%})", flush=True)
        checks.append(Check(f"context report, ~{size} msgs {what}: under 5% of the request",
                            f"{report / cpu_us:.1%}", report < 0.05 * cpu_us))
        checks.append(Check(f"invisible precheck, ~{size} msgs {what}: under 3% of the request",
                            f"{precheck / cpu_us:.1%} ({precheck_utf8 / cpu_us:.1%} with the "
                            "prose in UTF-8)", max(precheck, precheck_utf8) < 0.03 * cpu_us))
    print()
    return checks


def _per_call(work: Callable[[], object], calls: int, repeat: int = 5) -> float:
    """The best of ``repeat`` runs of ``work`` (which makes ``calls`` calls), µs per call."""
    best = float("inf")
    for _ in range(repeat):
        started = time.perf_counter()
        work()
        best = min(best, time.perf_counter() - started)
    return best / calls * 1e6


def _marginal(work: Callable[[], object], without: Callable[[], object], calls: int,
              repeat: int = 25) -> float:
    """What ``work`` costs more than ``without`` (the same calls less one piece of work), µs
    per call: the best of each over ``repeat`` interleaved runs (so that both see the same
    state of the machine)."""
    best = [float("inf"), float("inf")]
    for _ in range(repeat):
        for i, run in enumerate((work, without)):
            started = time.perf_counter()
            run()
            best[i] = min(best[i], time.perf_counter() - started)
    return max(0.0, best[0] - best[1]) / calls * 1e6


def _latency_checks(size: int, kind: str, res: dict[str, Samples]) -> list[Check]:
    d, pt, gw = res["direct"], res["passthrough"], res["gateway"]
    added, pt_added = gw.median - d.median, pt.median - d.median
    # Noise can put the passthrough's median under the direct one: no ratio then.
    ratio = added / pt_added if pt_added > 0 else float("nan")
    shown = f"{ratio:.2f}×" if pt_added > 0 else "n/a (noise: passthrough added ≤ 0)"
    out = []
    if kind == "valid" and size in (30, 600):
        out.append(Check(f"valid {size} msgs, c16: added median ≤ 1.2× passthrough",
                         shown, ratio <= 1.2))
        tput = gw.rps / pt.rps if pt.rps else 0.0
        out.append(Check(f"valid {size} msgs, c16: req/s ≥ 0.8× passthrough",
                         f"{tput:.2f}×", tput >= 0.8))
    if kind == "broken":
        out.append(Check(f"broken {size} msgs, c16: added median ≤ 1.5× passthrough",
                         shown, ratio <= 1.5))
    return out


async def _streams(args: argparse.Namespace, urls: dict[str, str]) -> Check:
    body = request_body(agent_history(30), stream=True)
    res = await ttfb({k: v for k, v in urls.items() if k != "litellm proxy"}, body,
                     args.requests)
    d = res["direct"].median
    print("stream time to first byte (30 msgs): " + ", ".join(
        f"{name} median {_ms(s.median)} ms p99 {_ms(s.pct(0.99))} ms (+{_ms(s.median - d)})"
        for name, s in res.items()), flush=True)
    over = res["gateway"].median - res["passthrough"].median
    return Check("stream TTFB overhead over the passthrough ≤ 1 ms", f"{over:.2f} ms",
                 over <= 1.0)


async def _memory(args: argparse.Namespace, servers: dict[str, Server], upstream: Server,
                  tmp: Path) -> Check:
    n = args.streams
    found: dict[str, tuple[float, float, int]] = {}
    for name in ("passthrough", "gateway"):
        server = servers[name]
        idle = server.rss_mb()
        if name == "gateway":
            url, model = server.url + "/v1/chat/completions", "hold"
        else:
            url, model = server.url + "/hold/v1/chat/completions", "bench"
        body = request_body(agent_history(30), stream=True, model=model)
        opened, rss = await open_streams(url, body, n, server.rss_mb)
        found[name] = (idle, rss, opened)
        print(f"{name}: RSS {idle:.0f} MB idle, {rss:.0f} MB with {opened} open streams",
              flush=True)
    idle, rss, opened = found["gateway"]
    # The same on a fresh gateway that keeps no bodies (history_cache_mb: 0): the streams
    # without the history cache (32 MB by default) and what the earlier parts left behind.
    fresh = start_gateway(upstream.url, tmp, settings={"history_cache_mb": 0})
    try:
        body = request_body(agent_history(30), stream=True, model="hold")
        idle_off = fresh.rss_mb()
        opened_off, rss_off = await open_streams(fresh.url + "/v1/chat/completions", body, n,
                                                 fresh.rss_mb)
    finally:
        fresh.stop()
    print(f"gateway, fresh, history_cache_mb 0: RSS {idle_off:.0f} MB idle, {rss_off:.0f} MB "
          f"with {opened_off} open streams", flush=True)
    return Check(f"{n:,} open streams: gateway RSS < 150 MB", f"{rss:.0f} MB ({opened} open)",
                 rss < 150 and opened == n)


async def _fleet(args: argparse.Namespace, servers: dict[str, Server], upstream: Server,
                 tmp: Path) -> None:
    """Agent turns on two replicas without affinity: each client's requests alternate
    between them, so a replica sees every other turn of a session (read over the turn it saw
    two turns before)."""
    pt, one, two = servers["passthrough"], servers["gateway"], start_gateway(upstream.url, tmp)
    try:
        print("| fleet: agent turns, concurrency 16 | passthrough added ms / req/s / CPU µs "
              "per req | 1 gateway | 2 replicas, round robin | 2 replicas ÷ passthrough "
              "(added / req/s / CPU) |\n| --- | --- | --- | --- | --- |", flush=True)
        for size in (30, 600):
            traffic = Traffic("turns", size)
            targets = {"direct": upstream.url, "passthrough": pt.url, "gateway": one.url,
                       "fleet": f"{one.url}|{two.url}"}
            cpu = {"passthrough": pt.cpu_seconds, "gateway": one.cpu_seconds,
                   "fleet": lambda: one.cpu_seconds() + two.cpu_seconds()}
            res = await concurrent(targets, traffic, 16, args.rounds, args.slice, cpu)
            d = res["direct"].median
            cells = [f"+{_ms(res[n].median - d)} / {res[n].rps:,.0f} / "
                     f"{res[n].cpu_us or 0:,.0f}" for n in ("passthrough", "gateway", "fleet")]
            base, fleet = res["passthrough"], res["fleet"]
            ratio = (f"{_ratio(fleet.median - d, base.median - d)} / "
                     f"{_ratio(fleet.rps, base.rps)} / "
                     f"{_ratio(fleet.cpu_us or 0.0, base.cpu_us or 0.0)}")
            print(f"| ~{size} msgs | " + " | ".join(cells) + f" | {ratio} |", flush=True)
        print()
    finally:
        two.stop()


async def _workers(args: argparse.Namespace, upstream: Server, one: Server,
                   tmp: Path) -> Check:
    two = start_gateway(upstream.url, tmp, workers=2)
    try:
        # Work that keeps the gateway busy (600-message bodies it never saw: read whole),
        # so that a second core has something to take over from the first. (On agent turns
        # one worker no longer saturates a core here: the client and the upstream do.)
        traffic = Traffic("cold", 600)
        res = await concurrent({"1 worker": one.url, "2 workers": two.url}, traffic,
                               args.worker_concurrency, args.rounds, args.slice)
    finally:
        two.stop()
    a, b = res["1 worker"].rps, res["2 workers"].rps
    print(f"--workers, ~600 msgs never seen, concurrency {args.worker_concurrency}: "
          f"1 worker {a:,.0f} req/s, 2 workers {b:,.0f} req/s ({_ratio(b, a)})", flush=True)
    # Above by more than this machine's run-to-run noise (about ±10%), not by a request.
    return Check("--workers 2 above one worker (by 10% or more)", _ratio(b, a), b >= 1.1 * a)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=200, help="sequential, per target")
    parser.add_argument("--rounds", type=int, default=3, help="concurrent slices per target")
    parser.add_argument("--slice", type=float, default=1.0, help="seconds per slice")
    parser.add_argument("--streams", type=int, default=1000, help="open streams for RSS")
    parser.add_argument("--worker-concurrency", type=int, default=16)
    parser.add_argument("--only", default="latency,fleet,streams,memory,workers,savings",
                        help="comma-separated parts to run (default: all)")
    parser.add_argument("--no-litellm", action="store_true")
    parser.add_argument("--quick", action="store_true", help="a smoke run (seconds)")
    args = parser.parse_args()
    if args.quick:
        args.requests, args.rounds, args.slice, args.streams = 20, 1, 0.3, 100
    _install_uvloop()
    started = time.monotonic()
    print(f"# gateway benchmark, {time.strftime('%Y-%m-%d %H:%M %Z')}\n\nmachine: {machine()}"
          f"\nload average at start: {os.getloadavg()[0]:.2f} (the client, the upstream and "
          "every proxy share these cores)\n", flush=True)
    tmp = Path(tempfile.mkdtemp(prefix="gateway-bench-"))
    started_servers: list[Server] = []
    try:
        upstream = start_script("upstream")
        started_servers.append(upstream)
        servers = {"passthrough": start_script("passthrough", upstream.url)}
        started_servers.append(servers["passthrough"])
        servers["gateway"] = start_gateway(upstream.url, tmp)
        started_servers.append(servers["gateway"])
        if args.no_litellm:
            print("LiteLLM proxy: skipped (--no-litellm)\n")
        elif litellm_proxy_available():
            servers["litellm proxy"] = start_litellm(upstream.url, tmp)
            started_servers.append(servers["litellm proxy"])
        else:
            print("LiteLLM proxy: not installed (pip install 'litellm[proxy]'), skipped\n")
        checks = asyncio.run(run(args, servers, upstream, tmp))
    finally:
        for server in reversed(started_servers):
            server.stop()
    print("\n| target | this run | met |\n| --- | --- | --- |")
    for c in checks:
        print(f"| {c.what} | {c.value} | {'yes' if c.met else 'no'} |")
    print(f"\n{sum(c.met for c in checks)}/{len(checks)} targets met; "
          f"{time.monotonic() - started:.0f} s; load average at end "
          f"{os.getloadavg()[0]:.2f}; median of medians is robust, p99 is noisy on shared "
          f"cores")



def _install_uvloop() -> None:
    """The client runs on uvloop too when available (the servers install their own)."""
    with contextlib.suppress(ImportError):
        import uvloop

        uvloop.install()

if __name__ == "__main__":
    main()
