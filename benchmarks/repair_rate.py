"""How many broken agent histories get an answer: direct vs. through the gateway.

Generates seeded broken histories the way agents break them (cancelled tool calls, trimmed
context, parallel results out of order, duplicated results, empty turns, leading assistant
turns, duplicated call ids, ...) and sends each one
  - straight to the strict referee (an OpenAI-compatible upstream enforcing the strict
    providers' rules) - the baseline an agent gets without the gateway;
  - through the gateway to the same referee;
  - through the gateway to native Anthropic Messages and Gemini servers (via litellm).
Prints the share answered, and how many needed the ladder (more than one attempt).
Usage: python benchmarks/repair_rate.py [--histories N] [--seed S]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import sys
from pathlib import Path
from typing import Any

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import aiohttp
import openai
from aiohttp import web

from gateway.config import parse_config
from gateway.referee import Referee
from gateway.server.app import create_app
from tests.conftest import free_port
from tests.factories import assistant, calls, system, tool, tool_call, user
from tests.fakes.anthropic_server import FakeAnthropic
from tests.fakes.gemini_server import FakeGemini

Message = dict[str, Any]


def valid_history(rng: random.Random) -> list[Message]:
    msgs: list[Message] = [system("You are a coding agent.")] if rng.random() < 0.7 else []
    n = 0
    for turn in range(rng.randint(2, 6)):
        msgs.append(user(f"task step {turn}"))
        for _ in range(rng.randint(0, 3)):
            ids = [f"call_{n + k}" for k in range(rng.randint(1, 3))]
            n += len(ids)
            # Parallel calls with their own arguments, as agents make them (litellm's Gemini
            # translation folds identical parallel calls into one).
            msgs.append(assistant(rng.choice([None, "Let me check."]),
                                  [tool_call(cid, "read_file", {"path": f"{cid}.py"})
                                   for cid in ids]))
            msgs.extend(tool(cid, f"output of {cid}") for cid in ids)
        msgs.append(assistant(f"done with step {turn}"))
    return msgs


def break_history(msgs: list[Message], rng: random.Random) -> list[Message]:
    out = [dict(m) for m in msgs]
    tool_idx = [i for i, m in enumerate(out) if m["role"] == "tool"]
    ops = ["drop_result", "drop_call", "move_result", "swap_parallel", "dup_result",
           "empty_turn", "leading_assistant", "dup_call_id", "double_assistant",
           "cancel_tail", "trim_head", "double_user", "blank_tool", "empty_tool_calls"]
    for op in rng.sample(ops, rng.randint(1, 3)):
        tool_idx = [i for i, m in enumerate(out) if m["role"] == "tool"]
        if op == "drop_result" and tool_idx:
            out.pop(rng.choice(tool_idx))
        elif op == "drop_call":
            call_idx = [i for i, m in enumerate(out) if m.get("tool_calls")]
            if call_idx:
                out.pop(rng.choice(call_idx))
        elif op == "move_result" and tool_idx:
            out.append(out.pop(rng.choice(tool_idx)))
        elif op == "swap_parallel":
            for i in range(len(out) - 1):
                if out[i]["role"] == "tool" and out[i + 1]["role"] == "tool":
                    out[i], out[i + 1] = out[i + 1], out[i]
                    break
        elif op == "dup_result" and tool_idx:
            i = rng.choice(tool_idx)
            out.insert(i + 1, dict(out[i], content="again"))
        elif op == "empty_turn":
            out.insert(rng.randint(0, len(out)), rng.choice([user("  "), assistant("")]))
        elif op == "leading_assistant":
            at = 1 if out and out[0]["role"] == "system" else 0
            out.insert(at, assistant("Welcome back!"))
        elif op == "dup_call_id":
            call_idx = [i for i, m in enumerate(out) if m.get("tool_calls")]
            if len(call_idx) >= 2:
                a, b = rng.sample(call_idx, 2)
                first_id = out[a]["tool_calls"][0]["id"]
                out[b] = dict(out[b], tool_calls=[dict(out[b]["tool_calls"][0], id=first_id),
                                                  *out[b]["tool_calls"][1:]])
        elif op == "double_assistant":
            out.insert(rng.randint(1, len(out)), assistant("Thinking about it."))
            out.insert(rng.randint(1, len(out)), assistant("Still thinking."))
        elif op == "cancel_tail":
            out.append(calls(f"call_tail_{rng.randint(0, 99)}"))
        elif op == "trim_head":
            out = out[rng.randint(1, max(1, len(out) // 2)):]
        elif op == "double_user":
            out.append(user("and one more thing"))
            out.append(user("also this"))
        elif op == "empty_tool_calls":
            texts = [i for i, m in enumerate(out)
                     if m["role"] == "assistant" and not m.get("tool_calls")]
            if texts:
                i = rng.choice(texts)
                out[i] = dict(out[i], tool_calls=[])
        elif op == "blank_tool" and tool_idx:
            i = rng.choice(tool_idx)
            out[i] = dict(out[i], content="")
    if not any(m["role"] == "user" for m in out) and rng.random() < 0.5:
        out.append(user("continue"))
    return out


async def send_all(base_url: str, model: str, histories: list[list[Message]],
                   headers: bool) -> tuple[int, int, dict[str, int]]:
    ok = ladder = 0
    errors: dict[str, int] = {}
    async with openai.AsyncOpenAI(base_url=base_url, api_key="k", max_retries=0) as client:
        for history in histories:
            try:
                raw = await client.chat.completions.with_raw_response.create(
                    model=model, messages=history)  # type: ignore[arg-type]
                ok += 1
                if headers and raw.headers.get("x-gateway-attempts", "1") != "1":
                    ladder += 1
            except openai.APIStatusError as err:
                key = f"{err.status_code}"
                errors[key] = errors.get(key, 0) + 1
    return ok, ladder, errors


async def main_async(n: int, seed: int) -> None:
    rng = random.Random(seed)
    histories = [break_history(valid_history(rng), rng) for _ in range(n)]
    histories = [h for h in histories if h]
    async with Referee(rules="strict") as ref, FakeAnthropic() as anth, FakeGemini() as gem:
        config = parse_config({
            "model_list": [
                {"model_name": "strict", "litellm_params": {
                    "model": "openai/referee", "api_base": ref.base_url, "api_key": "k"}},
                {"model_name": "claude", "litellm_params": {
                    "model": "anthropic/claude-sonnet-4-5-20250929",
                    "api_base": anth.base_url, "api_key": "k"}},
                {"model_name": "gemini", "litellm_params": {
                    "model": "gemini/gemini-2.5-flash", "api_base": gem.base_url,
                    "api_key": "k"}},
            ],
            "compaction": {"enabled": False},
        })
        runner = web.AppRunner(create_app(config))
        await runner.setup()
        port = free_port()
        await web.TCPSite(runner, "127.0.0.1", port).start()
        gw = f"http://127.0.0.1:{port}/v1"
        try:
            total = len(histories)
            ok, _, errors = await send_all(ref.base_url, "referee", histories, headers=False)
            print(f"{total} broken histories (seed {seed})")
            print(f"  direct to the strict upstream:           {ok / total:6.1%} answered"
                  f"  refusals by status: {errors}")
            for model, label in (("strict", "gateway -> strict OpenAI-compatible"),
                                 ("claude", "gateway -> native Anthropic (litellm)"),
                                 ("gemini", "gateway -> native Gemini (litellm)")):
                ok, ladder, errors = await send_all(gw, model, histories, headers=True)
                print(f"  {label:40s} {ok / total:6.1%} answered, {ladder} via the ladder"
                      f"  failures: {errors or 'none'}")
        finally:
            await runner.cleanup()
            async with aiohttp.ClientSession():
                pass


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--histories", type=int, default=300)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    asyncio.run(main_async(args.histories, args.seed))


if __name__ == "__main__":
    main()
