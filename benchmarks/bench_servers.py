"""The processes the benchmark drives: a mock upstream, a minimal aiohttp passthrough, the
gateway (``gateway serve``) and, when installed, the LiteLLM proxy. Each runs in its own
process on 127.0.0.1; ``python benchmarks/bench_servers.py upstream|passthrough PORT ...``
starts the first two.

The mock upstream answers Chat Completions instantly: a small JSON completion, or for
``"stream": true`` an SSE stream of a few chunks; ``/v1/messages`` and ``/v1/responses``
get a small whole Anthropic message and Responses object (``wire_turns.py``). Under
``/hold/...`` a stream sends its first event and then stays open (up to 120 s, or until the
client goes away): the open-streams memory test.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import aiohttp
from aiohttp import web

ROOT = Path(__file__).resolve().parents[1]

COMPLETION = json.dumps({
    "id": "chatcmpl-bench", "object": "chat.completion", "created": 0, "model": "bench",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"},
                 "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 10, "completion_tokens": 1, "total_tokens": 11},
}).encode()


def _chunk(text: str, finish: str | None = None) -> bytes:
    delta = {"content": text} if text else {}
    data = {"id": "chatcmpl-bench", "object": "chat.completion.chunk", "created": 0,
            "model": "bench", "choices": [{"index": 0, "delta": delta,
                                           "finish_reason": finish}]}
    return b"data: " + json.dumps(data).encode() + b"\n\n"


MESSAGE = json.dumps({
    "id": "msg_bench", "type": "message", "role": "assistant", "model": "bench",
    "content": [{"type": "text", "text": "ok"}], "stop_reason": "end_turn",
    "stop_sequence": None, "usage": {"input_tokens": 10, "output_tokens": 1},
}).encode()
RESPONSE = json.dumps({
    "id": "resp_bench", "object": "response", "created_at": 0, "status": "completed",
    "model": "bench", "output": [{"type": "message", "id": "msg_bench", "status": "completed",
                                  "role": "assistant", "content": [
                                      {"type": "output_text", "text": "ok", "annotations": []}]}],
    "usage": {"input_tokens": 10, "output_tokens": 1, "total_tokens": 11},
}).encode()


STREAM_CHUNKS = [_chunk(w) for w in ("Hello", " from", " the", " mock", " upstream")]
STREAM_END = _chunk("", "stop") + b"data: [DONE]\n\n"
HOLD_SECONDS = 120.0


def free_port() -> int:
    """An unused loopback port."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _install_uvloop() -> None:
    with contextlib.suppress(ImportError):
        import uvloop

        uvloop.install()


async def _serve(app: web.Application, port: int) -> None:
    runner = web.AppRunner(app, handler_cancellation=True, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port, backlog=2048).start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    await runner.cleanup()


def upstream_app() -> web.Application:
    """The mock upstream: answers at once, never parses the request JSON."""

    async def chat(request: web.Request) -> web.StreamResponse:
        body = await request.read()
        if b'"stream":true' not in body and b'"stream": true' not in body:
            return web.Response(body=COMPLETION, content_type="application/json")
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        if request.path.startswith("/hold/"):
            await response.write(STREAM_CHUNKS[0])
            await asyncio.sleep(HOLD_SECONDS)  # cancelled when the client goes away
        else:
            for chunk in STREAM_CHUNKS:
                await response.write(chunk)
        await response.write(STREAM_END)
        await response.write_eof()
        return response

    async def ok(_: web.Request) -> web.Response:
        return web.Response(text="ok")

    def whole(answer: bytes) -> Callable[[web.Request], Awaitable[web.Response]]:
        async def answer_it(request: web.Request) -> web.Response:
            await request.read()
            return web.Response(body=answer, content_type="application/json")

        return answer_it

    answered = itertools.count()

    async def responses(request: web.Request) -> web.Response:
        # Each answer its own id, as a real Responses API gives (the gateway keeps each).
        await request.read()
        return web.Response(body=RESPONSE.replace(b'"resp_bench"', b'"resp_bench_%d"' % next(
            answered), 1), content_type="application/json")

    app = web.Application(client_max_size=64 * 1024 * 1024)
    app.router.add_post("/v1/chat/completions", chat)
    app.router.add_post("/hold/v1/chat/completions", chat)
    app.router.add_post("/v1/messages", whole(MESSAGE))
    app.router.add_post("/v1/responses", responses)
    app.router.add_get("/healthz", ok)
    return app


