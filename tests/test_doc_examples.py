"""The README's examples run as written, against what ``make run`` serves.

The three wire snippets (real ``openai`` / ``anthropic`` SDKs, run as a user would in their
own Python process) print the ``x-gateway-repairs`` value their comment promises; the curl
examples (the ladder's strict resend and the dry run) answer what the prose says. The
gateway runs the shipped ``configs/gateway.yaml`` in front of the referee, whose port is
this test's. Every YAML block in docs/ is a config the gateway accepts.
"""

from __future__ import annotations

import asyncio
import copy
import os
import re
import shlex
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from gateway.config import parse_config
from gateway.referee import Referee
from tests.conftest import GatewayFactory, RunningGateway
from tests.http import post

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")
SHIPPED = ROOT / "configs" / "gateway.yaml"
DOCS_ROOT = "http://127.0.0.1:4000"


def fenced(text: str, language: str) -> list[str]:
    """The bodies of the ```language blocks of a Markdown page, in order."""
    return re.findall(rf"^ *```{language}\n(.*?)^ *```", text, flags=re.M | re.S)


def promised_prints(snippet: str) -> dict[int, str]:
    """``print(...)  # value`` lines: the index of the printed line -> the value promised."""
    prints = [line for line in snippet.splitlines() if line.startswith("print(")]
    return {i: line.partition("#")[2].strip() for i, line in enumerate(prints) if "#" in line}


def curl_commands(block: str) -> list[tuple[str, str]]:
    """The ``(url, body)`` of each ``curl ... -d BODY`` in a shell block."""
    commands = []
    for command in block.replace("\\\n", " ").splitlines():
        if command.strip().startswith("curl"):
            words = shlex.split(command)
            url = next(w for w in words if w.startswith("http"))
            commands.append((url, words[words.index("-d") + 1]))
    return commands


@pytest.fixture
async def referee() -> AsyncIterator[Referee]:
    async with Referee(rules="strict") as ref:  # `gateway referee`'s default rules
        yield ref


@pytest.fixture
async def demo(gateway_factory: GatewayFactory, referee: Referee,
               tmp_path: Path) -> RunningGateway:
    raw: dict[str, Any] = yaml.safe_load(SHIPPED.read_text())
    for entry in raw["model_list"]:  # the referee's port is this test's, not 4001
        entry["litellm_params"]["api_base"] = referee.base_url
    raw["sessions"]["data_dir"] = str(tmp_path / "data")
    return await gateway_factory(raw)


def test_the_readme_has_one_snippet_per_wire() -> None:
    snippets = fenced(README, "python")
    assert [("chat.completions" in s, "responses." in s, "messages." in s)
            for s in snippets] == [(True, False, False), (False, True, False),
                                   (False, False, True)]
    assert all(promised_prints(s) == {0: "tool_result_synthesized=1"} for s in snippets)


@pytest.mark.parametrize("index", [0, 1, 2], ids=["chat", "responses", "messages"])
async def test_a_readme_wire_snippet_prints_what_its_comment_says(
        demo: RunningGateway, referee: Referee, index: int) -> None:
    snippet = fenced(README, "python")[index]
    env = {k: v for k, v in os.environ.items() if k != "GATEWAY_KEY"}  # the demo: "none"
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-c", snippet.replace(DOCS_ROOT, demo.root), env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(process.communicate(), 120)
    assert process.returncode == 0, err.decode()
    printed = out.decode().splitlines()
    for line, value in promised_prints(snippet).items():
        assert printed[line] == value
    # the referee refused nothing: it got the history with the missing result added
    assert printed[-1] == "referee: accepted 4 messages"
    assert len(referee.requests) == 1


async def test_the_readme_curl_examples_answer_what_the_prose_says(
        demo: RunningGateway, referee: Referee) -> None:
    assert "(`x-gateway-recovery: strict`, `x-gateway-attempts: 2`)" in README
    (ladder_url, ladder_body), (dry_url, dry_body) = curl_commands(fenced(README, "sh")[1])
    ladder = await post(ladder_url.replace(DOCS_ROOT, demo.root),
                        data=ladder_body.encode())
    assert ladder.status == 200
    assert ladder.headers["x-gateway-recovery"] == "strict"
    assert ladder.headers["x-gateway-attempts"] == "2"
    assert ladder.headers["x-gateway-repairs"] == "user_messages_merged=1"
    assert [r.status for r in referee.requests] == [400, 200]
    calls = len(referee.requests)
    dry = await post(dry_url.replace(DOCS_ROOT, demo.root), data=dry_body.encode())
    assert dry.status == 200
    assert dry.json["repaired"] is True
    assert dry.json["counts"] == {"leading_non_user_dropped": 1}
    assert dry.json["messages"] == [{"role": "user", "content": "hi"}]
    assert len(referee.requests) == calls  # "without calling any upstream"


@pytest.mark.parametrize("page", sorted((ROOT / "docs").glob("*.md")), ids=lambda p: p.name)
def test_every_yaml_block_in_the_docs_is_a_config_the_gateway_accepts(
        page: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "GATEWAY_KEY"):
        monkeypatch.setenv(name, f"doc-example-{name.lower()}")
    shipped = yaml.safe_load(SHIPPED.read_text())
    for block in fenced(page.read_text(encoding="utf-8"), "yaml"):
        doc = yaml.safe_load(block)
        # a whole config stands alone; a section goes into the shipped demo config
        raw = doc if "model_list" in doc else {**copy.deepcopy(shipped), **doc}
        parse_config(raw, source=f"{page.name}: {block.splitlines()[0]}")
