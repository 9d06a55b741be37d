"""Start-up safety (no open relay, readable literal secrets), ``gateway check-config`` and
``gateway purge`` / retention, through the real command line and real sockets."""

from __future__ import annotations

import asyncio
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from redis import Redis

from gateway.config import load_config
from gateway.referee import Referee
from gateway.security import exposure, hygiene_warnings, literal_secrets
from tests.compaction.conftest import (
    Gateways,
    Session,
    compaction_header,
    demo_config,
    wait_for,
)
from tests.compaction.test_e2e_sessions import REFEREE_WINDOW, grow_until_compacted
from tests.conftest import free_port
from tests.factories import user
from tests.sessions.conftest import run_redis_server

GATEWAY = [sys.executable, "-m", "gateway.cli"]
PROVIDER_SECRET = "sk-provider-literal-0123456789"
CLIENT_SECRET = "gw-client-from-env-9876543210"


def write_config(path: Path, doc: dict[str, Any], mode: int = 0o600) -> Path:
    path.write_text(yaml.safe_dump(doc))
    path.chmod(mode)
    return path


def env(**extra: str) -> dict[str, str]:
    return {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True", **extra}


def run(*args: str, environ: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*GATEWAY, *args], capture_output=True, text=True, timeout=60,
                          env=environ or env())


# -- no open relay ---------------------------------------------------------------------


