"""``gateway report``: which owners send histories that need repair, and what kind.

Read from the inspector's shared store (``<sessions.data_dir>/inspector.sqlite3``, kept
when ``gateway.ui`` is on: the most recent ``gateway.ui_history`` requests), per owner and
model over a time range: requests, the share that needed repair (repaired, reported under
the ``report`` policy, or rejected), the top repair kinds with one example request id each,
rejections, invisible characters and the recovery steps taken.
"""

from __future__ import annotations

import sqlite3
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from gateway.telemetry.inspector import FILE_NAME


@dataclass(slots=True)
class OwnerRow:
    """One owner and model's requests over the range."""

    owner: str
    model: str
    requests: int = 0
    needed_repair: int = 0
    rejected: int = 0
    invisible: int = 0  # requests holding invisible characters
    kinds: Counter[str] = field(default_factory=Counter)
    examples: dict[str, str] = field(default_factory=dict)  # kind -> a request id
    steps: Counter[str] = field(default_factory=Counter)

    def as_dict(self, top: int = 3) -> dict[str, Any]:
        """The JSON shape (``--json``)."""
        return {"owner": self.owner, "model": self.model, "requests": self.requests,
                "needed_repair": self.needed_repair,
                "share": round(self.needed_repair / self.requests, 4) if self.requests else 0,
                "rejected": self.rejected, "invisible": self.invisible,
                "top_kinds": [{"kind": k, "count": n, "example": self.examples[k]}
                              for k, n in self.kinds.most_common(top)],
                "recovery": dict(self.steps)}


def summarize(entries: list[dict[str, Any]]) -> list[OwnerRow]:
    """Rows per (owner, model) of inspector entries, busiest first."""
    rows: dict[tuple[str, str], OwnerRow] = {}
    for e in entries:
        if e.get("owner") and not e.get("owner_name"):
            continue  # refused before an owner was resolved (an unknown model): as /metrics
        key = (str(e.get("owner_name") or "anonymous"), str(e.get("model") or ""))
        row = rows.get(key) or rows.setdefault(key, OwnerRow(*key))
        row.requests += 1
        kinds = {**(e.get("would_repair") or {}), **(e.get("repairs") or {})}
        rules = [str(v.get("rule")) for v in e.get("violations") or ()]
        if kinds or rules:
            row.needed_repair += 1
        if rules:
            row.rejected += 1
        if e.get("invisible"):
            row.invisible += 1
        for kind, n in kinds.items():
            row.kinds[kind] += int(n)
            row.examples.setdefault(kind, str(e.get("request_id")))
        for rule in rules:
            row.kinds[rule] += 1
            row.examples.setdefault(rule, str(e.get("request_id")))
        for step in filter(None, str(e.get("recovery") or "").split(",")):
            row.steps[step] += 1
    return sorted(rows.values(), key=lambda r: (-r.requests, r.owner, r.model))


def table(rows: list[OwnerRow], top: int = 3) -> str:
    """The rows as a Markdown table."""
    lines = ["| owner | model | requests | needed repair | rejected | invisible | "
             "top repair kinds (example request) | recovery |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        share = f"{r.needed_repair} ({100 * r.needed_repair / r.requests:.0f}%)"
        kinds = ", ".join(f"{k}×{n} ({r.examples[k]})" for k, n in r.kinds.most_common(top))
        steps = ", ".join(f"{s}×{n}" for s, n in r.steps.most_common())
        lines.append(f"| {r.owner} | {r.model} | {r.requests} | {share} | {r.rejected} | "
                     f"{r.invisible} | {kinds or '—'} | {steps or '—'} |")
    return "\n".join(lines)


def read_entries(data_dir: str, since: float, until: float) -> list[dict[str, Any]]:
    """The inspector's entries with ``since <= time < until`` (wall-clock seconds).
    Raises FileNotFoundError when there is no inspector store."""
    path = Path(data_dir) / FILE_NAME
    if not path.is_file():
        raise FileNotFoundError(path)
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5.0)
    try:
        rows = conn.execute("SELECT detail FROM requests WHERE time >= ? AND time < ? "
                            "ORDER BY time", (since, until)).fetchall()
    finally:
        conn.close()
    return [orjson.loads(r[0]) for r in rows]
