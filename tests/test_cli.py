"""The command line: check, referee, serve with several workers."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.conftest import free_port
from tests.factories import calls, user

GATEWAY = [sys.executable, "-m", "gateway.cli"]


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*GATEWAY, *args], capture_output=True, text=True, timeout=60)


def test_check_exit_codes(tmp_path: Path) -> None:
    valid = tmp_path / "valid.json"
    valid.write_text(json.dumps({"model": "x", "messages": [user("hi")]}))
    broken = tmp_path / "broken.json"
    broken.write_text(json.dumps([user("hi"), calls("call_1"), user("next")]))
    garbage = tmp_path / "garbage.json"
    garbage.write_text("{nope")
    assert run("check", str(valid)).returncode == 0
    out = run("check", str(broken))
    assert out.returncode == 1
    assert "tool_result_synthesized" in out.stdout
    as_json = run("check", str(broken), "--json")
    assert as_json.returncode == 1
    assert json.loads(as_json.stdout)["counts"] == {"tool_result_synthesized": 1}
    assert run("check", str(garbage)).returncode == 2
    assert run("check", str(tmp_path / "missing.json")).returncode == 2
    leading = tmp_path / "leading.json"
    leading.write_text(json.dumps([{"role": "assistant", "content": "hi"}, user("x")]))
    assert run("check", str(leading)).returncode == 0
    strict = run("check", str(leading), "--strict")
    assert strict.returncode == 1 and "leading_non_user_dropped" in strict.stdout


def test_check_reads_stdin() -> None:
    proc = subprocess.run([*GATEWAY, "check", "-", "--json"], capture_output=True, text=True,
                          timeout=60, input=json.dumps([user("a"), calls("call_1")]))
    assert proc.returncode == 1
    assert json.loads(proc.stdout)["anomalies"][0]["trailing"] is True


def wait_http(url: str, proc: subprocess.Popen[bytes]) -> None:
    for _ in range(600):
        if proc.poll() is not None:
            raise AssertionError(f"process exited with {proc.returncode}")
        try:
            httpx.get(url, timeout=1)
            return
        except httpx.HTTPError:
            time.sleep(0.05)  # polling for start-up, not timing an assertion
    raise AssertionError(f"{url} never answered")


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[str, list[subprocess.Popen[bytes]]]]:
    ref_port, gw_port = free_port(), free_port()
    config = tmp_path / "gw.yaml"
    config.write_text(json.dumps({
        "model_list": [{"model_name": "demo", "litellm_params": {
            "model": "openai/referee", "api_base": f"http://127.0.0.1:{ref_port}/v1",
            "api_key": "k"}}],
        "gateway": {"port": gw_port, "header_timeout": 1.5},
        "sessions": {"data_dir": str(tmp_path / "data")},
    }))
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    referee = subprocess.Popen([*GATEWAY, "referee", "--port", str(ref_port)], env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    gateway = subprocess.Popen([*GATEWAY, "serve", "--config", str(config), "--workers", "2"],
                               env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    procs = [referee, gateway]
    try:
        wait_http(f"http://127.0.0.1:{ref_port}/v1/models", referee)
        wait_http(f"http://127.0.0.1:{gw_port}/healthz", gateway)
        yield f"http://127.0.0.1:{gw_port}", procs
    finally:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in procs:
            try:
                p.wait(20)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        if gateway.stderr is not None:
            gateway.stderr.close()


def test_serve_with_workers_repairs_through_the_strict_referee(
    served: tuple[str, list[subprocess.Popen[bytes]]]
) -> None:
    root, procs = served
    with httpx.Client(base_url=root, timeout=30) as c:
        # Only OpenAI-compatible models configured: litellm is never imported.
        assert c.get("/healthz").json()["litellm_loaded"] is False
        for _ in range(6):  # spread over both workers
            r = c.post("/v1/chat/completions", json={
                "model": "demo", "messages": [user("hi"), calls("call_1"), user("go on")]})
            assert r.status_code == 200, r.text
            assert r.headers["x-gateway-repairs"] == "tool_result_synthesized=1"
        assert c.get("/healthz").json()["litellm_loaded"] is False
    gateway = procs[1]
    gateway.send_signal(signal.SIGTERM)
    assert gateway.wait(20) == 0


def _first_bytes(root: str, data: bytes) -> bytes:
    """What a new connection sending ``data`` at once (as its first bytes) gets back."""
    host, port = root.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=15) as conn:
        conn.sendall(data)
        got = b""
        while chunk := conn.recv(65536):
            got += chunk
    return got


def test_a_new_connections_first_bytes_are_answered_in_the_wire_they_name(
    served: tuple[str, list[subprocess.Popen[bytes]]]
) -> None:
    # The served process runs on uvloop, which hands a connection its first bytes before
    # the request loop is waiting: a bad head is still answered in the Messages shape, and
    # a head left unfinished still gets its 408.
    root, _ = served
    too_long = _first_bytes(root, b"POST /v1/messages HTTP/1.1\r\nHost: x\r\nx-big: "
                            + b"a" * 9000 + b"\r\n\r\n")
    assert too_long.split(b" ", 2)[1] == b"431"
    error = json.loads(too_long.split(b"\r\n\r\n", 1)[1])
    assert error["type"] == "error" and error["error"]["type"] == "invalid_request_error"
    late = _first_bytes(root, b"POST /v1/messages HTTP/1.1\r\nHost: x\r\nContent-Ty")
    assert late.split(b" ", 2)[1] == b"408"
    assert json.loads(late.split(b"\r\n\r\n", 1)[1])["type"] == "error"
