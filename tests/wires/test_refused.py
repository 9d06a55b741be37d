"""What a model refused as not its own, remembered for the session's later turns."""

from __future__ import annotations

from typing import Any

from gateway.wires.anthropic_rules import drop_thinking, signature, signatures
from gateway.wires.refused import RefusedSecrets


def turn(*signed: str) -> dict[str, Any]:
    return {"role": "assistant", "content": [
        *({"type": "thinking", "thinking": "t", "signature": s} for s in signed),
        {"type": "redacted_thinking", "data": "r-" + "".join(signed)},
        {"type": "text", "text": "answer"}]}


def test_only_the_blocks_a_model_refused_are_left_out_and_only_for_that_model() -> None:
    memory = RefusedSecrets()
    assert not memory  # nothing remembered: the codec skips the test altogether
    memory.remember("sonnet", signatures([turn("opus-1"), {"role": "user", "content": "q"}]))
    assert len(memory) == 2  # the signed block and the redacted one
    history = [turn("opus-1"), {"role": "user", "content": "q"}, turn("sonnet-1")]

    def refused(block: Any) -> bool:
        secret = signature(block)
        return secret is not None and memory.holds("sonnet", secret)
    out, anomalies = drop_thinking({"messages": history}, refused)
    assert [[b["type"] for b in m["content"]] for m in out["messages"]
            if m["role"] == "assistant"] == [["text"], ["thinking", "redacted_thinking", "text"]]
    assert [a.kind for a in anomalies] == ["thinking_block_dropped"] * 2
    assert not memory.holds("opus", "opus-1")  # the model that signed it still takes it


def test_the_memory_is_bounded() -> None:
    memory = RefusedSecrets(kept=3)
    memory.remember("m", ["a", "b", "c", "d"])
    assert len(memory) == 3
    assert [memory.holds("m", s) for s in "abcd"] == [False, True, True, True]
