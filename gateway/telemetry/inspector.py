"""The inspector's memory of recent requests: a bounded ring in this process and, shared by
every worker of ``--workers N``, a small SQLite file beside the session store.

Writes never block a request: finished records are queued and written by a background task
in batches off the event loop; the file keeps only the most recent ``size`` requests.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sqlite3
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import orjson

from gateway.redact import redact_bytes
from gateway.telemetry.record import RequestRecord

T = TypeVar("T")

log = logging.getLogger("gateway.inspector")

FILE_NAME = "inspector.sqlite3"
_SCHEMA = """
CREATE TABLE IF NOT EXISTS requests (
  request_id TEXT PRIMARY KEY, time REAL NOT NULL, model TEXT, status INTEGER,
  kinds TEXT, session_id TEXT, detail BLOB NOT NULL
);
CREATE INDEX IF NOT EXISTS requests_time ON requests(time);
CREATE INDEX IF NOT EXISTS requests_session ON requests(session_id);
"""


def _matches(entry: dict[str, Any], model: str, status: str, kind: str,
             owner: str = "") -> bool:
    """The list filters: exact model, status (``503`` or a class like ``5xx``), repair kind
    (made or, under the report policy, that would have been made), owner name."""
    if model and entry.get("model") != model:
        return False
    if owner and entry.get("owner_name") != owner:
        return False
    if status:
        code = str(entry.get("status", ""))
        if status.endswith("xx") and len(status) == 3:
            if not code.startswith(status[0]):
                return False
        elif code != status:
            return False
    return (not kind or kind in (entry.get("repairs") or {})
            or kind in (entry.get("would_repair") or {}))


def _redacted(entry: dict[str, Any]) -> dict[str, Any]:
    """``entry`` with every configured secret masked, wherever in it (the pages and the
    shared file never hold one)."""
    raw = orjson.dumps(entry)
    clean = redact_bytes(raw)
    if clean is raw:
        return entry
    found: dict[str, Any] = orjson.loads(clean)
    return found


class Inspector:
    """Recent requests for ``/ui``: add finished records, list and look them up."""

    def __init__(self, size: int, data_dir: str | None) -> None:
        self.size = size
        self._ring: deque[dict[str, Any]] = deque(maxlen=size)
        self._by_id: dict[str, dict[str, Any]] = {}
        self._path = Path(data_dir) / FILE_NAME if data_dir else None
        self._queue: list[dict[str, Any]] = []
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._conn: sqlite3.Connection | None = None
        self._lock = asyncio.Lock()
        # Every use of the connection runs on this one thread, in order: a write a cancelled
        # task left running is finished before the connection closes (closing it under a
        # running statement crashes the process).
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="inspector")

    async def _on_thread(self, fn: Callable[..., T], *args: Any) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._thread, fn, *args)

    async def start(self) -> None:
        """Start the background writer (when a shared file is used)."""
        if self._path is not None:
            try:
                await self._on_thread(self._open)
            except (OSError, sqlite3.Error) as err:
                log.warning("inspector: cannot use %s (%s); keeping recent requests of this "
                            "process only", self._path, err)
                self._path = None
                return
            self._task = asyncio.create_task(self._writer())

    def _open(self) -> None:
        assert self._path is not None
        self._path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)  # owner only
        self._path.touch(mode=0o600, exist_ok=True)  # captured conversations: owner only
        conn = sqlite3.connect(self._path, check_same_thread=False, timeout=5.0)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.executescript(_SCHEMA)
        self._conn = conn

    async def close(self) -> None:
        """Write what is queued and stop."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            await self.flush()
        if self._conn is not None:
            await self._on_thread(self._conn.close)
            self._conn = None
        self._thread.shutdown(wait=False)

    def add(self, rec: RequestRecord) -> None:
        """Remember a finished model request (cheap: the file is written later)."""
        entry = _redacted(rec.detail())
        if len(self._ring) == self._ring.maxlen:
            old = self._ring[0]
            self._by_id.pop(old["request_id"], None)
        self._ring.append(entry)
        self._by_id[rec.request_id] = entry
        if self._path is not None:
            self._queue.append(entry)
            if len(self._queue) > self.size:  # (a file slower than the traffic: the file
                del self._queue[0]  # keeps the last ``size`` anyway)
            self._wake.set()

    async def _writer(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            try:
                await self.flush()
            except sqlite3.Error as err:
                log.warning("inspector: could not write recent requests: %s", err)

    async def flush(self) -> None:
        """Write the queued records to the shared file."""
        if not self._queue or self._conn is None:
            return
        batch, self._queue = self._queue, []
        async with self._lock:
            await self._on_thread(self._write, batch)

    def _write(self, batch: list[dict[str, Any]]) -> None:
        conn = self._conn
        assert conn is not None
        rows = [(e["request_id"], e["time"], e["model"], e["status"],
                 ",".join(e.get("repairs") or {}), e.get("session_id"), orjson.dumps(e))
                for e in batch]
        with conn:
            conn.executemany("INSERT OR REPLACE INTO requests VALUES (?,?,?,?,?,?,?)", rows)
            conn.execute("DELETE FROM requests WHERE request_id IN (SELECT request_id FROM "
                         "requests ORDER BY time DESC LIMIT -1 OFFSET ?)", (self.size,))

    async def recent(self, *, model: str = "", status: str = "", kind: str = "",
                     session: str = "", owners: Sequence[str] | None = None,
                     owner: str = "", limit: int = 200) -> list[dict[str, Any]]:
        """Most recent first, filtered; summaries only (no bodies). With ``owners``, only
        the requests made by keys of those owners; ``owner`` filters by owner name."""
        entries = await self._entries(session)
        out = []
        for e in entries:
            if owners is not None and e.get("owner") not in owners:
                continue
            if _matches(e, model, status, kind, owner):
                summary = {k: v for k, v in e.items()
                           if k not in ("client_messages", "upstream_messages")}
                out.append(summary)
                if len(out) >= limit:
                    break
        return out

    async def get(self, request_id: str, owners: Sequence[str] | None = None,
                  ) -> dict[str, Any] | None:
        """One request's detail (None when unknown, or another client key's)."""
        found = self._by_id.get(request_id)
        if found is None and self._conn is not None:
            await self.flush()
            async with self._lock:
                row = await self._on_thread(self._select_one, request_id)
            found = orjson.loads(row) if row else None
        if found is not None and owners is not None and found.get("owner") not in owners:
            return None
        return found

    async def _entries(self, session: str) -> list[dict[str, Any]]:
        if self._conn is None:
            ring = list(reversed(self._ring))
            return [e for e in ring if e.get("session_id") == session] if session else ring
        await self.flush()
        async with self._lock:
            rows = await self._on_thread(self._select, session)
        return [orjson.loads(r) for r in rows]

    def _select(self, session: str) -> list[bytes]:
        assert self._conn is not None
        if session:
            cur = self._conn.execute("SELECT detail FROM requests WHERE session_id = ? "
                                     "ORDER BY time DESC", (session,))
        else:
            cur = self._conn.execute("SELECT detail FROM requests ORDER BY time DESC LIMIT ?",
                                     (self.size,))
        return [r[0] for r in cur.fetchall()]

    def _select_one(self, request_id: str) -> bytes | None:
        assert self._conn is not None
        row = self._conn.execute("SELECT detail FROM requests WHERE request_id = ?",
                                 (request_id,)).fetchone()
        return row[0] if row else None