def test_serving_on_all_interfaces_without_keys_exits_2_with_the_way_out(
    tmp_path: Path
) -> None:
    config = write_config(tmp_path / "gw.yaml", {"gateway": {"port": free_port()}})
    out = run("serve", "--config", str(config), "--host", "0.0.0.0")
    assert out.returncode == 2
    assert "refusing to serve on 0.0.0.0" in out.stderr
    assert "os.environ/GATEWAY_KEY" in out.stderr
    assert "gateway.allow_unauthenticated: true" in out.stderr
    assert "Traceback" not in out.stderr
    # A host name is not known to be loopback-only: refused too.
    named = run("serve", "--config", str(config), "--host", "gateway.internal")
    assert named.returncode == 2 and "refusing to serve" in named.stderr


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Any]:
    """Start ``gateway serve`` and wait for /healthz on loopback; stopped at the end."""
    procs: list[tuple[subprocess.Popen[bytes], Path]] = []

    def start(config: Path, *args: str, environ: dict[str, str] | None = None
              ) -> tuple[str, subprocess.Popen[bytes], Path]:
        port = free_port()
        log = tmp_path / f"serve-{len(procs)}.log"
        with log.open("wb") as out:
            proc = subprocess.Popen([*GATEWAY, "serve", "--config", str(config), "--port",
                                     str(port), *args], env=environ or env(), stdout=out,
                                    stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        procs.append((proc, log))
        root = f"http://127.0.0.1:{port}"
        for _ in range(600):
            if proc.poll() is not None:
                raise AssertionError(f"serve exited {proc.returncode}: {log.read_text()}")
            try:
                httpx.get(root + "/healthz", timeout=1)
                return root, proc, log
            except httpx.HTTPError:
                time.sleep(0.05)  # polling for start-up, not timing an assertion
        raise AssertionError("serve never answered /healthz")

    yield start
    for proc, _ in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def stop(proc: subprocess.Popen[bytes]) -> None:
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(20) == 0


def test_allow_unauthenticated_serves_on_all_interfaces_with_a_warning(
    tmp_path: Path, serve: Any
) -> None:
    config = write_config(tmp_path / "gw.yaml",
                          {"gateway": {"allow_unauthenticated": True},
                           "sessions": {"data_dir": str(tmp_path / "data")}})
    root, proc, log = serve(config, "--host", "0.0.0.0")
    assert httpx.get(root + "/v1/models").status_code == 200  # no key needed: opted out
    stop(proc)
    assert log.read_text().count("WITHOUT client keys") == 1


def test_loopback_without_keys_serves_with_one_warning_and_readable_secrets_are_named(
    tmp_path: Path, serve: Any
) -> None:
    doc = {"model_list": [{"model_name": "demo", "litellm_params": {
        "model": "openai/x", "api_base": "http://127.0.0.1:9/v1", "api_key": PROVIDER_SECRET}}],
        "sessions": {"data_dir": str(tmp_path / "data")}}
    config = write_config(tmp_path / "gw.yaml", doc, mode=0o644)
    root, proc, log = serve(config)
    assert httpx.get(root + "/v1/models").status_code == 200
    stop(proc)
    text = log.read_text()
    assert text.count("no client keys") == 1
    assert "readable by other users" in text
    assert "model_list[0].litellm_params.api_key" in text
    assert PROVIDER_SECRET not in text


def test_a_key_from_the_environment_serves_on_all_interfaces_quietly(
    tmp_path: Path, serve: Any
) -> None:
    doc = {"gateway": {"api_keys": ["os.environ/GATEWAY_KEY"]},
           "sessions": {"data_dir": str(tmp_path / "data")}}
    config = write_config(tmp_path / "gw.yaml", doc, mode=0o644)  # no literal secret in it
    root, proc, log = serve(config, "--host", "0.0.0.0", environ=env(GATEWAY_KEY=CLIENT_SECRET))
    assert httpx.get(root + "/v1/models").status_code == 401
    ok = httpx.get(root + "/v1/models", headers={"Authorization": f"Bearer {CLIENT_SECRET}"})
    assert ok.status_code == 200
    stop(proc)
    assert "WARNING" not in log.read_text()


# -- check-config ----------------------------------------------------------------------


def test_check_config_prints_the_resolved_config_with_every_secret_masked(
    tmp_path: Path
) -> None:
    doc = {
        "model_list": [{"model_name": "m", "litellm_params": {
            "model": "openai/x", "api_base": "http://127.0.0.1:9/v1", "api_key": PROVIDER_SECRET,
            "extra_headers": {"Authorization": "Bearer header-secret-42", "x-trace": "on"}}}],
        "gateway": {"api_keys": ["os.environ/GATEWAY_KEY",
                                 {"key": "literal-client-secret", "owner": "team-a"}]},
        "sessions": {"redis_url": "redis://:redis-pass-77@127.0.0.1:6379/0"},
    }
    config = write_config(tmp_path / "gw.yaml", doc, mode=0o644)
    out = run("check-config", str(config), environ=env(GATEWAY_KEY=CLIENT_SECRET))
    assert out.returncode == 0, out.stderr
    everything = out.stdout + out.stderr
    for secret in (PROVIDER_SECRET, CLIENT_SECRET, "header-secret-42", "literal-client-secret",
                   "redis-pass-77"):
        assert secret not in everything
    resolved = yaml.safe_load(out.stdout)
    assert resolved["model_list"][0]["litellm_params"]["api_key"] == "***"
    assert resolved["model_list"][0]["litellm_params"]["extra_headers"] == {
        "Authorization": "***", "x-trace": "on"}
    assert resolved["gateway"]["api_keys"] == ["*** (from os.environ/GATEWAY_KEY)",
                                               {"key": "***", "owner": "team-a"}]
    assert resolved["sessions"]["redis_url"] == "redis://:***@127.0.0.1:6379/0"
    assert resolved["recovery"]["max_transient_retries"] == 3  # defaults resolved too
    assert "readable by other users" in out.stderr
    for path in ("model_list[0].litellm_params.api_key", "gateway.api_keys[1].key",
                 "sessions.redis_url"):
        assert path in out.stderr
    assert "gateway.api_keys[0]" not in out.stderr  # from the environment: not literal

    config.chmod(0o600)  # readable by its owner only: no warning
    quiet = run("check-config", str(config), environ=env(GATEWAY_KEY=CLIENT_SECRET))
    assert quiet.returncode == 0 and quiet.stderr == ""


def test_check_config_exits_2_on_a_bad_config(tmp_path: Path) -> None:
    config = write_config(tmp_path / "gw.yaml", {"gateway": {"api_keys": [
        {"key": "one", "owner": "a"}, {"key": "one", "owner": "b"}]}})
    out = run("check-config", str(config))
    assert out.returncode == 2
    assert "gateway.api_keys" in out.stderr and "repeats an earlier key" in out.stderr
    assert "one" not in out.stderr.replace("gateway", "")


# -- purge and retention ---------------------------------------------------------------


@pytest.fixture
async def ref() -> Any:
    async with Referee(rules="openai", style="openai", context_window=REFEREE_WINDOW) as r:
        yield r


@pytest.fixture
async def gateways(tmp_path: Path) -> Any:
    started = Gateways(tmp_path / "data")
    yield started
    for runner in reversed(list(started.runners.values())):
        await runner.cleanup()


KEYS = {"api_keys": [{"key": "erin-key", "owner": "erin"}, "frank-key"]}


def sqlite_rows(data_dir: Path) -> int:
    with sqlite3.connect(data_dir / "sessions.sqlite3") as db:
        return sum(db.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0]
                   for t in ("compactions", "owners", "pending"))


async def archive_status(root: str, session_id: str, key: str) -> int:
    async with httpx.AsyncClient() as http:
        r = await http.get(f"{root}/v1/gateway/sessions/{session_id}/archive",
                           headers={"Authorization": f"Bearer {key}"})
        return r.status_code


