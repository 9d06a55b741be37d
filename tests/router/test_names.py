"""NameResolver: exact groups, aliases, and the most specific wildcard entry (pure)."""

from __future__ import annotations

from gateway.router.names import NameResolver, Resolved, Wildcard

RESOLVER = NameResolver(
    {"gpt-4o", "claude-sonnet"},
    {"gpt-4": "gpt-4o", "loop": "loop", "chain": "gpt-4"},
    [Wildcard("*", "*", 3), Wildcard("openai/*", "openai/*", 1),
     Wildcard("team-*", "hosted_vllm/team/*", 2)],
)


def test_exact_groups_and_aliases() -> None:
    assert RESOLVER.resolve("gpt-4o") == Resolved("gpt-4o")
    assert RESOLVER.resolve("gpt-4") == Resolved("gpt-4o", alias_of="gpt-4o")
    chained = RESOLVER.resolve("chain")
    assert chained is not None and chained.group == "gpt-4o"


def test_the_most_specific_wildcard_wins_and_takes_the_matched_part() -> None:
    found = RESOLVER.resolve("openai/gpt-4.1-mini")
    assert found is not None and found.wildcard is not None
    assert found.wildcard.pattern == "openai/*" and found.upstream == "openai/gpt-4.1-mini"
    team = RESOLVER.resolve("team-llama")
    assert team is not None and team.upstream == "hosted_vllm/team/llama"
    anything = RESOLVER.resolve("anthropic/claude-3-haiku")
    assert anything is not None and anything.wildcard is not None
    assert anything.wildcard.pattern == "*" and anything.upstream == "anthropic/claude-3-haiku"


def test_no_match_without_a_catch_all() -> None:
    narrow = NameResolver({"a"}, {}, [Wildcard("openai/*", "openai/*", 0)])
    assert narrow.resolve("mistral-large") is None
    assert narrow.resolve("openai/") is None  # the star must match something
    assert narrow.resolve("openai/x y") is None  # whitespace is never a model name
    assert narrow.resolve("a") == Resolved("a")
