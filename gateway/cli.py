"""``gateway serve | check | report | referee``."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import logging
import os
import signal
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

EXIT_OK, EXIT_REPAIRED, EXIT_UNUSABLE = 0, 1, 2
GC_THRESHOLD = (100_000, 20, 100)
# Seconds a thread waiting for the GIL waits before the running one must hand it over.
SWITCH_INTERVAL = 0.0005
THREADS_WAIT = 1.0  # seconds a closed server waits for its background threads to finish


def _setup_logging(level: str, fmt: str = "text") -> None:
    from gateway.telemetry.access_log import setup_logging

    setup_logging(level, fmt)


def _install_uvloop() -> None:
    with contextlib.suppress(ImportError):
        import uvloop

        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())


async def _serve(config_path: str, host: str, port: int, reuse_port: bool,
                 master_pid: int | None = None) -> int:
    from aiohttp import web

    from gateway.config import load_config
    from gateway.server.app import create_app
    from gateway.server.http import GatewayRunner
    from gateway.server.relay import DRAIN_MARGIN
    from gateway.supervisor import EXIT_MARGIN, parent_gone

    log = logging.getLogger("gateway")
    # The loop's thread pool, owned here so that shutting down never waits on it unbounded.
    executor = ThreadPoolExecutor(thread_name_prefix="gateway-io")
    asyncio.get_running_loop().set_default_executor(executor)
    config = load_config(config_path)
    grace = config.gateway.shutdown_grace
    app = create_app(config)
    # After SIGTERM, requests in flight get ``grace`` seconds to finish; then open streams
    # end with their wire's error event, and DRAIN_MARGIN seconds later the rest is cancelled.
    runner = GatewayRunner(app, handler_cancellation=True, access_log=None,
                           shutdown_timeout=grace + DRAIN_MARGIN,
                           header_timeout=config.gateway.header_timeout)
    await runner.setup()
    site = web.TCPSite(runner, host, port, reuse_port=reuse_port or None, backlog=1024)
    try:
        await site.start()
    except OSError as err:
        log.error("cannot listen on %s:%d: %s", host, port, err.strerror or err)
        await runner.cleanup()
        return EXIT_UNUSABLE
    # Start-up objects (config, routes, model map) live for the whole process: keep them out
    # of the cyclic collector's full passes, which would otherwise scan them on the hot path.
    gc.freeze()
    # A parsed history is thousands of containers, alive only during its request and freed by
    # reference counting. At the default threshold (700) the collector ran several times per
    # request, walking every history in flight: ~15% of the CPU at 300 KB. Cycles still get
    # collected, every GC_THRESHOLD net allocations.
    gc.set_threshold(*GC_THRESHOLD)
    # The background threads (the response store's writer, bodies parsed off the loop) get
    # the GIL only when the loop's thread hands it over, which under load it does only when
    # asked: at the default 5 ms per handover the store's writer kept ~80 answers a second
    # and fell behind the traffic. 0.5 ms: the writer keeps up, the loop pays nothing
    # measurable (docs/performance.md).
    sys.setswitchinterval(SWITCH_INTERVAL)
    log.info("serving on http://%s:%d (pid %d, %d models)", host, port, os.getpid(),
             len(config.model_list))
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, stop.set)
    if master_pid is not None:
        while not stop.is_set() and not parent_gone(master_pid):
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), 1.0)
        if not stop.is_set():
            log.warning("the master process is gone: worker %d stops", os.getpid())
    else:
        await stop.wait()
    deadline = loop.time() + grace + EXIT_MARGIN
    try:
        await asyncio.wait_for(runner.cleanup(), grace + EXIT_MARGIN)
    except TimeoutError:
        log.error("shutdown did not finish within the grace period: exiting anyway")
    await _leave_by(executor, deadline)
    return 0


async def _leave_by(executor: ThreadPoolExecutor, deadline: float) -> None:
    """Wait for the background threads (``executor``, the loop's default) ``THREADS_WAIT``
    seconds (and not past ``deadline``) at most; then exit the process at once. A thread
    still busy (litellm's import takes seconds and cannot be interrupted) would otherwise
    hold the process after the server closed: the loop's own ``shutdown_default_executor``
    joins it without a bound."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[None] = loop.create_future()

    def finished() -> None:
        if not done.done():
            done.set_result(None)

    def shut_down() -> None:
        executor.shutdown(wait=True)
        loop.call_soon_threadsafe(finished)

    threading.Thread(target=shut_down, name="gateway-exit", daemon=True).start()
    try:
        await asyncio.wait_for(done, max(0.1, min(deadline - loop.time(), THREADS_WAIT)))
    except TimeoutError:
        logging.getLogger("gateway").warning(
            "the server is closed; exiting without waiting for a background thread")
        logging.shutdown()
        os._exit(0)


def _serve_process(config_path: str, host: str, port: int, reuse_port: bool, level: str,
                   fmt: str = "text", master_pid: int | None = None) -> None:
    if master_pid is not None:
        from gateway.supervisor import die_with_parent, parent_gone

        die_with_parent()
        if parent_gone(master_pid):  # the master died before the line above
            sys.exit(0)
    _setup_logging(level, fmt)
    _install_uvloop()
    code = asyncio.run(_serve(config_path, host, port, reuse_port, master_pid))
    if code:
        sys.exit(code)


def cmd_serve(args: argparse.Namespace) -> int:
    """Validate the config, then serve (N worker processes share the port)."""
    from gateway.config import ConfigError, load_config

    try:
        config = load_config(args.config)
    except ConfigError as err:
        print(f"gateway: {err}", file=sys.stderr)
        return EXIT_UNUSABLE
    host = args.host or config.gateway.host
    port = args.port if args.port is not None else config.gateway.port
    level, fmt = config.gateway.log_level, config.gateway.log_format
    if not _safe_to_serve(args.config, config, host, port, level):
        return EXIT_UNUSABLE
    workers = max(1, args.workers)
    from gateway.telemetry import multiproc

    multiproc.prepare(workers)  # one metrics directory for all workers, emptied at start
    if workers == 1:
        _setup_logging(level, fmt)
        _install_uvloop()
        return asyncio.run(_serve(args.config, host, port, False))
    from gateway.supervisor import Supervisor, check_port

    _setup_logging(level, fmt)
    problem = check_port(host, port)
    if problem is not None:
        print(f"gateway: {problem}", file=sys.stderr)
        return EXIT_UNUSABLE
    supervisor = Supervisor(workers, _serve_process,
                            (args.config, host, port, True, level, fmt),
                            grace=config.gateway.shutdown_grace,
                            on_exit=multiproc.worker_exited)
    return supervisor.run()


def _safe_to_serve(config_path: str, config: Any, host: str, port: int, level: str) -> bool:
    """Refuse an open relay; warn once about no client keys or readable literal secrets."""
    from gateway.security import exposure, hygiene_warnings

    refusal, warning = exposure(config, host, port)
    if refusal is not None:
        print(f"gateway: {refusal}", file=sys.stderr)
        return False
    _setup_logging(level, config.gateway.log_format)
    log = logging.getLogger("gateway.security")
    for text in ([warning] if warning else []) + hygiene_warnings(config_path):
        log.warning("%s", text)
    return True


def cmd_check_config(args: argparse.Namespace) -> int:
    """Validate a config and print it resolved, every secret masked."""
    from gateway.security import check_config_command

    return check_config_command(args.file)


def cmd_purge(args: argparse.Namespace) -> int:
    """Remove stored sessions (records and archives)."""
    from gateway.security import purge_command

    return purge_command(args)


def cmd_check(args: argparse.Namespace) -> int:
    """Lint a saved chat request or a bare messages list."""
    from gateway.projection import project, project_strict
    from gateway.server.errors import ClientError
    from gateway.wires.chat_validation import validate_chat_body

    try:
        text = sys.stdin.read() if args.file == "-" else Path(args.file).read_text(
            encoding="utf-8")
        data = json.loads(text)
    except (OSError, UnicodeDecodeError, ValueError) as err:
        print(f"gateway check: cannot read {args.file}: {err}", file=sys.stderr)
        return EXIT_UNUSABLE
    body = {"messages": data} if isinstance(data, list) else data
    if not isinstance(body, dict):
        print(f"gateway check: {args.file} holds neither a chat request nor a messages list",
              file=sys.stderr)
        return EXIT_UNUSABLE
    from gateway.wires.dryrun import detect_wire

    wire = args.wire or detect_wire(body)
    if wire != "chat":
        return _check_wire(args, body, wire)
    try:
        messages = validate_chat_body(body)
    except ClientError as err:
        print(f"gateway check: {args.file}: {err.message}", file=sys.stderr)
        return EXIT_UNUSABLE
    projection = project_strict(messages) if args.strict else project(messages)
    from gateway.wires.dryrun import dry_run

    found = dry_run(body, "chat", args.strict)
    if args.json:
        print(json.dumps({
            "repaired": projection.repaired,
            "counts": projection.counts(),
            "anomalies": [a.as_dict() for a in projection.anomalies],
            "messages": projection.messages,
            "violations": found["violations"],
            "invisible": found["invisible"],
        }, indent=2, ensure_ascii=False))
    elif not projection.repaired:
        print(f"{args.file}: ok, {len(messages)} messages need no repair")
    else:
        print(f"{args.file}: {len(projection.anomalies)} repairs "
              f"({len(messages)} -> {len(projection.messages)} messages)")
        for a in projection.anomalies:
            where = f"message {a.index}" if a.index is not None else "new message"
            call = f" tool_call_id={a.tool_call_id}" if a.tool_call_id else ""
            trailing = " (trailing)" if a.trailing else ""
            print(f"  {a.kind}: {where}{call}{trailing}")
    if not args.json:
        _print_findings(found)
    return EXIT_REPAIRED if projection.repaired else EXIT_OK


def _print_findings(result: dict[str, Any]) -> None:
    """The violations as the ``reject`` policy lists them, and the invisible characters."""
    violations = result["violations"]
    if violations:
        print("  violations (what a reject policy answers):")
        for v in violations:
            index = v.get("message", v.get("item"))
            where = ("" if index is None
                     else f"{'input' if 'item' in v else 'messages'}[{index}] ")
            call = f" tool_call_id={v['tool_call_id']}" if v.get("tool_call_id") else ""
            print(f"    {where}{v['rule']}{call}: {v['explanation']}; "
                  f"would {v['repair']}")
    invisible = result["invisible"]
    if invisible["total"]:
        print(f"  invisible characters: {invisible['total']} "
              f"({', '.join(f'{k}={n}' for k, n in invisible['counts'].items())})")
        for f in invisible["findings"]:
            print(f"    {f['path']} offset {f['offset']}: {f['count']} {f['kind']}"
                  + (f" hidden text: {f['hidden_text']!r}" if f.get("hidden_text") else ""))


def _check_wire(args: argparse.Namespace, body: dict[str, Any], wire: str) -> int:
    """``gateway check`` of a Responses or Anthropic Messages request."""
    from gateway.server.errors import ClientError
    from gateway.wires.dryrun import dry_run

    try:
        result = dry_run(body, wire, args.strict)
    except ClientError as err:
        print(f"gateway check: {args.file}: {err.message}", file=sys.stderr)
        return EXIT_UNUSABLE
    if args.json:
        print(json.dumps(result, indent=2, ensure_ascii=False))
    elif not result["repaired"]:
        print(f"{args.file}: ok ({wire}), nothing to repair")
    else:
        counts = ", ".join(f"{k}={v}" for k, v in result["counts"].items())
        print(f"{args.file}: {len(result['anomalies'])} repairs ({wire}): {counts}")
    if not args.json:
        _print_findings(result)
    return EXIT_REPAIRED if result["repaired"] else EXIT_OK


def _inspector_entries(config_path: str, command: str, since: float, until: float,
                       ) -> tuple[Any, list[dict[str, Any]]] | None:
    """The config and the inspector's stored requests between ``since`` and ``until``
    (None, with the reason on stderr, when either cannot be read)."""
    from gateway.config import ConfigError, load_config
    from gateway.telemetry.report import read_entries

    try:
        config = load_config(config_path)
    except ConfigError as err:
        print(f"gateway {command}: {err}", file=sys.stderr)
        return None
    try:
        entries = read_entries(config.sessions.data_dir, since, until)
    except FileNotFoundError as err:
        print(f"gateway {command}: no inspector store at {err}: it reads the requests the "
              "inspector keeps (gateway.ui: true)", file=sys.stderr)
        return None
    return config, entries


def cmd_report(args: argparse.Namespace) -> int:
    """Per owner and model: requests, share needing repair, top kinds, rejections."""
    import time

    from gateway.telemetry.report import summarize, table

    until = time.time()
    read = _inspector_entries(args.config, "report", until - args.hours * 3600, until)
    if read is None:
        return EXIT_UNUSABLE
    config, entries = read
    rows = summarize(entries)
    if args.json:
        print(json.dumps([r.as_dict() for r in rows], indent=2, ensure_ascii=False))
    else:
        print(f"{len(entries)} requests in the last {args.hours:g} h "
              f"(the inspector keeps the last {config.gateway.ui_history})")
        print(table(rows))
    return EXIT_OK


def cmd_cache_advice(args: argparse.Namespace) -> int:
    """A captured session's prefix stability, cache hit ratio and what would raise it."""
    from gateway.telemetry.advice import advise

    read = _inspector_entries(args.config, "cache-advice", 0.0, float("inf"))
    if read is None:
        return EXIT_UNUSABLE
    _, entries = read
    session = [e for e in entries if e.get("session_id") == args.session]
    if not session:
        print(f"gateway cache-advice: no request of session {args.session!r} in the "
              "inspector's store", file=sys.stderr)
        return EXIT_UNUSABLE
    result = advise(session)
    if args.json:
        print(json.dumps(result.as_dict(), indent=2, ensure_ascii=False))
        return EXIT_OK
    ratio = "not reported" if result.hit_ratio is None else f"{result.hit_ratio:.0%}"
    causes = ", ".join(f"{k} {v}" for k, v in sorted(result.causes.items()))
    print(f"session {args.session}: {result.turns} turns ({causes}); about "
          f"{result.lost_tokens} tokens put out of the cacheable prefix; cache hit ratio "
          f"{ratio}")
    for tip in result.advice:
        print(f"- {tip}")
    return EXIT_OK


def cmd_referee(args: argparse.Namespace) -> int:
    """Run the strict local upstream."""
    from gateway.referee import run_referee

    _setup_logging("info")
    _install_uvloop()
    run_referee(args.host, args.port, rules=args.rules, style=args.style)
    return EXIT_OK


def build_parser() -> argparse.ArgumentParser:
    """The command-line interface."""
    parser = argparse.ArgumentParser(prog="gateway", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="serve the gateway")
    serve.add_argument("--config", default="configs/gateway.yaml")
    serve.add_argument("--host")
    serve.add_argument("--port", type=int)
    serve.add_argument("--workers", type=int, default=1)
    serve.set_defaults(func=cmd_serve)
    check = sub.add_parser("check", help="lint a saved chat request or messages list")
    check.add_argument("file", help="a JSON chat request or messages list ('-' for stdin)")
    check.add_argument("--strict", action="store_true")
    check.add_argument("--json", action="store_true")
    check.add_argument("--wire", choices=["chat", "responses", "anthropic"],
                       help="the request's wire (default: detected from its shape)")
    check.set_defaults(func=cmd_check)
    check_config = sub.add_parser("check-config",
                                  help="validate a config; print it resolved, secrets masked")
    check_config.add_argument("file")
    check_config.set_defaults(func=cmd_check_config)
    purge = sub.add_parser("purge", help="remove stored sessions (records and archives)")
    purge.add_argument("--config", default="configs/gateway.yaml")
    what = purge.add_mutually_exclusive_group()
    what.add_argument("--session", metavar="ID", help="this session id, under every owner")
    what.add_argument("--older-than", type=float, metavar="DAYS",
                      help="sessions last written more than DAYS ago (default: the "
                      "configured sessions.retention_days)")
    purge.set_defaults(func=cmd_purge)
    report = sub.add_parser("report", help="per owner and model: requests needing repair, "
                            "top repair kinds, rejections (from the inspector's store)")
    report.add_argument("--config", default="configs/gateway.yaml")
    report.add_argument("--hours", type=float, default=24.0, help="the range (default 24)")
    report.add_argument("--json", action="store_true")
    report.set_defaults(func=cmd_report)
    advice = sub.add_parser("cache-advice", help="a captured session's prefix stability, "
                            "cache hit ratio and what would raise it (inspector's store)")
    advice.add_argument("--config", default="configs/gateway.yaml")
    advice.add_argument("--session", required=True, metavar="ID")
    advice.add_argument("--json", action="store_true")
    advice.set_defaults(func=cmd_cache_advice)
    referee = sub.add_parser("referee", help="run a strict local OpenAI-compatible upstream")
    referee.add_argument("--host", default="127.0.0.1")
    referee.add_argument("--port", type=int, default=4001)
    referee.add_argument("--rules", choices=["openai", "strict"], default="strict")
    referee.add_argument("--style", choices=["openai", "anthropic"], default="openai")
    referee.set_defaults(func=cmd_referee)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``gateway`` console script."""
    args = build_parser().parse_args(argv)
    code: int = args.func(args)
    return code


if __name__ == "__main__":
    sys.exit(main())
