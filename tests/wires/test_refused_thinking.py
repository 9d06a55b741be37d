"""The thinking blocks a model refused, remembered for the session's later turns."""

from __future__ import annotations

from typing import Any

from gateway.wires.anthropic_rules import drop_thinking
from gateway.wires.refused_thinking import RefusedThinking


def turn(*signatures: str) -> dict[str, Any]:
    return {"role": "assistant", "content": [
        *({"type": "thinking", "thinking": "t", "signature": s} for s in signatures),
        {"type": "text", "text": "answer"}]}


def test_only_the_blocks_a_model_refused_are_left_out_and_only_for_that_model() -> None:
    memory = RefusedThinking()
    assert memory.refused("sonnet") is None  # nothing remembered: nothing to test
    memory.remember("sonnet", [turn("opus-1"), {"role": "user", "content": "q"},
                               turn("opus-2")])
    history = [turn("opus-1"), {"role": "user", "content": "q"}, turn("opus-2", "sonnet-1")]
    refused = memory.refused("sonnet")
    assert refused is not None
    out, anomalies = drop_thinking({"messages": history}, refused)
    assert [[b.get("signature") for b in m["content"]] for m in out["messages"]
            if m["role"] == "assistant"] == [[None], ["sonnet-1", None]]
    assert [a.kind for a in anomalies] == ["thinking_block_dropped"] * 2
    other = memory.refused("opus")
    assert other is not None and not any(other(b) for b in history[0]["content"])
    assert drop_thinking({"messages": [turn("sonnet-1")]}, refused)[1] == ()


def test_the_memory_is_bounded() -> None:
    memory = RefusedThinking(kept=3)
    memory.remember("m", [turn("a", "b"), turn("c", "d")])
    assert len(memory) == 3
    refused = memory.refused("m")
    assert refused is not None
    assert [refused(b) for b in turn("a", "b", "c", "d")["content"][:4]] == [
        False, True, True, True]
