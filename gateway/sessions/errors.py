"""What a session store raises when it is unavailable, for ``except`` clauses.

Redis is imported only when a Redis URL is configured (the client library costs about 9 MB
of memory per worker): until it is, no Redis error can be raised, so none is listed.
"""

from __future__ import annotations

import sqlite3
import sys

_ALWAYS: tuple[type[Exception], ...] = (OSError, sqlite3.Error)


class StoreUnavailable(ConnectionError):
    """The session store is known to be down: raised at once instead of waiting for it
    (an ``OSError``, so ``store_errors()`` catches it)."""

    def __init__(self, message: str = "the session store is unavailable",
                 retry_after: float = 1.0) -> None:
        super().__init__(message)
        self.retry_after = retry_after


def store_errors() -> tuple[type[Exception], ...]:
    """The exception types of an unavailable store (for ``except store_errors():``)."""
    redis_errors = sys.modules.get("redis.exceptions")
    if redis_errors is None:
        return _ALWAYS
    return (*_ALWAYS, redis_errors.RedisError)
