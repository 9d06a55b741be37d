"""Multiprocess metrics for ``gateway serve --workers N``.

The supervisor calls :func:`prepare` before it starts the workers: the directory named by
``PROMETHEUS_MULTIPROC_DIR`` (or a fresh one under the system temp dir) is emptied, so a
restart never adds the previous run's counts, and the variable is exported to the workers.
When a worker exits, :func:`worker_exited` drops its live gauges (in-flight requests, open
streams, deployment state) so they do not linger in the sum.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

ENV = "PROMETHEUS_MULTIPROC_DIR"


def prepare(workers: int) -> str | None:
    """Set up the shared metrics directory for ``workers`` processes (None for one)."""
    if workers <= 1 and not os.environ.get(ENV):
        return None
    path = os.environ.get(ENV) or tempfile.mkdtemp(prefix="gateway-metrics-")
    root = Path(path)
    root.mkdir(parents=True, exist_ok=True)
    for stale in root.glob("*.db"):
        stale.unlink(missing_ok=True)
    os.environ[ENV] = str(root)
    return str(root)


def worker_exited(pid: int) -> None:
    """Forget a dead worker's live gauges."""
    if os.environ.get(ENV):
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(pid)  # type: ignore[no-untyped-call]
