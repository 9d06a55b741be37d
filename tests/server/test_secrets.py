"""Planted secrets: every kind of secret the config holds (a client key, the
LiteLLM master key, a literal upstream key, an upstream key from the environment, a secret
header and an ``environment_variables`` value) is carried by an upstream that echoes what it
was sent (headers and body) into its errors, and none of them comes out of the gateway: not
in error bodies, SSE error events, logs, spans, the inspector's pages or its SQLite file,
recall results sent upstream or ``gateway check-config``."""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml
from aiohttp import web

from gateway.cli import main as cli_main
from gateway.referee import Referee
from tests.compaction.conftest import (
    Gateways,
    Session,
    agent_turn,
    compaction_header,
    demo_config,
    gateways,
)
from tests.conftest import GatewayFactory, RunningGateway, serve_app
from tests.factories import assistant, tool, tool_call, user

CLIENT_KEY = "client-key-PLANTED-a1b2c3"
MASTER_KEY = "sk-master-PLANTED-d4e5f6"
UPSTREAM_KEY = "upstream-literal-PLANTED-g7h8"
ENV_UPSTREAM_KEY = "upstream-env-PLANTED-i9j0"
HEADER_SECRET = "header-token-PLANTED-k1l2"
ENV_SECTION_SECRET = "env-section-PLANTED-m3n4"
SECRETS = (CLIENT_KEY, MASTER_KEY, UPSTREAM_KEY, ENV_UPSTREAM_KEY, HEADER_SECRET,
           ENV_SECTION_SECRET)
# What a user pastes into a conversation: every secret, the upstream's among them.
PASTED = "my keys: " + " ".join(SECRETS)


@pytest.fixture(autouse=True)
def planted_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PLANTED_UPSTREAM_KEY", ENV_UPSTREAM_KEY)
    # Start-up exports environment_variables (setdefault): set it here so it is undone.
    monkeypatch.setenv("PLANTED_ENV_SECTION", ENV_SECTION_SECRET)


def found_in(text: str | bytes) -> list[str]:
    """The planted secrets present in ``text``."""
    data = text.encode() if isinstance(text, str) else text
    return [s for s in SECRETS if s.encode() in data]


class Echo:
    """An upstream (chat and Anthropic Messages) that answers with whatever it was sent,
    headers and body, inside an error: as a JSON error, or as an error event after the
    first event of a stream."""

    def __init__(self) -> None:
        self.received: list[str] = []
        self.app = web.Application()
        self.app.router.add_post("/v1/{tail:.*}", self.answer)
        self.runner: web.AppRunner | None = None
        self.base_url = ""

    async def __aenter__(self) -> Echo:
        self.runner, root = await serve_app(self.app)
        self.base_url = root + "/v1"
        return self

    async def __aexit__(self, *_: object) -> None:
        assert self.runner is not None
        await self.runner.cleanup()

    async def answer(self, request: web.Request) -> web.StreamResponse:
        seen = json.dumps({"headers": dict(request.headers), "body": await request.text()})
        self.received.append(seen)
        anthropic = request.path.startswith("/v1/messages")
        if anthropic:
            error = {"type": "error", "error": {"type": "invalid_request_error",
                                                "message": f"rejected: {seen}"}}
        else:
            error = {"error": {"message": f"rejected: {seen}", "type": "invalid_request_error",
                               "param": None, "code": None}}
        body = json.loads(await request.text())
        if not body.get("stream"):
            return web.json_response(error, status=400)
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        if anthropic:
            start = {"type": "message_start", "message": {
                "id": "msg_1", "type": "message", "role": "assistant", "model": "claude-x",
                "content": [], "stop_reason": None, "stop_sequence": None,
                "usage": {"input_tokens": 3, "output_tokens": 0}}}
            await response.write(b"event: message_start\ndata: " + json.dumps(start).encode()
                                 + b"\n\n")
            await response.write(b"event: error\ndata: " + json.dumps(error).encode() + b"\n\n")
        else:
            chunk = {"id": "c1", "object": "chat.completion.chunk", "created": 0, "model": "up",
                     "choices": [{"index": 0, "delta": {"role": "assistant", "content": "a"},
                                  "finish_reason": None}]}
            await response.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
            await response.write(b"data: " + json.dumps(error).encode() + b"\n\n")
        await response.write_eof()
        return response


@pytest.fixture
async def echo() -> AsyncIterator[Echo]:
    async with Echo() as server:
        yield server


