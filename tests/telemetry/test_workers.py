"""The whole observability story through ``gateway serve --workers 2``: after a mixed load
(valid, broken, overflowing, failing upstream), one consistent ``/metrics`` that every
dashboard query resolves against, spans with GenAI attributes joined to the client's trace
at an OTLP collector, one JSON access-log line per request, and an inspector that shows
every request and the before/after diff of a repaired one in a real browser."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import openai
import pytest
import yaml

from gateway.projection.exchanges import SYNTHETIC_TOOL_RESULT_TEXT
from gateway.referee import Referee
from tests.conftest import free_port
from tests.factories import user
from tests.http import wait_until_serving
from tests.server.browser import chromium
from tests.telemetry.load import BROKEN, SMALL_WINDOW, load_config, mixed_load
from tests.telemetry.promtext import fresh_scrape, settled_scrape
from tests.telemetry.test_dashboard import dashboard, queries, resolves, selectors
from tests.telemetry.test_otlp_export import Collector, _attrs, _spans, collector

pytestmark = pytest.mark.slow
__all__ = ["collector"]  # the OTLP collector fixture, reused

KEY = "workers-client-key-77"
CLIENT_TRACE = "0af7651916cd43dd8448eb211c80319c"


async def wait_healthy(root: str, proc: asyncio.subprocess.Process) -> None:
    await wait_until_serving(root, lambda: None if proc.returncode is None
                             else f"exit code {proc.returncode}")


@pytest.fixture
async def workers(tmp_path: Path, collector: Collector) -> AsyncIterator[dict[str, Any]]:
    async with Referee(rules="openai") as ref, \
            Referee(rules="openai", context_window=SMALL_WINDOW) as small:
        port = free_port()
        raw = load_config(ref, small, port=port, api_keys=[KEY], ui=True, capture_bodies=True,
                          log_format="json",
                          telemetry={"exporter": "otlp", "endpoint": collector.url,
                                     "context_report": True})
        raw["sessions"] = {"data_dir": str(tmp_path / "data")}
        config = tmp_path / "gateway.yaml"
        config.write_text(yaml.safe_dump(raw))
        metrics_dir = tmp_path / "metrics"
        metrics_dir.mkdir()
        (metrics_dir / "counter_99999.db").write_bytes(b"left over from a previous run")
        env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True",
               "PROMETHEUS_MULTIPROC_DIR": str(metrics_dir)}
        log = (tmp_path / "gateway.log").open("wb")
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "gateway.cli", "serve", "--config", str(config),
            "--workers", "2", env=env, stdout=asyncio.subprocess.DEVNULL, stderr=log)
        root = f"http://127.0.0.1:{port}"
        try:
            await wait_healthy(root, proc)
            yield {"root": root, "ref": ref, "proc": proc, "log": tmp_path / "gateway.log",
                   "metrics_dir": metrics_dir}
        finally:
            if proc.returncode is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    await asyncio.wait_for(proc.wait(), 30)
                except TimeoutError:
                    proc.kill()
                    await proc.wait()
            log.close()


async def test_mixed_load_through_two_workers(
    workers: dict[str, Any], collector: Collector
) -> None:
    root, ref = workers["root"], workers["ref"]
    assert not (workers["metrics_dir"] / "counter_99999.db").exists()  # cleaned at start
    base = root + "/v1"
    statuses = await mixed_load(base, ref, key=KEY)
    sent = sum(statuses.values())
    # More requests, each on a new connection, so both workers serve some; one joins the
    # client's trace.
    for i in range(10):
        async with openai.AsyncOpenAI(base_url=base, api_key=KEY, max_retries=0) as c:
            headers = {"traceparent": f"00-{CLIENT_TRACE}-{i + 1:016x}-01"} if i == 0 else {}
            await c.chat.completions.create(model="demo", messages=[user(f"n{i}")],
                                            extra_headers=headers)
    async with openai.AsyncOpenAI(base_url=base, api_key=KEY, max_retries=0) as c:
        repaired = await c.chat.completions.with_raw_response.create(
            model="demo", messages=BROKEN)  # type: ignore[arg-type]
    sent += 11
    repaired_id = repaired.headers["x-request-id"]

    # One consistent /metrics, whichever worker answers the scrape.
    await settled_scrape(root, lambda m: m.total("gateway_requests_total") == sent)
    scrapes = [await fresh_scrape(root) for _ in range(6)]
    totals = {s.total("gateway_requests_total") for s in scrapes}
    assert totals == {sent}, totals
    m = scrapes[0]
    assert m.total("gateway_requests_total", status="503") == 1
    assert m.total("gateway_compactions_total", how="summarized") == 1
    assert m.total("gateway_repairs_total", kind="tool_result_synthesized") == 2
    assert m.total("gateway_request_duration_seconds_count") == sent
    missing = [f"{metric}{matchers}" for e in queries(dashboard())
               for metric, matchers in selectors(e) if not resolves(m, metric, matchers)]
    assert not missing, f"dashboard queries with no series: {missing}"

    # The inspector (shared by the workers) lists every request; the browser shows the diff.
    async with chromium() as browser:
        context = await browser.new_context(
            http_credentials={"username": "ops", "password": KEY})
        page = await context.new_page()
        listing = await page.request.get(root + "/ui/api/requests")
        ids = [r["request_id"] for r in (await listing.json())["requests"]]
        assert len(ids) == sent and repaired_id in ids
        await page.goto(root + f"/ui/#/request/{repaired_id}")
        added = page.locator("#diff .cell.added[data-side=provider]")
        await added.wait_for()
        assert SYNTHETIC_TOOL_RESULT_TEXT in await added.inner_text()
        await context.close()

    # Stop the gateway: the workers flush their spans on the way out.
    proc = workers["proc"]
    proc.send_signal(signal.SIGTERM)
    assert await asyncio.wait_for(proc.wait(), 30) == 0

    lines = [json.loads(line) for line in workers["log"].read_text().splitlines()
             if line.startswith("{")]
    access = [line for line in lines if line["logger"] == "gateway.access"
              and line.get("wire") == "chat"]
    assert len(access) == sent
    assert len({line["request_id"] for line in access}) == sent
    assert len({line["pid"] for line in access}) == 2, "both workers served requests"
    assert KEY not in workers["log"].read_text()
    assert not [line for line in lines if line["level"] == "error" or "exc" in line]

    spans = _spans(collector)
    chats = [s for s in spans if s.name == "gateway.chat"]
    # Every request that named a served model has its span (the unknown model's 404 has none).
    assert len(chats) == sent - statuses["4xx"]
    assert {_attrs(s)["http.response.status_code"] for s in chats} == {200, 503}
    joined = [s for s in chats if s.trace_id.hex() == CLIENT_TRACE]
    assert len(joined) == 1
    attrs = _attrs(joined[0])
    assert attrs["gen_ai.operation.name"] == "chat" and attrs["gen_ai.request.model"] == "demo"
    assert int(attrs["gen_ai.usage.input_tokens"]) > 0  # type: ignore[call-overload]
