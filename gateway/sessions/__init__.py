"""Session storage: compaction records, owners, locks and the message archive.

``open_store(data_dir, redis_url)`` picks the backend: Redis when a URL is given
(replicas share everything), else SQLite at ``data_dir/sessions.sqlite3`` with a JSONL
archive under ``data_dir/archive/``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gateway.sessions.archive import MAX_READ_LINES, Archive, JsonlArchive
from gateway.sessions.hashing import (
    canonical,
    extend_chain,
    hash_client_key,
    prefix_chain,
    session_fingerprint,
)
from gateway.sessions.records import (
    KIND_BACKGROUND,
    KIND_REDUCED,
    KIND_SUMMARIZED,
    KIND_TRIMMED,
    CompactionRecord,
    decode_record,
    encode_record,
)
from gateway.sessions.sqlite_store import SQLiteSessionStore
from gateway.sessions.store import SessionStore, best_prefix

__all__ = [
    "KIND_BACKGROUND",
    "KIND_REDUCED",
    "KIND_SUMMARIZED",
    "KIND_TRIMMED",
    "MAX_READ_LINES",
    "SQLITE_FILE_NAME",
    "Archive",
    "CompactionRecord",
    "JsonlArchive",
    "SQLiteSessionStore",
    "SessionStore",
    "best_prefix",
    "canonical",
    "decode_record",
    "encode_record",
    "extend_chain",
    "hash_client_key",
    "open_store",
    "prefix_chain",
    "session_fingerprint",
]

SQLITE_FILE_NAME = "sessions.sqlite3"


def open_store(data_dir: str | Path, redis_url: str | None) -> tuple[SessionStore, Archive]:
    """Return ``(store, archive)``: Redis-backed if ``redis_url``, else SQLite + JSONL.

    Nothing is opened yet (connections and files are made on first use), so this is
    safe to call outside an event loop. Close both with ``await x.close()``.
    """
    if redis_url:
        from gateway.sessions.redis_archive import RedisArchive
        from gateway.sessions.redis_store import RedisSessionStore

        return RedisSessionStore(redis_url), RedisArchive(redis_url)
    root = Path(data_dir)
    return SQLiteSessionStore(root / SQLITE_FILE_NAME), JsonlArchive(root)


def __getattr__(name: str) -> Any:
    """The Redis backends, imported on first use (the client library is large)."""
    if name == "RedisSessionStore":
        from gateway.sessions.redis_store import RedisSessionStore

        return RedisSessionStore
    if name == "RedisArchive":
        from gateway.sessions.redis_archive import RedisArchive

        return RedisArchive
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