async def purge(config: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return await asyncio.to_thread(run, "purge", "--config", str(config), *args)


async def test_purge_removes_a_sessions_archive_and_records_in_sqlite(
    gateways: Gateways, ref: Referee, tmp_path: Path
) -> None:
    raw = demo_config(ref, gateway=KEYS)
    gw = await gateways.start(raw)
    keep = Session(gw, session_id="keep-me", key="frank-key")
    await grow_until_compacted(keep, ref)
    s = Session(gw, session_id="purge-me", key="erin-key")
    await grow_until_compacted(s, ref)
    data = gateways.data_dir
    assert len(list((data / "archive").iterdir())) == 2
    rows = sqlite_rows(data)
    assert await archive_status(gw.root, "purge-me", "erin-key") == 200

    config = write_config(tmp_path / "gw.yaml", {**raw, "sessions": {"data_dir": str(data)}})
    nothing_old = await purge(config, "--older-than", "1")
    assert nothing_old.returncode == 0 and "purged 0 session(s)" in nothing_old.stdout
    out = await purge(config, "--session", "purge-me")
    assert out.returncode == 0 and "purged 1 session(s)" in out.stdout, out.stderr

    assert len(list((data / "archive").iterdir())) == 1  # the other session's is kept
    assert 0 < sqlite_rows(data) < rows
    assert await archive_status(gw.root, "purge-me", "erin-key") == 403
    assert await archive_status(gw.root, "keep-me", "frank-key") == 200
    # The running gateway has no stored compaction for it any more: it summarizes anew.
    raw_reply = await s.send([user("What is left to do?")])
    header = compaction_header(raw_reply)
    assert header is not None and header[0] == "summarized"

    everything = await purge(config, "--older-than", "0")
    assert everything.returncode == 0 and "purged 2 session(s)" in everything.stdout
    assert sqlite_rows(data) == 0 and list((data / "archive").iterdir()) == []


async def test_purge_removes_a_sessions_archive_and_records_in_redis(
    gateways: Gateways, ref: Referee, tmp_path: Path
) -> None:
    with run_redis_server(tmp_path) as url:
        raw = demo_config(ref, gateway=KEYS, sessions={"redis_url": url})
        gw = await gateways.start(raw)
        keep = Session(gw, session_id="keep-me", key="frank-key")
        await grow_until_compacted(keep, ref)
        s = Session(gw, session_id="purge-me", key="erin-key")
        await grow_until_compacted(s, ref)
        redis = Redis.from_url(url)
        try:
            before = [k.decode() for k in redis.scan_iter(match="gw:s:*purge-me:*")]
            assert {k.rsplit(":", 1)[1] for k in before} >= {"archive", "rec", "idx", "owner"}
            assert await archive_status(gw.root, "purge-me", "erin-key") == 200

            config = write_config(tmp_path / "gw.yaml", raw)
            out = await purge(config, "--session", "purge-me")
            assert out.returncode == 0 and "purged 1 session(s)" in out.stdout, out.stderr
            assert list(redis.scan_iter(match="gw:s:*purge-me:*")) == []
            assert list(redis.scan_iter(match="gw:s:*keep-me:archive"))
            assert await archive_status(gw.root, "purge-me", "erin-key") == 403
            assert await archive_status(gw.root, "keep-me", "frank-key") == 200

            old = await purge(config, "--older-than", "0")
            assert old.returncode == 0 and "purged 1 session(s)" in old.stdout
            assert list(redis.scan_iter(match="gw:s:*")) == []
        finally:
            redis.close()
            await gateways.stop(gw)


async def test_the_server_purges_sessions_past_the_configured_retention(
    gateways: Gateways, ref: Referee
) -> None:
    raw = demo_config(ref, gateway=KEYS)
    gw = await gateways.start(raw)
    s = Session(gw, session_id="aging", key="erin-key")
    await grow_until_compacted(s, ref)
    await gateways.stop(gw)
    archive = gateways.data_dir / "archive"
    assert list(archive.iterdir())
    # Restarted with a retention far shorter than the session's age: swept at start-up.
    gw = await gateways.start({**raw, "sessions": {"data_dir": str(gateways.data_dir),
                                                   "retention_days": 1e-9}})
    await wait_for(lambda: not list(archive.iterdir()), "the retention sweep")
    assert sqlite_rows(gateways.data_dir) == 0
    assert await archive_status(gw.root, "aging", "erin-key") == 403


# -- shipped configs -------------------------------------------------------------------

CONFIGS = Path(__file__).resolve().parent.parent / "configs"


def test_the_docker_config_takes_the_client_key_from_the_environment(
    monkeypatch: pytest.MonkeyPatch
) -> None:
    docker = CONFIGS / "docker.yaml"
    without = env()
    without.pop("GATEWAY_KEY", None)
    without["OPENAI_API_KEY"] = "sk-test-not-used"
    out = run("serve", "--config", str(docker), "--port", str(free_port()), environ=without)
    assert out.returncode == 2 and "GATEWAY_KEY is not set" in out.stderr
    monkeypatch.setenv("GATEWAY_KEY", CLIENT_SECRET)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-used")
    config = load_config(docker)
    assert config.gateway.host == "0.0.0.0"
    assert exposure(config, config.gateway.host, config.gateway.port) == (None, None)
    assert hygiene_warnings(docker) == []


def test_the_demo_config_holds_no_literal_secret() -> None:
    demo = CONFIGS / "gateway.yaml"
    assert literal_secrets(yaml.safe_load(demo.read_text())) == []
    refusal, warning = exposure(load_config(demo), "127.0.0.1", 4000)
    assert refusal is None and warning is not None and "no client keys" in warning
