"""With ``telemetry.exporter: otlp`` the spans reach an OTLP/HTTP collector."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import openai
import pytest
from aiohttp import web
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from gateway.config import parse_config
from gateway.referee import Referee
from gateway.server.app import create_app
from tests.conftest import model_entry, serve_app
from tests.factories import tool, user


@dataclass
class Collector:
    url: str = ""
    requests: list[ExportTraceServiceRequest] = field(default_factory=list)


@pytest.fixture
async def collector() -> AsyncIterator[Collector]:
    col = Collector()

    async def traces(request: web.Request) -> web.Response:
        col.requests.append(ExportTraceServiceRequest.FromString(await request.read()))
        return web.Response(body=b"", content_type="application/x-protobuf")

    app = web.Application()
    app.router.add_post("/v1/traces", traces)
    runner, root = await serve_app(app)
    col.url = f"{root}/v1/traces"
    yield col
    await runner.cleanup()


async def test_spans_are_exported_over_otlp_http(collector: Collector, tmp_path: object) -> None:
    async with Referee(rules="openai") as ref:
        config = parse_config({
            "model_list": [model_entry("demo", ref.base_url)],
            "gateway": {"telemetry": {"exporter": "otlp", "endpoint": collector.url,
                                      "service_name": "gw-test"}},
            "sessions": {"data_dir": str(tmp_path)},
        })
        runner, root = await serve_app(create_app(config))
        try:
            async with openai.AsyncOpenAI(base_url=f"{root}/v1",
                                          api_key="k", max_retries=0) as c:
                await c.chat.completions.create(model="demo",
                                                messages=[user("hi"), tool("call_ghost")])
        finally:
            await runner.cleanup()  # flushes the batch processor
    spans = [span for req in collector.requests for rs in req.resource_spans
             for ss in rs.scope_spans for span in ss.spans]
    names = {s.name for s in spans}
    assert {"gateway.chat", "gateway.attempt"} <= names
    chat = next(s for s in spans if s.name == "gateway.chat")
    attrs = {a.key: a.value for a in chat.attributes}
    assert attrs["gateway.repair.orphan_tool_result_dropped"].int_value == 1
    assert [e.name for e in chat.events] == ["context_projection_repaired"]
    service = {a.key: a.value.string_value
               for a in collector.requests[0].resource_spans[0].resource.attributes}
    assert service["service.name"] == "gw-test"