def planted_config(echo: Echo) -> dict[str, Any]:
    return {
        "model_list": [
            {"model_name": "chat", "litellm_params": {
                "model": "openai/up", "api_base": echo.base_url, "api_key": UPSTREAM_KEY,
                "extra_headers": {"X-Portkey-Token": HEADER_SECRET}},
             "model_info": {"responses_api": False}},  # a chat server: Responses translated
            {"model_name": "chat-env", "litellm_params": {
                "model": "openai/up", "api_base": echo.base_url,
                "api_key": "os.environ/PLANTED_UPSTREAM_KEY"}},
            {"model_name": "claude", "litellm_params": {
                "model": "anthropic/claude-x", "api_base": echo.base_url,
                "api_key": "os.environ/PLANTED_UPSTREAM_KEY"}},
        ],
        "gateway": {"api_keys": [CLIENT_KEY], "ui": True, "capture_bodies": True,
                    "capture_max_chars": 100_000},
        "general_settings": {"master_key": MASTER_KEY},
        "environment_variables": {"PLANTED_ENV_SECTION": ENV_SECTION_SECRET},
        "recovery": {"max_transient_retries": 0, "strict": False, "media": False},
    }


def chat_body(model: str, stream: bool) -> dict[str, Any]:
    return {"model": model, "stream": stream, "messages": [user(PASTED)]}


def messages_body(model: str, stream: bool) -> dict[str, Any]:
    return {"model": model, "stream": stream, "max_tokens": 10,
            "messages": [{"role": "user", "content": PASTED}]}


# (path, body, the client key used, the status expected)
REQUESTS = [
    ("/v1/chat/completions", chat_body("chat", False), MASTER_KEY, 400),
    ("/v1/chat/completions", chat_body("chat", True), MASTER_KEY, 200),
    ("/v1/chat/completions", chat_body("chat-env", False), CLIENT_KEY, 400),
    ("/v1/chat/completions", chat_body("chat-env", True), CLIENT_KEY, 200),
    ("/v1/messages", messages_body("claude", False), MASTER_KEY, 400),
    # (refused right after message_start: no output yet, so a whole error in its shape)
    ("/v1/messages", messages_body("claude", True), MASTER_KEY, 400),
    ("/v1/messages", messages_body("chat", True), MASTER_KEY, 200),
    ("/v1/messages", messages_body("chat", False), MASTER_KEY, 400),
    ("/v1/messages/count_tokens", messages_body("claude", False), MASTER_KEY, 400),
    ("/v1/responses", {"model": "chat", "input": PASTED}, MASTER_KEY, 400),
    ("/v1/responses", {"model": "chat", "input": PASTED, "stream": True}, MASTER_KEY, 200),
    # A key sent where a model name goes comes back in the refusal: masked there too.
    ("/v1/chat/completions", chat_body(MASTER_KEY, False), MASTER_KEY, 404),
]


def span_dump(gw: RunningGateway) -> str:
    return json.dumps([{"name": s.name, "status": s.status.description,
                        "attributes": dict(s.attributes or {}),
                        "events": [dict(e.attributes or {}) for e in s.events]}
                       for s in gw.spans.get_finished_spans()], default=str)


