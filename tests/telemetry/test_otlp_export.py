"""With ``telemetry.exporter: otlp`` the spans reach an OTLP/HTTP collector."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import openai
import pytest
from aiohttp import web
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from gateway.config import parse_config
from gateway.referee import Referee
from gateway.server.app import create_app
from tests.conftest import GatewayFactory, model_entry, serve_app
from tests.factories import tool, user


@dataclass
class Collector:
    url: str = ""
    requests: list[ExportTraceServiceRequest] = field(default_factory=list)


@asynccontextmanager
async def _gateway_client(ref: Referee, data_dir: object,
                          gateway: dict[str, object] | None = None,
                          ) -> AsyncIterator[openai.AsyncOpenAI]:
    """An openai client of a gateway in front of ``ref`` (stopped on exit, which flushes the
    span exporter's batch)."""
    config = parse_config({"model_list": [model_entry("demo", ref.base_url)],
                           "gateway": gateway or {}, "sessions": {"data_dir": str(data_dir)}})
    runner, root = await serve_app(create_app(config))
    try:
        async with openai.AsyncOpenAI(base_url=f"{root}/v1", api_key="k", max_retries=0) as c:
            yield c
    finally:
        await runner.cleanup()


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
        telemetry = {"exporter": "otlp", "endpoint": collector.url, "service_name": "gw-test"}
        async with _gateway_client(ref, tmp_path, {"telemetry": telemetry}) as c:
            await c.chat.completions.create(model="demo",
                                            messages=[user("hi"), tool("call_ghost")])
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


CLIENT_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CLIENT_SPAN = "00f067aa0ba902b7"
LEAKED_KEY = "client-key-pasted-in-tracestate-0042"


def _spans(collector: Collector) -> list[Span]:
    return [span for req in collector.requests for rs in req.resource_spans
            for ss in rs.scope_spans for span in ss.spans]


def _attrs(span: Span) -> dict[str, object]:
    out: dict[str, object] = {}
    for a in span.attributes:
        kind = a.value.WhichOneof("value")
        out[a.key] = getattr(a.value, kind) if kind else None
    return out


async def test_spans_follow_genai_conventions_and_join_the_clients_trace(
    collector: Collector, tmp_path: object, monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Configured only by the standard OTEL_* variables: nothing in the YAML.
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "otlp")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", collector.url)
    monkeypatch.setenv("OTEL_SERVICE_NAME", "gw-from-env")
    async with Referee(rules="openai") as ref:
        async with _gateway_client(ref, tmp_path) as c:
            await c.chat.completions.create(
                model="demo", messages=[user("hi"), tool("call_ghost")], max_tokens=50,
                temperature=0.2,
                extra_headers={"traceparent": f"00-{CLIENT_TRACE}-{CLIENT_SPAN}-01"})
            stream = await c.chat.completions.create(
                model="demo", messages=[user("stream it")], stream=True,
                stream_options={"include_usage": True})
            async for _ in stream:
                pass
        upstream_traceparents = [r.header("traceparent") for r in ref.requests]
    spans = _spans(collector)
    chats = [s for s in spans if s.name == "gateway.chat"]
    assert len(chats) == 2
    joined = next(s for s in chats if s.trace_id.hex() == CLIENT_TRACE)
    assert joined.parent_span_id.hex() == CLIENT_SPAN
    assert joined.kind == Span.SpanKind.SPAN_KIND_SERVER
    attrs = _attrs(joined)
    assert attrs["gen_ai.operation.name"] == "chat"
    assert attrs["gen_ai.request.model"] == "demo"
    assert attrs["gen_ai.system"] == "openai"
    assert attrs["gen_ai.response.model"] == "demo-upstream"
    assert attrs["gen_ai.request.max_tokens"] == 50
    assert attrs["gen_ai.request.temperature"] == pytest.approx(0.2)
    assert int(attrs["gen_ai.usage.input_tokens"]) > 0  # type: ignore[call-overload]
    assert int(attrs["gen_ai.usage.output_tokens"]) > 0  # type: ignore[call-overload]
    assert attrs["gateway.repair.orphan_tool_result_dropped"] == 1
    assert attrs["http.response.status_code"] == 200
    # The attempt is a CLIENT child of the request span, and the upstream saw its context.
    attempt = next(s for s in spans if s.name == "gateway.attempt"
                   and s.trace_id.hex() == CLIENT_TRACE)
    assert attempt.parent_span_id == joined.span_id
    assert attempt.kind == Span.SpanKind.SPAN_KIND_CLIENT
    assert _attrs(attempt)["gen_ai.request.model"] == "demo-upstream"
    assert upstream_traceparents[0] == (
        f"00-{CLIENT_TRACE}-{attempt.span_id.hex()}-01")
    # A request without traceparent starts its own trace; streamed usage reaches its span.
    streamed = next(s for s in chats if s.trace_id.hex() != CLIENT_TRACE)
    assert streamed.parent_span_id == b""
    assert int(_attrs(streamed)["gen_ai.usage.output_tokens"]) > 0  # type: ignore[call-overload]
    service = {a.key: a.value.string_value
               for a in collector.requests[0].resource_spans[0].resource.attributes}
    assert service["service.name"] == "gw-from-env"


async def test_without_an_exporter_the_clients_trace_context_is_passed_on(
    tmp_path: object, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Nothing is exported (the default): the upstream gets the client's own trace context
    when it sent one, and no trace header when it did not."""
    monkeypatch.delenv("OTEL_TRACES_EXPORTER", raising=False)
    async with Referee(rules="openai") as ref:
        async with _gateway_client(ref, tmp_path) as c:
            for headers in ({"traceparent": f"00-{CLIENT_TRACE}-{CLIENT_SPAN}-01"}, {}):
                await c.chat.completions.create(
                    model="demo", messages=[user("hi"), tool("call_ghost")],
                    extra_headers=headers)
        passed_on = [r.header("traceparent") for r in ref.requests]
    assert passed_on == [f"00-{CLIENT_TRACE}-{CLIENT_SPAN}-01", None]


async def test_a_tracestate_quoting_a_key_is_not_carried(
        gateway_factory: GatewayFactory) -> None:
    """A client's tracestate (or baggage) that quotes a key is left out of its trace: it
    would be exported with every span and sent upstream. A clean one comes along."""
    async with Referee(rules="openai") as ref:
        gw = await gateway_factory({
            "model_list": [model_entry("demo", ref.base_url)],
            "gateway": {"api_keys": [LEAKED_KEY]}})
        async with openai.AsyncOpenAI(base_url=gw.base_url, api_key=LEAKED_KEY,
                                      max_retries=0) as c:
            for state in (f"vendor={LEAKED_KEY}", "vendor=clean-value"):
                await c.chat.completions.create(
                    model="demo", messages=[user("hi")],
                    extra_headers={"traceparent": f"00-{CLIENT_TRACE}-{CLIENT_SPAN}-01",
                                   "tracestate": state, "baggage": f"k={LEAKED_KEY}"})
        sent = [r.header("tracestate") or "" for r in ref.requests]
    states = [str(s.context.trace_state) for s in gw.spans.get_finished_spans()]
    assert states and not any(LEAKED_KEY in state for state in (*states, *sent))
    assert any("clean-value" in state for state in states)
    assert all(s.context.trace_id == int(CLIENT_TRACE, 16)
               for s in gw.spans.get_finished_spans())
