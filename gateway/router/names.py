"""From the model name a client sends to a model group: aliases and wildcard entries.

Pure: no I/O. A model group is every ``model_list`` entry with the same ``model_name``.
``router_settings.model_group_alias`` maps more names onto a group. A ``model_name`` holding
``*`` (``openai/*``, ``anthropic/*``, ``*``) is a wildcard entry: any name it matches is
served by that entry, its ``litellm_params.model`` taking the matched part in place of its
own ``*`` (``model: "*"`` forwards the name as it is).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from functools import lru_cache

MAX_MODEL_NAME = 256


@lru_cache(maxsize=64)
def _compiled(pattern: str) -> re.Pattern[str]:
    return re.compile("(.+)".join(re.escape(part) for part in pattern.split("*")), re.S)


@dataclass(frozen=True, slots=True)
class Wildcard:
    """One wildcard ``model_list`` entry."""

    pattern: str  # the entry's model_name, e.g. "openai/*"
    model: str  # its litellm_params.model, e.g. "openai/*"
    index: int  # position in model_list

    def match(self, name: str) -> str | None:
        """The part of ``name`` matched by the first ``*`` (None when it does not match)."""
        found = _compiled(self.pattern).fullmatch(name)
        return None if found is None else found.group(1)

    def upstream_model(self, name: str, matched: str) -> str:
        """The litellm model string serving ``name``."""
        if self.model == "*":
            return name
        return self.model.replace("*", matched, 1) if "*" in self.model else self.model

    @property
    def specificity(self) -> int:
        """Longer literal parts match first (``openai/*`` before ``*``)."""
        return len(self.pattern.replace("*", ""))


@dataclass(frozen=True, slots=True)
class Resolved:
    """What a requested name resolves to."""

    group: str  # the model group (or, for a wildcard, the requested name itself)
    wildcard: Wildcard | None = None
    upstream: str | None = None  # the litellm model of a wildcard match
    alias_of: str | None = None


class NameResolver:
    """Resolves requested model names: alias (before the groups, as LiteLLM's Router does: an
    alias named like a group redirects it), exact group, then the most specific wildcard."""

    def __init__(
        self,
        groups: set[str],
        aliases: dict[str, str] | None = None,
        wildcards: list[Wildcard] | None = None,
    ) -> None:
        self.groups = {g for g in groups if "*" not in g}
        self.aliases = dict(aliases or {})
        self.wildcards = sorted(wildcards or [], key=lambda w: (-w.specificity, w.index))

    def resolve(self, name: str) -> Resolved | None:
        """The group serving ``name``, or None when nothing does."""
        target, seen = name, {name}
        while target in self.aliases and self.aliases[target] not in seen:
            target = self.aliases[target]  # (an alias of an alias; a cycle stops)
            seen.add(target)
        inner = self._direct(target) if target != name else None
        if inner is not None:
            return Resolved(inner.group, inner.wildcard, inner.upstream, alias_of=target)
        return self._direct(name)

    def _direct(self, name: str) -> Resolved | None:
        if name in self.groups:
            return Resolved(name)
        if len(name) > MAX_MODEL_NAME or any(ch.isspace() for ch in name):
            return None
        for wildcard in self.wildcards:
            matched = wildcard.match(name)
            if matched is not None and matched:
                return Resolved(name, wildcard, wildcard.upstream_model(name, matched))
        return None


class PrefixedChains(Mapping[str, tuple[str, ...]]):
    """Fallback chains by source group, looked up as LiteLLM does: the group's own chain,
    else the one written for its name without the provider prefix (``gpt-4o: [claude]``
    serves ``openai/gpt-4o``, a name an ``openai/*`` wildcard entry serves)."""

    def __init__(self, chains: Mapping[str, tuple[str, ...]]) -> None:
        self._chains = dict(chains)

    def __getitem__(self, group: str) -> tuple[str, ...]:
        found = self._chains.get(group)
        if found is not None:
            return found
        _prefix, slash, bare = group.partition("/")
        if slash and bare != "*" and bare in self._chains:
            return self._chains[bare]
        raise KeyError(group)

    def __iter__(self) -> Iterator[str]:
        return iter(self._chains)

    def __len__(self) -> int:
        return len(self._chains)
