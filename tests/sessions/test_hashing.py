"""Hash chain and fingerprint: stable definitions and the prefix property."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.sessions.hashing import (
    canonical,
    extend_chain,
    hash_client_key,
    prefix_chain,
    session_fingerprint,
)

_text = st.text(max_size=20)
_scalar = st.none() | st.booleans() | st.integers(-(2**53), 2**53) | _text
_json = st.recursive(
    _scalar,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_text, inner, max_size=3),
    max_leaves=8,
)
_message = st.fixed_dictionaries(
    {"role": st.sampled_from(["system", "user", "assistant", "tool"]), "content": _json},
    optional={"name": _text, "tool_call_id": _text},
)
_history = st.lists(_message, max_size=12)


def _reference_chain(messages: list[dict[str, Any]]) -> list[str]:
    """Independent re-statement of the spec: sha256(prev_digest + sorted-key JSON)."""
    out: list[str] = []
    prev = b""
    for m in messages:
        text = json.dumps(m, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        prev = hashlib.sha256(prev + text.encode()).digest()
        out.append(prev.hex())
    return out


def test_chain_matches_the_documented_definition() -> None:
    msgs: list[dict[str, Any]] = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "héllo ✓", "name": "bob"},
        {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "type": "function"}]},
    ]
    assert prefix_chain(msgs) == _reference_chain(msgs)


def test_chain_is_pinned_across_versions() -> None:
    # Stored records hold these digests: changing canonicalization orphans them all.
    msgs = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]
    first = hashlib.sha256(b'{"content":"hi","role":"user"}').hexdigest()
    assert prefix_chain(msgs)[0] == first
    assert prefix_chain(msgs) == [
        "9017285104d1b249960a30732b8e92f6e2fb3acf8d8e4b2a16c116ad0c1ed211",
        "0d04b67f399038490e53c37ceba42116e02ae719e83afaca0338dd85748ce68d",
    ]


def test_key_order_does_not_matter_but_values_do() -> None:
    a = [{"role": "user", "content": "x"}]
    b = [{"content": "x", "role": "user"}]
    c = [{"role": "user", "content": "x "}]
    assert prefix_chain(a) == prefix_chain(b)
    assert prefix_chain(a) != prefix_chain(c)
    assert canonical(a[0]) == canonical(b[0])


def test_position_matters() -> None:
    m1 = {"role": "user", "content": "one"}
    m2 = {"role": "user", "content": "two"}
    assert prefix_chain([m1, m2])[1] != prefix_chain([m2, m1])[1]
    # Same message twice yields two different digests (the chain carries position).
    assert len(set(prefix_chain([m1, m1]))) == 2


def test_empty_history_has_empty_chain() -> None:
    assert prefix_chain([]) == []


@settings(max_examples=100, deadline=None)
@given(_history, _history)
def test_prefix_property(a: list[dict[str, Any]], b: list[dict[str, Any]]) -> None:
    whole = prefix_chain(a + b)
    assert len(whole) == len(a) + len(b)
    assert whole[: len(a)] == prefix_chain(a)
    assert whole == prefix_chain(a) + extend_chain(whole[len(a) - 1] if a else None, b)


@settings(max_examples=100, deadline=None)
@given(_history)
def test_chain_is_deterministic_and_does_not_mutate(msgs: list[dict[str, Any]]) -> None:
    before = json.dumps(msgs)
    assert prefix_chain(msgs) == prefix_chain([dict(m) for m in msgs])
    assert json.dumps(msgs) == before


@settings(max_examples=100, deadline=None)
@given(_history, _message)
def test_a_changed_message_changes_every_later_digest(
    msgs: list[dict[str, Any]], other: dict[str, Any]
) -> None:
    if not msgs or canonical(other) == canonical(msgs[0]):
        return
    changed = [other, *msgs[1:]]
    assert all(x != y for x, y in zip(prefix_chain(msgs), prefix_chain(changed), strict=True))


# -- session fingerprint ----------------------------------------------------------

_SYS = {"role": "system", "content": "You are a coding agent."}
_U1 = {"role": "user", "content": "Fix the bug in parser.py"}


def test_fingerprint_is_stable_as_the_session_grows() -> None:
    fp = session_fingerprint([_SYS, _U1])
    longer = [
        _SYS,
        _U1,
        {"role": "assistant", "content": "ok"},
        {"role": "system", "content": "<system-reminder>mid-history</system-reminder>"},
        {"role": "user", "content": "next"},
    ]
    assert session_fingerprint(longer) == fp
    assert len(fp) == 64


def test_fingerprint_separates_sessions() -> None:
    fp = session_fingerprint([_SYS, _U1])
    assert session_fingerprint([_SYS, {"role": "user", "content": "other task"}]) != fp
    assert session_fingerprint([{"role": "system", "content": "other"}, _U1]) != fp
    assert session_fingerprint([_U1]) != fp
    # A system message cannot pose as a user message (roles are part of the hash).
    assert session_fingerprint([{"role": "user", "content": _SYS["content"]}]) != (
        session_fingerprint([_SYS])
    )


def test_fingerprint_ignores_cache_markers_and_key_order() -> None:
    plain = {"role": "user", "content": [{"type": "text", "text": "task"}]}
    marked = {
        "content": [{"text": "task", "type": "text", "cache_control": {"type": "ephemeral"}}],
        "role": "user",
    }
    assert session_fingerprint([_SYS, plain]) == session_fingerprint([_SYS, marked])


def test_client_key_hash_hides_the_key() -> None:
    h = hash_client_key("sk-secret-123")
    assert "sk-secret-123" not in h
    assert h == hash_client_key("sk-secret-123")
    assert h != hash_client_key("sk-secret-124")
    assert len(h) == 64
