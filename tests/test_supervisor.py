"""``gateway serve --workers N`` kept up through real processes and sockets: dead workers come
back, a crash loop ends the master non-zero, workers die with their master, SIGTERM is bounded
by the grace period even with a request hung on its upstream."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import free_port
from tests.factories import calls, user
from tests.test_cli import GATEWAY, wait_http

ENV = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}


def worker_pids(master: int) -> set[int]:
    """The gateway workers among the master's children (not multiprocessing's tracker)."""
    try:
        children = Path(f"/proc/{master}/task/{master}/children").read_text().split()
    except OSError:
        return set()
    out = set()
    for pid in children:
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if b"spawn_main" in cmdline and running(int(pid)):
            out.add(int(pid))
    return out


def running(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def poll_until(what: str, check: Any, timeout: float = 30.0) -> Any:
    """Poll ``check()`` until it returns something truthy (process start-up and exit)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def write_config(tmp_path: Path, upstream: str, port: int, **gateway: Any) -> Path:
    config = tmp_path / "gw.yaml"
    config.write_text(json.dumps({
        "model_list": [{"model_name": "demo", "litellm_params": {
            "model": "openai/referee", "api_base": f"{upstream}/v1", "api_key": "k"}}],
        "gateway": {"port": port, **gateway},
        "sessions": {"data_dir": str(tmp_path / "data")},
    }))
    return config


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    if proc.stderr is not None:
        proc.stderr.close()


@pytest.fixture
def referee() -> Iterator[str]:
    port = free_port()
    proc = subprocess.Popen([*GATEWAY, "referee", "--port", str(port)], env=ENV,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_http(f"http://127.0.0.1:{port}/v1/models", proc)
        yield f"http://127.0.0.1:{port}"
    finally:
        stop(proc)


@pytest.fixture
def workers(tmp_path: Path, referee: str) -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    port = free_port()
    config = write_config(tmp_path, referee, port)
    proc = subprocess.Popen([*GATEWAY, "serve", "--config", str(config), "--workers", "2"],
                            env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        wait_http(f"http://127.0.0.1:{port}/healthz", proc)
        poll_until("two workers", lambda: len(worker_pids(proc.pid)) == 2)
        yield proc, f"http://127.0.0.1:{port}"
    finally:
        stop(proc)
        for pid in worker_pids(proc.pid):
            os.kill(pid, signal.SIGKILL)


def repaired_answer(root: str) -> None:
    r = httpx.post(f"{root}/v1/chat/completions", timeout=30, json={
        "model": "demo", "messages": [user("hi"), calls("call_1"), user("go on")]})
    assert r.status_code == 200, r.text
    assert r.headers["x-gateway-repairs"] == "tool_result_synthesized=1"


def test_a_killed_worker_is_restarted_and_serves(
    workers: tuple[subprocess.Popen[bytes], str]
) -> None:
    master, root = workers
    before = worker_pids(master.pid)
    victim = min(before)
    os.kill(victim, signal.SIGKILL)

    def replaced() -> set[int] | None:
        pids = worker_pids(master.pid)
        return pids if len(pids) == 2 and victim not in pids else None

    after = poll_until("a replacement worker", replaced)
    assert victim not in after and len(after & before) == 1

    def answered() -> bool:
        try:
            repaired_answer(root)
        except httpx.TransportError:  # the port changing hands between sockets: ask again
            return False
        return True

    poll_until("an answer after the restart", answered)
    for _ in range(8):  # new connections each time: both workers answer
        repaired_answer(root)
    assert master.poll() is None


@pytest.mark.slow
def test_workers_that_keep_dying_end_the_master_non_zero(
    workers: tuple[subprocess.Popen[bytes], str]
) -> None:
    master, _ = workers
    deadline = time.monotonic() + 60
    killed: set[int] = set()
    while master.poll() is None and time.monotonic() < deadline:
        for pid in worker_pids(master.pid) - killed:
            os.kill(pid, signal.SIGKILL)
            killed.add(pid)
        time.sleep(0.02)  # polling the process table, not timing an assertion
    assert master.wait(10) == 1
    assert master.stderr is not None
    assert b"cannot be kept up" in master.stderr.read()
    assert len(killed) >= 5


def test_workers_exit_when_the_master_is_killed(
    workers: tuple[subprocess.Popen[bytes], str]
) -> None:
    master, root = workers
    pids = worker_pids(master.pid)
    port = int(root.rsplit(":", 1)[1])
    master.kill()
    master.wait()
    poll_until("the workers to exit", lambda: not any(running(p) for p in pids))
    with socket.socket() as s:  # no SO_REUSEPORT: fails while any worker listens on it
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # (TIME_WAIT is no holder)
        s.bind(("127.0.0.1", port))


class HungUpstream:
    """Accepts connections, reads the request, never answers."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen()
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.got_request = threading.Event()
        self.conns: list[socket.socket] = []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.conns.append(conn)
            data = b""
            while b"\r\n\r\n" not in data:
                chunk = conn.recv(65536)
                if not chunk:
                    break
                data += chunk
            if b"POST" in data:
                self.got_request.set()

    def close(self) -> None:
        self.sock.close()
        for conn in self.conns:
            conn.close()


@pytest.mark.slow
@pytest.mark.parametrize("n_workers", [1, 2])
def test_sigterm_with_a_hung_upstream_exits_within_the_grace_period(
    tmp_path: Path, n_workers: int
) -> None:
    upstream = HungUpstream()
    port, grace = free_port(), 1.0
    config = write_config(tmp_path, upstream.url, port, shutdown_grace=grace)
    proc = subprocess.Popen([*GATEWAY, "serve", "--config", str(config), "--workers",
                             str(n_workers)], env=ENV, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    answer: dict[str, Any] = {}

    def client() -> None:
        try:
            answer["status"] = httpx.post(
                f"http://127.0.0.1:{port}/v1/chat/completions", timeout=120,
                json={"model": "demo", "messages": [user("hi")]}).status_code
        except httpx.HTTPError as err:
            answer["error"] = type(err).__name__

    thread = threading.Thread(target=client)
    try:
        wait_http(f"http://127.0.0.1:{port}/healthz", proc)
        thread.start()
        assert upstream.got_request.wait(30), "the request never reached the upstream"
        proc.send_signal(signal.SIGTERM)
        # The hung request is cancelled after the grace period (the client would otherwise
        # keep the process up for the upstream's read timeout: 600 s).
        assert proc.wait(grace * 2 + 8) == 0
        thread.join(30)
        assert not thread.is_alive()
        assert answer  # the client got an answer or a closed connection, not a hang
    finally:
        stop(proc)
        upstream.close()


@pytest.mark.parametrize("n_workers", ["1", "2"])
def test_a_port_taken_by_another_program_is_a_clear_error(
    tmp_path: Path, n_workers: str
) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        config = write_config(tmp_path, "http://127.0.0.1:9", port)
        out = subprocess.run([*GATEWAY, "serve", "--config", str(config), "--workers",
                              n_workers], env=ENV, capture_output=True, text=True, timeout=60)
    assert out.returncode == 2  # configuration.md: exit 2 and a message
    assert "Traceback" not in out.stderr
    assert f"127.0.0.1:{port}" in out.stderr and "in use" in out.stderr
