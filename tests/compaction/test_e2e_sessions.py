"""Stored compactions outlive a gateway process and are shared by replicas; the archive of
removed messages is served to the session's owner only."""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml

from gateway.referee import RecordedRequest, Referee
from gateway.referee.completions import estimate_tokens
from tests.compaction.conftest import (
    Gateways,
    Session,
    accepted,
    agent_turn,
    chat_calls,
    compaction_header,
    demo_config,
    messages_prefix_bytes,
    summary_calls,
)
from tests.conftest import free_port
from tests.factories import user
from tests.http import wait_until_serving
from tests.sessions.conftest import run_redis_server

REFEREE_WINDOW = 1500
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
async def ref() -> AsyncIterator[Referee]:
    async with Referee(rules="openai", style="openai", context_window=REFEREE_WINDOW) as r:
        yield r


async def grow_until_compacted(s: Session, ref: Referee, *, base_url: str | None = None
                               ) -> RecordedRequest:
    """Send agent turns until the gateway compacts; the compacted request it forwarded."""
    start = sum(1 for m in s.history if m["role"] == "tool")
    for i in range(start, start + 8):
        mark = len(ref.requests)
        raw = await s.send(agent_turn(i), base_url=base_url)
        header = compaction_header(raw)
        if header is not None and header[0] == "summarized":
            return accepted(chat_calls(ref, mark))[-1]
        assert header is None or header[0] == "reused"
    raise AssertionError("the session never needed a compaction")


async def next_turn_reuses(s: Session, ref: Referee, compacted: RecordedRequest, *,
                           base_url: str | None = None) -> None:
    """The next turn is served from the stored compaction: no summary call, same bytes."""
    stored = len(compacted.json()["messages"])
    mark = len(ref.requests)
    raw = await s.send([user("What is left to do?")], base_url=base_url)
    header = compaction_header(raw)
    assert header is not None and header[0] == "reused"
    assert summary_calls(ref, mark) == []
    (sent,) = chat_calls(ref, mark)
    assert sent.status == 200
    assert messages_prefix_bytes(sent, stored) == messages_prefix_bytes(compacted, stored)


async def test_sqlite_store_serves_the_compaction_after_a_restart(
    gateways: Gateways, ref: Referee
) -> None:
    first = await gateways.start(demo_config(ref))
    s = Session(first, session_id="restart-1")
    compacted = await grow_until_compacted(s, ref)
    await gateways.stop(first)
    assert (gateways.data_dir / "sessions.sqlite3").exists()

    second = await gateways.start(demo_config(ref))
    s.gw = second
    await next_turn_reuses(s, ref, compacted)


# -- two gateway processes sharing a real redis-server --------------------------------


@pytest.fixture
def redis_url(tmp_path: Path) -> Iterator[str]:
    with run_redis_server(tmp_path) as url:
        yield url


class GatewayProcess:
    """``python -m gateway.cli serve`` in a child process."""

    def __init__(self, config: dict[str, Any], workdir: Path, name: str) -> None:
        self.port = free_port()
        self.root = f"http://127.0.0.1:{self.port}"
        path = workdir / f"{name}.yaml"
        path.write_text(yaml.safe_dump(config))
        path.chmod(0o600)  # it holds literal keys: readable by others would be warned about
        self.log = workdir / f"{name}.log"
        env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "gateway.cli", "serve", "--config", str(path),
                 "--port", str(self.port)],
                cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL)

    @property
    def base_url(self) -> str:
        return self.root + "/v1"

    async def ready(self) -> None:
        await wait_until_serving(self.root, lambda: None if self.proc.poll() is None
                                 else self.log.read_text()[-3000:])

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)


@pytest.fixture
async def replicas(tmp_path: Path, ref: Referee, redis_url: str
                   ) -> AsyncIterator[list[GatewayProcess]]:
    config = demo_config(ref, sessions={"redis_url": redis_url,
                                        "data_dir": str(tmp_path / "unused")})
    # A deployment as it should be: a client key (Session's), so nothing is warned about.
    config["gateway"] = {"log_level": "warning", "api_keys": ["client-key"]}
    procs = [GatewayProcess(config, tmp_path, f"gw{i}") for i in range(2)]
    try:
        await asyncio.gather(*(p.ready() for p in procs))
        yield procs
    finally:
        for p in procs:
            p.stop()


async def test_compaction_made_through_one_replica_is_reused_through_the_other(
    replicas: list[GatewayProcess], ref: Referee
) -> None:
    one, two = replicas
    s = Session(one, session_id="shared-1")
    compacted = await grow_until_compacted(s, ref, base_url=one.base_url)
    await next_turn_reuses(s, ref, compacted, base_url=two.base_url)
    await next_turn_reuses(s, ref, compacted, base_url=one.base_url)
    # Nothing logged but the one warning that the provider contradicted the configured
    # window (its own statement wins; said once per process).
    lines = Path(one.log).read_text().strip().splitlines()
    assert len(lines) == 1 and "states a context window of" in lines[0], lines