def passthrough_app(upstream: str) -> web.Application:
    """The floor: what any aiohttp proxy pays. Forwards the bytes to the same path upstream
    and relays the answer (streams chunk by chunk), doing nothing else."""
    client: list[aiohttp.ClientSession] = []

    async def forward(request: web.Request) -> web.StreamResponse:
        if not client:
            client.append(aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)))
        body = await request.read()
        async with client[0].post(upstream + request.path, data=body,
                                  headers={"Content-Type": "application/json"}) as r:
            if not r.content_type.startswith("text/event-stream"):
                return web.Response(body=await r.read(), status=r.status,
                                    content_type=r.content_type)
            out = web.StreamResponse(status=r.status,
                                     headers={"Content-Type": "text/event-stream"})
            await out.prepare(request)
            async for chunk in r.content.iter_any():
                await out.write(chunk)
            await out.write_eof()
            return out

    async def ok(_: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def close(_: web.Application) -> None:
        for s in client:
            await s.close()

    app = web.Application(client_max_size=64 * 1024 * 1024)
    app.on_cleanup.append(close)
    for path in ("/v1/chat/completions", "/hold/v1/chat/completions", "/v1/messages",
                 "/v1/responses"):
        app.router.add_post(path, forward)
    app.router.add_get("/healthz", ok)
    return app


@dataclass
class Server:
    """One started process and the base URL it serves."""

    name: str
    url: str
    proc: subprocess.Popen[bytes]

    def rss_mb(self) -> float:
        """Resident memory of the process and its children (workers), in MB."""
        return sum(_rss_kb(pid) for pid in [self.proc.pid, *_children(self.proc.pid)]) / 1024

    def cpu_seconds(self) -> float:
        """User + system CPU time of the process and its children (workers) so far: unlike
        latency, not inflated by other programs competing for the cores."""
        return sum(_cpu_s(pid) for pid in [self.proc.pid, *_children(self.proc.pid)])

    def stop(self) -> None:
        """SIGTERM, then SIGKILL after 10 s."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def _rss_kb(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def _cpu_s(pid: int) -> float:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _children(pid: int) -> list[int]:
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return []
    kids = [int(p) for p in text.split()]
    return kids + [g for k in kids for g in _children(k)]


def wait_ready(server: Server, path: str, timeout: float = 60.0) -> Server:
    """Poll ``path`` until it answers (start-up, not a measurement)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.proc.poll() is not None:
            raise RuntimeError(f"{server.name} exited with {server.proc.returncode}")
        try:
            with urllib.request.urlopen(server.url + path, timeout=1):
                return server
        except (urllib.error.URLError, ConnectionError, OSError):
            time.sleep(0.05)
    server.stop()
    raise RuntimeError(f"{server.name} did not come up within {timeout:.0f}s")


def start_script(name: str, *args: str) -> Server:
    """The mock upstream or the passthrough, in a process of its own."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, __file__, name, str(port), *args], cwd=ROOT)
    return wait_ready(Server(name, f"http://127.0.0.1:{port}", proc), "/healthz")


def start_gateway(upstream: str, tmp: Path, workers: int = 1,
                  settings: dict[str, object] | None = None, root: Path = ROOT,
                  wires: bool = False) -> Server:
    """``gateway serve`` with repair on (the defaults, or ``settings`` for its ``gateway:``
    section) in front of the mock upstream; ``root``: the checkout whose code it runs;
    ``wires``: with the agent wires' models too (an Anthropic model makes the gateway load
    litellm, ~200 MB: the other parts measure a chat-only gateway)."""
    port = free_port()
    config = tmp / f"gateway-{port}.yaml"
    models: list[dict[str, object]] = [
        {"model_name": "bench", "litellm_params": {
            "model": "openai/bench", "api_base": f"{upstream}/v1", "api_key": "bench-key"},
         "model_info": {"max_input_tokens": 1_000_000}},
        {"model_name": "hold", "litellm_params": {
            "model": "openai/bench", "api_base": f"{upstream}/hold/v1",
            "api_key": "bench-key"}},
    ]
    if wires:  # the agent wires natively (wire_turns.py): Messages and Responses upstreams
        models += [
            {"model_name": "claude", "litellm_params": {
                "model": "anthropic/bench", "api_base": upstream, "api_key": "bench-key"},
             "model_info": {"max_input_tokens": 1_000_000}},
            {"model_name": "gpt", "litellm_params": {
                "model": "openai/gpt-5", "api_base": f"{upstream}/v1", "api_key": "bench-key"},
             "model_info": {"max_input_tokens": 1_000_000}},
        ]
    config.write_text(json.dumps({
        "model_list": models,
        "gateway": {"port": port, "log_level": "warning", **(settings or {})},
        "sessions": {"data_dir": str(tmp / f"data-{port}")},
    }))
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    proc = subprocess.Popen([sys.executable, "-m", "gateway.cli", "serve", "--config",
                             str(config), "--workers", str(workers)], cwd=root, env=env)
    name = "gateway" if workers == 1 else f"gateway --workers {workers}"
    return wait_ready(Server(name, f"http://127.0.0.1:{port}", proc), "/healthz")


def litellm_proxy_available() -> bool:
    """True when ``litellm[proxy]`` (the proxy server and its web stack) is importable."""
    import importlib.util

    return all(importlib.util.find_spec(m) is not None
               for m in ("litellm", "fastapi", "uvicorn", "backoff"))


def start_litellm(upstream: str, tmp: Path) -> Server:
    """The LiteLLM proxy (one worker) with the same model in front of the mock upstream."""
    port = free_port()
    config = tmp / "litellm.yaml"
    config.write_text(json.dumps({"model_list": [{"model_name": "bench", "litellm_params": {
        "model": "openai/bench", "api_base": f"{upstream}/v1", "api_key": "bench-key"}}]}))
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True", "LITELLM_LOG": "ERROR"}
    proc = subprocess.Popen([sys.executable, "-m", "litellm.proxy.proxy_cli", "--config",
                             str(config), "--host", "127.0.0.1", "--port", str(port),
                             "--num_workers", "1"], cwd=tmp, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return wait_ready(Server("litellm proxy", f"http://127.0.0.1:{port}", proc),
                      "/health/liveliness", timeout=120)


def main() -> None:
    """``bench_servers.py upstream PORT`` or ``bench_servers.py passthrough PORT UPSTREAM``."""
    _install_uvloop()
    name, port = sys.argv[1], int(sys.argv[2])
    app = upstream_app() if name == "upstream" else passthrough_app(sys.argv[3])
    asyncio.run(_serve(app, port))


if __name__ == "__main__":
    main()
