"""The dry run and ``gateway check`` take all three wire shapes (detected or ``?wire=``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from gateway.cli import main
from tests.conftest import GatewayFactory

ANTHROPIC = {"model": "claude", "max_tokens": 10, "system": "be brief", "messages": [
    {"role": "user", "content": "ls"},
    {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "ls",
                                       "input": {}}]},
    {"role": "user", "content": "go on"}]}
RESPONSES = {"model": "gpt", "input": [
    {"role": "user", "content": "hi"},
    {"type": "function_call_output", "call_id": "gone", "output": "x"}]}


async def test_dry_run_detects_each_wire(gateway_factory: GatewayFactory) -> None:
    gw = await gateway_factory({"model_list": []})
    async with httpx.AsyncClient(base_url=gw.root) as c:
        a = (await c.post("/v1/gateway/project", json=ANTHROPIC)).json()
        r = (await c.post("/v1/gateway/project", json=RESPONSES)).json()
        forced = await c.post("/v1/gateway/project?wire=anthropic", json={
            "messages": [{"role": "assistant", "content": "hi"}, {"role": "user",
                                                                  "content": "x"}]})
        bad = await c.post("/v1/gateway/project?wire=soap", json=ANTHROPIC)
    # (tool blocks and no tools: Anthropic refuses that, so the tools used are declared)
    assert a["wire"] == "anthropic"
    assert a["counts"] == {"tool_result_synthesized": 1, "tools_declared": 1}
    assert a["messages"][2]["content"][0]["type"] == "tool_result"
    assert r["wire"] == "responses" and r["counts"] == {"orphan_tool_result_dropped": 1}
    assert r["input"] == [{"role": "user", "content": "hi"}]
    assert forced.json()["wire"] == "anthropic" and not forced.json()["repaired"]
    assert bad.status_code == 400 and "wire must be one of" in bad.json()["error"]["message"]


@pytest.mark.parametrize(("body", "wire"), [(ANTHROPIC, "anthropic"), (RESPONSES, "responses")])
def test_check_cli_reads_each_wire(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                   body: dict[str, Any], wire: str) -> None:
    saved = tmp_path / "request.json"
    saved.write_text(json.dumps(body))
    assert main(["check", str(saved)]) == 1
    assert f"({wire})" in capsys.readouterr().out
    assert main(["check", str(saved), "--json"]) == 1
    assert json.loads(capsys.readouterr().out)["wire"] == wire


def test_check_cli_unreadable_wire_body(tmp_path: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    saved = tmp_path / "request.json"
    saved.write_text(json.dumps({"input": 5}))
    assert main(["check", str(saved)]) == 2
    assert "input" in capsys.readouterr().err


@pytest.mark.parametrize("wire", ["chat", "anthropic", "responses"])
async def test_the_dry_run_and_check_list_what_a_reject_policy_answers(
    gateway_factory: GatewayFactory, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    wire: str
) -> None:
    hidden = "".join(chr(0xE0000 + ord(c)) for c in "obey")
    body: dict[str, Any] = {
        "chat": {"model": "m", "messages": [
            {"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"},
            {"role": "tool", "tool_call_id": "gone", "content": "x" + hidden},
            {"role": "user", "content": "go"}]},
        "anthropic": {"model": "m", "max_tokens": 5, "messages": [
            {"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "gone",
                                          "content": "x" + hidden},
                                         {"type": "text", "text": "go"}]}]},
        "responses": {"model": "m", "input": [
            {"role": "user", "content": "hi"},
            {"type": "function_call_output", "call_id": "gone", "output": "x" + hidden}]},
    }[wire]
    gw = await gateway_factory({"model_list": []})
    async with httpx.AsyncClient(base_url=gw.root) as c:
        got = (await c.post(f"/v1/gateway/project?wire={wire}", json=body)).json()
    [violation] = got["violations"]
    assert violation["rule"] == "orphan_tool_result_dropped"
    assert violation["message" if wire != "responses" else "item"] == (2 if wire != "responses"
                                                                       else 1)
    assert violation["tool_call_id"] == "gone" and violation["repair"] == "drop the tool result"
    assert got["invisible"]["total"] == 4
    assert got["invisible"]["hidden_text"][0]["text"] == "obey"
    saved = tmp_path / "request.json"
    saved.write_text(json.dumps(body))
    assert main(["check", str(saved), "--wire", wire]) == 1
    out = capsys.readouterr().out
    assert "orphan_tool_result_dropped tool_call_id=gone" in out
    assert "hidden text: 'obey'" in out
