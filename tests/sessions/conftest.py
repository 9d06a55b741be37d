"""Fixtures for the session store tests: a real redis-server on loopback."""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

_START_ATTEMPTS = 5
_READY_TIMEOUT_S = 15.0
_POLL_INTERVAL_S = 0.01


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _pings(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5) as s:
            s.sendall(b"PING\r\n")
            return s.recv(64).startswith(b"+PONG")
    except OSError:
        return False


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


@contextlib.contextmanager
def run_redis_server(workdir: Path) -> Iterator[str]:
    """Start a throwaway redis-server on a free loopback port; yield its URL.

    Fails (does not skip) when the binary is missing. Retries on another port if the
    chosen one was taken between picking and binding.
    """
    binary = shutil.which("redis-server")
    if binary is None:
        pytest.fail(
            "redis-server is not installed (needed by the Redis store tests): "
            "apt-get install -y redis-server",
            pytrace=False,
        )
    last_log = ""
    for attempt in range(_START_ATTEMPTS):
        port = _free_port()
        rundir = workdir / f"redis-{attempt}"
        rundir.mkdir(parents=True, exist_ok=True)
        log_path = rundir / "redis.log"
        with log_path.open("wb") as log:
            proc = subprocess.Popen(
                [
                    binary,
                    "--port",
                    str(port),
                    "--bind",
                    "127.0.0.1",
                    "--save",
                    "",
                    "--appendonly",
                    "no",
                    "--dir",
                    str(rundir),
                    "--daemonize",
                    "no",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        try:
            deadline = time.monotonic() + _READY_TIMEOUT_S
            while proc.poll() is None and time.monotonic() < deadline:
                if _pings(port):
                    break
                time.sleep(_POLL_INTERVAL_S)
            else:
                last_log = log_path.read_text(errors="replace")[-2000:]
                continue  # died (port taken?) or never answered: try another port
            yield f"redis://127.0.0.1:{port}/0"
            return
        finally:
            _stop(proc)
    pytest.fail(f"redis-server did not start after {_START_ATTEMPTS} attempts:\n{last_log}")


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[str]:
    """URL of a fresh, empty redis-server (killed after the test)."""
    with run_redis_server(tmp_path) as url:
        yield url
