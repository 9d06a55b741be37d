"""One latency case of ``make bench`` alone, for profiling and A/B runs (a few seconds).

python benchmarks/cold_case.py [--messages 600] [--kind cold|turns] [--broken] [--rounds 3]
[--hold SECONDS] [--setting NAME=JSON]: starts the mock upstream, the passthrough and the
gateway (``--setting`` values go to its ``gateway:`` section), prints the row ``bench.py``
prints for that case and, with ``--hold``, first prints the gateway's pid and keeps the load
running that long (attach ``py-spy`` or ``perf`` to it meanwhile).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench import latency_row, table_header
from bench_load import Traffic, concurrent
from bench_servers import start_gateway, start_script


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=600)
    parser.add_argument("--kind", default="cold", choices=("cold", "turns"))
    parser.add_argument("--broken", action="store_true")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--slice", type=float, default=1.0)
    parser.add_argument("--hold", type=float, default=0.0)
    parser.add_argument("--setting", action="append", default=[],
                        help="NAME=JSON for the gateway's `gateway:` section (repeatable)")
    parser.add_argument("--against", type=Path, default=None,
                        help="another checkout (e.g. a `git worktree` of the last commit): "
                             "its gateway runs beside this one, interleaved (an A/B run)")
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="gateway-case-"))
    upstream = start_script("upstream")
    settings = {name: json.loads(value)
                for name, value in (item.split("=", 1) for item in args.setting)}
    servers = {"passthrough": start_script("passthrough", upstream.url),
               "gateway": start_gateway(upstream.url, tmp, settings=settings)}
    if args.against is not None:
        servers["against"] = start_gateway(upstream.url, tmp, settings=settings,
                                           root=args.against.resolve())
    try:
        traffic = Traffic(args.kind, args.messages, broken_history=args.broken)
        urls = {"direct": upstream.url, **{n: s.url for n, s in servers.items()}}
        cpu = {name: server.cpu_seconds for name, server in servers.items()}
        if args.hold:
            print(f"gateway pid {servers['gateway'].proc.pid}", flush=True)
            only = {"gateway": urls["gateway"]}
            asyncio.run(concurrent(only, traffic, 16, 1, args.hold, {}))
        print(table_header(list(servers)))
        res = asyncio.run(concurrent(urls, traffic, 16, args.rounds, args.slice, cpu))
        print(latency_row(f"~{traffic.messages} msgs, {args.kind}", len(traffic.example) // 1024,
                          "concurrency 16", res))
        if args.against is not None:
            print(latency_row(f"~{traffic.messages} msgs, {args.kind}, against",
                              len(traffic.example) // 1024, "concurrency 16",
                              {"direct": res["direct"], "passthrough": res["passthrough"],
                               "gateway": res["against"]}))
    finally:
        for server in (*servers.values(), upstream):
            server.stop()


if __name__ == "__main__":
    main()
