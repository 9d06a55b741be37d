"""Retention: purge what the gateway stored about a session (compaction records, owner,
parked background result, archive), by session id or by age, in SQLite and Redis alike; and,
by age, the Responses answers it kept (``gateway.sessions.responses_state``).

A session's age is the time of its last write (its last compaction or archive append). The
server sweeps every hour with ``sessions.retention_days``; ``gateway purge`` does the same on
demand, or removes one session id (under every owner) at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from gateway.config import GatewayConfig
from gateway.sessions import (
    SQLITE_FILE_NAME,
    JsonlArchive,
    SQLiteSessionStore,
)
from gateway.sessions.errors import store_errors

log = logging.getLogger("gateway.retention")

SWEEP_INTERVAL = 3600.0
DAY = 86400.0
_OWNER_ID = re.compile(r"[0-9a-f]{32}")


class PurgeableStore(Protocol):
    """What a session store offers for retention (both backends implement it)."""

    async def last_writes(self) -> dict[str, float]:
        """Every stored session (store key) and the time of its last write."""
        ...

    async def delete_session(self, session_id: str) -> bool:
        """Remove everything stored for the session; True if anything was."""
        ...

    async def close(self) -> None:
        """Release connections."""
        ...


class PurgeableArchive(Protocol):
    """What an archive offers for retention."""

    async def delete(self, session_id: str) -> bool:
        """Remove the session's archive; True if there was one."""
        ...

    async def last_write(self, session_id: str) -> float | None:
        """When the archive was last appended to, if the backend knows."""
        ...

    async def close(self) -> None:
        """Release connections."""
        ...


@dataclass
class PurgeReport:
    """What a purge removed: store keys of sessions, and archive files without records."""

    sessions: list[str] = field(default_factory=list)
    orphan_archives: int = 0
    responses: int = 0  # kept Responses answers

    def __str__(self) -> str:
        text = f"purged {len(self.sessions)} session(s)"
        if self.orphan_archives:
            text += f" and {self.orphan_archives} archive file(s) without records"
        if self.responses:
            text += f" and {self.responses} kept response(s)"
        return text


def belongs_to(store_key: str, session_id: str) -> bool:
    """True when ``store_key`` holds the client-visible ``session_id`` (under any owner:
    keys are ``owner.session_id`` with a 32-hex owner id, or the bare id without auth)."""
    if store_key == session_id:
        return True
    owner, dot, rest = store_key[:32], store_key[32:33], store_key[33:]
    return dot == "." and rest == session_id and _OWNER_ID.fullmatch(owner) is not None


async def purge_session(store: PurgeableStore, archive: PurgeableArchive,
                        session_id: str) -> PurgeReport:
    """Remove every stored trace of ``session_id``, under every owner."""
    keys = [k for k in await store.last_writes() if belongs_to(k, session_id)]
    if session_id not in keys:
        keys.append(session_id)  # an archive of an unauthenticated session without records
    report = PurgeReport()
    for key in keys:
        stored = await store.delete_session(key)
        archived = await archive.delete(key)
        if stored or archived:
            report.sessions.append(key)
    return report


async def purge_older_than(store: PurgeableStore, archive: PurgeableArchive,
                           cutoff: float) -> PurgeReport:
    """Remove the sessions last written before ``cutoff`` (wall-clock seconds), and archive
    files of that age that no stored session refers to."""
    writes = await store.last_writes()
    report = PurgeReport()
    for key, when in writes.items():
        if when >= cutoff:
            continue
        appended = await archive.last_write(key)
        if appended is not None and appended >= cutoff:
            continue
        await store.delete_session(key)
        await archive.delete(key)
        report.sessions.append(key)
    if isinstance(archive, JsonlArchive):
        purged = set(report.sessions)
        live = {archive.path_for(k).name for k in writes if k not in purged}
        for path in await archive.files_before(cutoff):
            if path.name not in live:
                with contextlib.suppress(FileNotFoundError):
                    await asyncio.to_thread(path.unlink)
                    report.orphan_archives += 1
    return report


async def purge_old_responses(config: GatewayConfig, cutoff: float) -> int:
    """Remove the Responses answers kept before ``cutoff`` (wall-clock seconds); how many."""
    from gateway.sessions.responses_state import open_response_store

    store = open_response_store(config.sessions.data_dir, config.sessions.redis_url)
    try:
        return await store.purge_responses(cutoff)
    finally:
        await store.close()


def has_data(config: GatewayConfig) -> bool:
    """False when a SQLite data dir holds nothing yet (a purge must not create it)."""
    if config.sessions.redis_url:
        return True
    root = Path(config.sessions.data_dir)
    return (root / SQLITE_FILE_NAME).exists() or (root / "archive").is_dir()


def open_purgeable(config: GatewayConfig) -> tuple[PurgeableStore, PurgeableArchive]:
    """The configured store and archive (as ``open_store`` picks them), for purging."""
    url = config.sessions.redis_url
    if url:
        from gateway.sessions.redis_archive import RedisArchive
        from gateway.sessions.redis_store import RedisSessionStore

        return RedisSessionStore(url), RedisArchive(url)
    root = Path(config.sessions.data_dir)
    return SQLiteSessionStore(root / SQLITE_FILE_NAME), JsonlArchive(root)


class Sweeper:
    """The server's hourly retention sweep (its own store connection)."""

    def __init__(self, config: GatewayConfig, days: float) -> None:
        self._config = config
        self._days = days
        self._task = asyncio.create_task(self._loop(), name="gateway-retention")

    async def _loop(self) -> None:
        while True:
            try:
                await self.sweep()
            except Exception:  # the sweep must never take the gateway down
                log.exception("retention sweep failed")
            await asyncio.sleep(SWEEP_INTERVAL)

    async def sweep(self) -> PurgeReport | None:
        """One pass: purge sessions older than the retention (never raises)."""
        if not has_data(self._config):
            return None
        store, archive = open_purgeable(self._config)
        cutoff = time.time() - self._days * DAY
        try:
            report = await purge_older_than(store, archive, cutoff)
            report.responses = await purge_old_responses(self._config, cutoff)
        except store_errors() as err:
            log.warning("retention sweep skipped: the session store is unavailable (%s)",
                        err.__class__.__name__)
            return None
        finally:
            await store.close()
            await archive.close()
        if report.sessions or report.orphan_archives or report.responses:
            log.info("retention (%g days): %s", self._days, report)
        return report

    async def close(self) -> None:
        """Stop sweeping."""
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task


def start_retention(config: GatewayConfig) -> Sweeper | None:
    """Start the hourly sweep when ``sessions.retention_days`` is set (inside a running
    loop)."""
    days = config.sessions.retention_days
    return None if days is None else Sweeper(config, days)