async def test_no_planted_secret_leaves_through_any_channel(
    gateway_factory: GatewayFactory, echo: Echo, tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    gw = await gateway_factory(planted_config(echo))
    answers: list[str] = []
    async with aiohttp.ClientSession() as http:
        for path, body, key, status in REQUESTS:
            headers = {"Authorization": f"Bearer {key}", "anthropic-version": "2023-06-01"}
            async with http.post(gw.root + path, json=body, headers=headers) as r:
                text = (await r.read()).decode()
                answers.append(f"{path} {r.status} {dict(r.headers)} {text}")
                assert r.status == status, answers[-1]
                if status == 200:  # a stream that failed after its first event
                    assert "error" in text, answers[-1]
        # The upstream was given every secret (in its headers or the body it echoed), and
        # its echo reached the gateway's answers (masked).
        assert set(found_in("".join(echo.received))) == set(SECRETS)
        assert all("***" in a for a in answers[:-1])
        # The inspector's pages (each key's owner sees its own requests): the list and every
        # request's detail, with the captured messages.
        pages, shown = [], 0
        for key in (CLIENT_KEY, MASTER_KEY):
            bearer = {"Authorization": f"Bearer {key}"}
            async with http.get(gw.root + "/ui/api/requests", headers=bearer) as r:
                assert r.status == 200
                listing = await r.json()
                pages.append(json.dumps(listing))
            for entry in listing["requests"]:
                shown += 1
                async with http.get(gw.root + f"/ui/api/requests/{entry['request_id']}",
                                    headers=bearer) as r:
                    assert r.status == 200
                    pages.append(await r.text())
        assert shown >= len(REQUESTS) - 2  # model calls (count_tokens is not one)
        async with http.get(gw.root + "/metrics") as r:
            metrics = await r.text()
    assert any("***" in page for page in pages)  # captured messages, masked
    data_dir = Path(gw.config.sessions.data_dir)
    inspector_files = sorted(data_dir.glob("inspector.sqlite3*"))
    assert inspector_files
    stored = b"".join(f.read_bytes() for f in inspector_files)

    leaks = {
        "answers": found_in("\n".join(answers)),
        "logs": found_in(caplog.text),
        "spans": found_in(span_dump(gw)),
        "metrics": found_in(metrics),
        "inspector pages": found_in("\n".join(pages)),
        "inspector file": found_in(stored),
    }
    assert leaks == {name: [] for name in leaks}


async def test_a_log_line_or_traceback_naming_a_secret_is_masked(
    gateway_factory: GatewayFactory, echo: Echo, capsys: pytest.CaptureFixture[str],
) -> None:
    from gateway.telemetry.access_log import setup_logging

    await gateway_factory(planted_config(echo))  # registers the config's secrets
    root = logging.getLogger()
    saved = root.handlers[:], root.level
    for fmt in ("text", "json"):
        setup_logging("info", fmt)
        try:
            raise RuntimeError(f"upstream said {MASTER_KEY} / {ENV_SECTION_SECRET}")
        except RuntimeError:
            logging.getLogger("gateway.test").exception("failed with %s", HEADER_SECRET)
    root.handlers[:], root.level = saved[0], saved[1]
    err = capsys.readouterr().err
    assert "RuntimeError" in err and "***" in err
    assert found_in(err) == []


async def test_check_config_prints_no_planted_secret(
    echo: Echo, tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    config = planted_config(echo)
    # A secret reused outside a secret-named key (here as a model alias) is masked too.
    config["model_list"][0]["model_info"] = {"note": f"was {MASTER_KEY}"}
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    path.chmod(0o600)
    assert cli_main(["check-config", str(path)]) == 0
    out = capsys.readouterr()
    assert "chat-env" in out.out and "***" in out.out
    assert found_in(out.out + out.err) == []


REFEREE_WINDOW = 1500
__all__ = ["gateways"]  # the compaction suites' fixture


@pytest.fixture
async def ref() -> AsyncIterator[Referee]:
    async with Referee(rules="openai", style="openai", context_window=REFEREE_WINDOW) as r:
        yield r


def recall_reply(arguments: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": "chatcmpl-recall", "object": "chat.completion", "created": 1_700_000_000,
        "model": "referee",
        "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
            "role": "assistant", "content": None,
            "tool_calls": [{"id": "call_recall", "type": "function", "function": {
                "name": "context_recall", "arguments": json.dumps(arguments)}}]}}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 10, "total_tokens": 20},
    }


async def test_recall_results_sent_upstream_hold_no_planted_secret(
    gateways: Gateways, ref: Referee,
) -> None:
    raw = demo_config(ref, compaction={"recall": True},
                      gateway={"api_keys": [CLIENT_KEY]},
                      general_settings={"master_key": MASTER_KEY},
                      environment_variables={"PLANTED_ENV_SECTION": ENV_SECTION_SECRET})
    params = raw["model_list"][0]["litellm_params"]
    params["api_key"] = "os.environ/PLANTED_UPSTREAM_KEY"
    params["extra_headers"] = {"X-Portkey-Token": HEADER_SECRET}
    raw["model_list"].append({"model_name": "other", "litellm_params": {
        "model": "openai/referee", "api_base": ref.base_url, "api_key": UPSTREAM_KEY}})
    gw = await gateways.start(raw)
    s = Session(gw, session_id="planted-1", key=MASTER_KEY)
    await s.send([
        user("Open settings.txt."),
        assistant(None, [tool_call("call_cfg", "read_file", {"path": "settings.txt"})]),
        tool("call_cfg", f"FACT = 'ORCHID-7731'\nKEYS = '{PASTED}'\nLITERAL = '{UPSTREAM_KEY}'"),
    ])
    for i in range(1, 9):
        header = compaction_header(await s.send(agent_turn(i)))
        if header is not None and header[0] == "summarized":
            break
    else:
        raise AssertionError("the session never needed a compaction")
    ref.script(200, recall_reply({"query": "KEYS"}))
    mark = len(ref.requests)
    await s.send([user("What does settings.txt say?")])
    results = [m["content"] for r in ref.requests[mark:] if r.body
               for m in r.json().get("messages", []) if m.get("role") == "tool"
               and "Archive of session" in str(m.get("content"))]
    assert results, "the recall was answered"
    assert "ORCHID-7731" in results[-1] and "KEYS = 'my keys: ***" in results[-1]
    assert found_in("\n".join(results)) == []
