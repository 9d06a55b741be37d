"""Fallback model groups as ladder rungs: which group to try when a group's recovery is spent.

Pure data and decisions, no I/O. LiteLLM's three chains: ``context_window_fallbacks`` for a
context overflow, ``content_policy_fallbacks`` for a content-policy refusal, ``fallbacks``
for everything else that another group might serve (rate limits and outages that retries did
not cure, auth or not-found refusals of one provider). A specific chain falls back to the
general one when the group has none; ``*`` in a chain's key (or ``default_fallbacks``)
applies to every group. A bad request (a 400 that is the request's own fault) never falls
back: every group would refuse it the same way.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Literal

from gateway.providers.failure import UpstreamFailure
from gateway.recovery.classifier import Verdict

FallbackKind = Literal["general", "context_window", "content_policy"]

_CONTENT_POLICY_CODES = frozenset({"content_policy_violation", "content_filter",
                                   "responsibleaipolicyviolation"})
_CONTENT_POLICY_TEXT = re.compile(
    r"content (?:management )?policy|content[_ ]filter|safety (?:system|filter)|"
    r"responsible ?ai", re.I)
# Fatal statuses another provider may well answer (auth, billing, not found, gone, quota).
_GENERAL_FATAL = frozenset({401, 402, 403, 404, 410, 429})


NO_TAGGED_DEPLOYMENT = "no_deployments_with_tag_routing"


def failure_kind(failure: UpstreamFailure, verdict: Verdict) -> FallbackKind | None:
    """Which chain a failure falls back through (None: it must not fall back)."""
    if verdict is Verdict.OVERFLOW:
        return "context_window"
    code = (failure.code or failure.type or "").lower()
    if code in _CONTENT_POLICY_CODES or _CONTENT_POLICY_TEXT.search(failure.message or ""):
        return "content_policy"
    if verdict is Verdict.TRANSIENT or code == NO_TAGGED_DEPLOYMENT:
        # (a group the request's routing tags leave empty: its fallbacks may serve them)
        return "general"
    if verdict is Verdict.FATAL and (failure.status in _GENERAL_FATAL or failure.status >= 500):
        return "general"
    return None


@dataclass(frozen=True, slots=True)
class FallbackChains:
    """The configured chains, by source group; ``windows`` holds each group's context window
    (a context-window fallback only goes to a group with a larger one)."""

    general: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    context_window: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    content_policy: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    default: tuple[str, ...] = ()
    max_fallbacks: int = 5
    windows: Mapping[str, int] = field(default_factory=dict)
    # A request's own ``fallbacks`` (its group, its chain): beside ``general``, not merged
    # into it, so that a lookup ``general`` makes by another name (LiteLLM's bare model
    # names) still serves the nested steps.
    requested: tuple[str, tuple[str, ...]] | None = None

    @classmethod
    def build(
        cls,
        general: tuple[tuple[str, tuple[str, ...]], ...] = (),
        context_window: tuple[tuple[str, tuple[str, ...]], ...] = (),
        content_policy: tuple[tuple[str, tuple[str, ...]], ...] = (),
        **kwargs: object,
    ) -> FallbackChains:
        """From LiteLLM's list-of-mappings form (later entries extend earlier ones)."""
        def merged(pairs: tuple[tuple[str, tuple[str, ...]], ...]) -> dict[str, tuple[str, ...]]:
            out: dict[str, tuple[str, ...]] = {}
            for source, targets in pairs:
                out[source] = out.get(source, ()) + tuple(targets)
            return out

        return cls(merged(general), merged(context_window), merged(content_policy),
                   **kwargs)  # type: ignore[arg-type]

    def with_request(self, group: str, targets: tuple[str, ...]) -> FallbackChains:
        """The chains with a request's own ``fallbacks`` replacing the group's general chain."""
        return replace(self, requested=(group, targets))

    def chain(self, group: str, kind: FallbackKind) -> tuple[str, ...]:
        """The groups to try after ``group`` fails this way, in order.

        As LiteLLM, a fallback group that fails goes on to its own fallbacks before the
        next one of the list: ``gpt-4o: [claude, llama]`` with ``claude: [bedrock]`` tries
        claude, bedrock, llama (each once, ``max_fallbacks`` deep). The nested steps follow
        chains written for that group (not ``*`` or ``default_fallbacks``)."""
        out: list[str] = []
        self._walk(self._direct(group, kind), kind, group, out, 1)
        return tuple(out)

    def _walk(self, targets: tuple[str, ...], kind: FallbackKind, origin: str,
              out: list[str], depth: int) -> None:
        for target in targets:
            if target == origin or target in out:
                continue
            out.append(target)
            if depth < self.max_fallbacks:
                self._walk(self._own(target, kind), kind, origin, out, depth + 1)

    def _own(self, group: str, kind: FallbackKind) -> tuple[str, ...]:
        """The chains written for ``group`` itself (a nested step of a walk)."""
        specific: tuple[str, ...] = ()
        if kind == "context_window":
            specific = self._larger(group, self.context_window.get(group, ()))
        elif kind == "content_policy":
            specific = self.content_policy.get(group, ())
        if specific:
            return specific
        general = self._general(group) or ()
        return self._larger(group, general) if kind == "context_window" else general

    def _direct(self, group: str, kind: FallbackKind) -> tuple[str, ...]:
        if kind == "context_window":
            specific = self.context_window.get(group) or self.context_window.get("*")
            if specific:
                return self._larger(group, specific)
        elif kind == "content_policy":
            specific = self.content_policy.get(group) or self.content_policy.get("*")
            if specific:
                return specific
        found = self._general(group)  # (a request's own empty list disables fallbacks)
        general = found if found is not None else self.general.get("*") or self.default
        return self._larger(group, general) if kind == "context_window" else general

    def _general(self, group: str) -> tuple[str, ...] | None:
        """The general chain written for ``group`` (the request's own, when it sent one)."""
        if self.requested is not None and self.requested[0] == group:
            return self.requested[1]
        return self.general.get(group)

    def _larger(self, group: str, targets: tuple[str, ...]) -> tuple[str, ...]:
        own = self.windows.get(group)
        if own is None:
            return targets
        return tuple(t for t in targets if self.windows.get(t, own + 1) > own)

    def __bool__(self) -> bool:
        return bool(self.general or self.requested or self.context_window
                    or self.content_policy or self.default)