async def test_replicas_never_compact_the_same_history_twice_at_once(
    replicas: list[GatewayProcess], ref: Referee
) -> None:
    s = Session(replicas[0], session_id="race-1")
    i = 0
    while estimate_tokens([*s.history, *agent_turn(i)]) <= REFEREE_WINDOW:
        await s.send(agent_turn(i), base_url=replicas[0].base_url)
        i += 1
    s.history.extend(agent_turn(i))  # this one overflows at the upstream
    mark = len(ref.requests)
    clones = [Session(s.gw, session_id="race-1", history=list(s.history)) for _ in range(4)]
    raws = await asyncio.gather(*(c.send(base_url=replicas[n % 2].base_url)
                                  for n, c in enumerate(clones)))
    assert len(accepted(summary_calls(ref, mark))) == 1, "one summary for one history"
    hows = sorted((compaction_header(r) or ("",))[0] for r in raws)
    assert hows == ["reused", "reused", "reused", "summarized"]
    sent = {tuple(map(str, r.json()["messages"])) for r in accepted(chat_calls(ref, mark))}
    assert len(sent) == 1  # all four went out as the same compacted history


# -- the archive endpoint ----------------------------------------------------------------


async def get_archive(root: str, path: str, key: str | None) -> tuple[int, Any]:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    async with aiohttp.ClientSession() as http, http.get(root + path, headers=headers) as r:
        return r.status, await r.json()


async def test_archive_returns_the_removed_messages_to_the_owner_only(
    gateways: Gateways, ref: Referee
) -> None:
    gw = await gateways.start(demo_config(ref, gateway={"api_keys": ["key-alice", "key-bob"]}))
    s = Session(gw, session_id="arch-1", key="key-alice")
    compacted = await grow_until_compacted(s, ref)
    original = s.history[:-1]  # the request that was compacted
    summary = compacted.json()["messages"][-2]["content"]
    found = re.search(r"GET (/v1/gateway/sessions/arch-1/archive\?from=1&to=(\d+))", summary)
    assert found is not None, summary
    path, last = found.group(1), int(found.group(2))
    assert last == len(original)

    status, body = await get_archive(gw.root, path, "key-alice")
    assert status == 200
    assert body["messages"] == original  # everything compaction removed, as sent
    assert (body["from"], body["to"]) == (1, last)

    status, body = await get_archive(gw.root, path, "key-bob")
    assert status in (403, 404)
    assert set(body) == {"error"} and body["error"]["type"] and body["error"]["message"]

    status, body = await get_archive(gw.root, path, None)
    assert status == 401 and "error" in body

    # A second compaction (of the compacted history) archives only what is new: the
    # archive stays the client's history, line for line, without repeats.
    second = await grow_until_compacted(s, ref)
    original = s.history[:-1]
    summary = second.json()["messages"][-2]["content"]
    # One line range per compaction window, contiguous, the last ending at the history.
    ranges = [(int(a), int(b)) for a, b in re.findall(r"archive\?from=(\d+)&to=(\d+)", summary)]
    assert ranges == [(1, last), (last + 1, len(original))]
    status, body = await get_archive(gw.root, f"/v1/gateway/sessions/arch-1/archive?from=1"
                                     f"&to={len(original) + 50}", "key-alice")
    assert status == 200 and body["messages"] == original


async def test_another_key_with_the_same_session_id_shares_nothing(
    gateways: Gateways, ref: Referee
) -> None:
    gw = await gateways.start(demo_config(ref, gateway={"api_keys": ["key-alice", "key-bob"]}))
    alice = Session(gw, session_id="same-id", key="key-alice")
    await grow_until_compacted(alice, ref)
    # Bob sends exactly Alice's history under the same session id: he gets no stored
    # compaction of hers (a summary is made for him) and nothing lands in her archive.
    status, before = await get_archive(gw.root, "/v1/gateway/sessions/same-id/archive?to=999",
                                       "key-alice")
    assert status == 200
    bob = Session(gw, session_id="same-id", key="key-bob", history=list(alice.history))
    mark = len(ref.requests)
    raw = await bob.send([user("What is left to do?")])
    header = compaction_header(raw)
    assert header is not None and header[0] == "summarized"
    assert accepted(summary_calls(ref, mark))
    status, after = await get_archive(gw.root, "/v1/gateway/sessions/same-id/archive?to=999",
                                      "key-alice")
    assert after["messages"] == before["messages"]
    status, bobs = await get_archive(gw.root, "/v1/gateway/sessions/same-id/archive?to=999",
                                     "key-bob")
    assert status == 200 and bobs["messages"] == bob.history[:-1]


async def test_requests_go_on_when_the_session_store_is_down(
    gateways: Gateways, ref: Referee, caplog: pytest.LogCaptureFixture
) -> None:
    dead = f"redis://127.0.0.1:{free_port()}/0"  # nothing listens there
    gw = await gateways.start(demo_config(ref, sessions={"redis_url": dead}))
    s = Session(gw, session_id="down-1")
    raw = await s.send(agent_turn(0))  # answered, uncompacted
    assert compaction_header(raw) is None
    hows = []
    for i in range(1, 8):  # the session outgrows the window: compacted in memory
        raw = await s.send(agent_turn(i))
        header = raw.headers.get("x-gateway-compaction")
        hows.append(header)
        assert "x-gateway-compaction-failed" not in raw.headers
    compacted = [h for h in hows if h is not None]
    assert compacted and all(h.endswith("; unstored") for h in compacted), hows
    assert compacted[0].startswith("summarized; ")
    assert any(h.startswith("reused; ") for h in compacted)  # kept in memory, reused
    # One warning for the outage, no traceback per request.
    down = [r for r in caplog.records if "session store unavailable" in r.getMessage()]
    assert len(down) == 1 and down[0].levelname == "WARNING" and down[0].exc_info is None
    assert not [r for r in caplog.records if r.exc_info]
