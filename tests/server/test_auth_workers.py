"""The failed-auth budget of ``gateway serve --workers 2`` is one budget (issue 23): guesses
spread over both worker processes get the documented number of answers, not twice it; with
Redis configured, replicas share it too."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import aiohttp
import httpx
import pytest

from tests.conftest import GatewayFactory, free_port, model_entry
from tests.sessions.conftest import run_redis_server
from tests.test_cli import GATEWAY, wait_http
from tests.test_supervisor import ENV, poll_until, worker_pids, write_config

BURST = 10  # the documented default budget (gateway.failed_auth_limit.burst)


def test_two_workers_answer_the_documented_number_of_bad_keys(tmp_path: Path) -> None:
    port = free_port()
    # A bucket that refills about once an hour: what the test sees is the burst.
    config = write_config(tmp_path, "http://127.0.0.1:9", port, api_keys=["right-key-0123"],
                          log_format="json", failed_auth_limit={"burst": BURST,
                                                                "per_minute": 0.02})
    env = {k: v for k, v in ENV.items() if k != "PROMETHEUS_MULTIPROC_DIR"}
    log_path = tmp_path / "gateway.log"
    with log_path.open("wb") as log:
        proc = subprocess.Popen([*GATEWAY, "serve", "--config", str(config), "--workers", "2"],
                                env=env, stdout=subprocess.DEVNULL, stderr=log)
    root = f"http://127.0.0.1:{port}"
    try:
        wait_http(f"{root}/healthz", proc)
        poll_until("two workers", lambda: len(worker_pids(proc.pid)) == 2)

        def served_by() -> set[int]:
            return {json.loads(line)["pid"] for line in log_path.read_text().splitlines()
                    if line.startswith("{") and '"gateway.access"' in line}

        # Both workers listening before the burst (one may still be starting): new
        # connections until each has answered one.
        for _ in range(400):
            httpx.get(f"{root}/health/liveness", timeout=30)  # public, and access-logged
            if len(served_by()) == 2:
                break
        assert len(served_by()) == 2

        def attempt(n: int) -> int:
            # A new connection each time: the kernel spreads them over both workers.
            r = httpx.get(f"{root}/v1/models", timeout=30,
                          headers={"Authorization": f"Bearer guess-{n:04d}-secret"})
            return r.status_code

        with ThreadPoolExecutor(8) as pool:
            statuses = list(pool.map(attempt, range(3 * BURST)))
        assert sorted(statuses) == [401] * BURST + [429] * (2 * BURST)
        # Still limited: even the right key is not looked at, whichever worker answers.
        for _ in range(4):
            r = httpx.get(f"{root}/v1/models", timeout=30,
                          headers={"Authorization": "Bearer right-key-0123"})
            assert r.status_code == 429 and int(r.headers["Retry-After"]) >= 1
            assert r.json()["error"]["code"] == "too_many_failed_authentications"
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        for pid in worker_pids(proc.pid):
            os.kill(pid, signal.SIGKILL)
    lines = [json.loads(line) for line in log_path.read_text().splitlines()
             if line.startswith("{")]
    failed = [line for line in lines if "authentication failed" in line["msg"]]
    assert len(failed) == BURST
    assert len({line["pid"] for line in failed}) >= 1


async def test_replicas_sharing_redis_share_one_budget(
    gateway_factory: GatewayFactory, tmp_path: Path
) -> None:
    with run_redis_server(tmp_path) as url:
        raw = {"model_list": [model_entry("demo", "http://127.0.0.1:9/v1")],
               "gateway": {"api_keys": ["right-key-0123"],
                           "failed_auth_limit": {"burst": BURST, "per_minute": 0.02}},
               "sessions": {"data_dir": str(tmp_path / "data"), "redis_url": url}}
        replicas = [await gateway_factory(raw), await gateway_factory(raw)]
        async with aiohttp.ClientSession() as http:

            async def attempt(n: int) -> int:
                gw = replicas[n % 2]
                headers = {"Authorization": f"Bearer guess-{n:04d}-secret"}
                async with http.get(gw.base_url + "/models", headers=headers) as r:
                    return r.status

            statuses = await asyncio.gather(*(attempt(n) for n in range(3 * BURST)))
            assert sorted(statuses) == [401] * BURST + [429] * (2 * BURST)
            for gw in replicas:
                async with http.get(gw.base_url + "/models",
                                    headers={"Authorization": "Bearer right-key-0123"}) as r:
                    assert r.status == 429


async def test_an_unreachable_redis_leaves_the_budget_to_each_replica(
    gateway_factory: GatewayFactory, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    url = f"redis://127.0.0.1:{free_port()}/0"  # nothing listens there
    gw = await gateway_factory({
        "model_list": [model_entry("demo", "http://127.0.0.1:9/v1")],
        "gateway": {"api_keys": ["right-key-0123"],
                    "failed_auth_limit": {"burst": BURST, "per_minute": 0.02}},
        "sessions": {"data_dir": str(tmp_path / "data"), "redis_url": url}})
    async with aiohttp.ClientSession() as http:
        async with http.get(gw.base_url + "/models",
                            headers={"Authorization": "Bearer right-key-0123"}) as r:
            assert r.status == 200  # authentication does not depend on Redis
        statuses = []
        for n in range(BURST + 2):
            headers = {"Authorization": f"Bearer guess-{n:04d}-secret"}
            async with http.get(gw.base_url + "/models", headers=headers) as r:
                statuses.append(r.status)
    assert statuses == [401] * BURST + [429] * 2
    warned = [r for r in caplog.records if "shared failed-auth budget" in r.getMessage()]
    assert len(warned) == 1
