"""What would raise a session's prompt-cache hit rate (issue 26), read from the inspector's
entries of the session: its turns' prefix stability and the providers' cache usage.

Advice only: the gateway never reorders a client's prompt.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

SNIPPET = 80


@dataclass(slots=True)
class SessionAdvice:
    """A session's prefix stability and cache figures, and the advice they lead to."""

    turns: int = 0
    causes: dict[str, int] = field(default_factory=dict)
    lost_tokens: int = 0
    hit_ratio: float | None = None  # cache reads / prompt tokens over the session
    advice: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        """JSON view (inspector, ``gateway cache-advice --json``)."""
        return {"turns": self.turns, "causes": self.causes, "lost_tokens": self.lost_tokens,
                "hit_ratio": self.hit_ratio, "advice": self.advice}


def _first_change(before: str | None, after: str | None) -> str:
    """Where two captured versions first differ, as a short quote (empty when unknown)."""
    if before is None or after is None:
        return ""
    at = next((i for i, (a, b) in enumerate(zip(before, after, strict=False)) if a != b),
              min(len(before), len(after)))
    start = before.rfind("\n", 0, at) + 1
    line = before[start:start + SNIPPET].split("\n", 1)[0]
    return f" It first differs at character {at} of {len(before)}, in: {line!r}."


def advise(entries: Sequence[dict[str, Any]]) -> SessionAdvice:
    """The advice for one session's inspector entries (oldest first)."""
    out = SessionAdvice()
    prefixes = [e["prefix"] for e in entries if e.get("prefix")]
    out.turns = len(prefixes)
    out.causes = dict(Counter(p["cause"] for p in prefixes))
    out.lost_tokens = sum(p.get("lost_tokens") or 0 for p in prefixes)
    ratios = [e["cache_hit_ratio"] for e in entries if e.get("cache_hit_ratio") is not None]
    if ratios:  # the mean of the turns' ratios
        out.hit_ratio = round(sum(ratios) / len(ratios), 4)
    later = max(out.turns - 1, 0)
    for cause, what in (("system", "the system prompt"), ("tools", "the tool schemas")):
        breaks = [p for p in prefixes if p["cause"] == cause]
        if not breaks:
            continue
        lost = sum(p.get("lost_tokens") or 0 for p in breaks)
        tip = (f"{what.capitalize()} changed on {len(breaks)} of {later} later turns, putting "
               f"about {lost} tokens out of the cacheable prefix.")
        if cause == "system":
            tip += (" Move the part that changes (a progress note, a date, a counter) to the "
                    "end of the prompt, after the stable instructions, or into the new user "
                    "message.")
        else:
            tip += (" Send the same tools, in the same order and with the same descriptions, "
                    "on every turn; add or drop tools at the end of the list if you must.")
        out.advice.append(tip + _first_change(breaks[-1].get("before"),
                                              breaks[-1].get("after")))
    edited = [p for p in prefixes if p["cause"] == "message"]
    if edited:
        where = Counter(f"message {p['index']} ({p.get('field') or 'removed'})"
                        for p in edited).most_common(3)
        out.advice.append(
            f"Earlier messages were rewritten on {len(edited)} turns "
            f"({', '.join(w for w, _ in where)}): send the history as it was and only append "
            "to it." + _first_change(edited[-1].get("before"), edited[-1].get("after")))
    if out.causes.get("gateway"):
        out.advice.append(f"The gateway changed an earlier turn on {out.causes['gateway']} "
                          "turns (a repair or a compaction): that is the gateway's doing, "
                          "please report it.")
    if not out.advice and out.turns > 1:
        out.advice.append("Every turn kept the previous prompt as its prefix: nothing to "
                          "move." + ("" if out.hit_ratio is None or out.hit_ratio >= 0.5 else
                                     f" The hit ratio is still {out.hit_ratio:.0%}: the "
                                     "provider may need cache breakpoints or a longer "
                                     "prompt to cache."))
    return out
