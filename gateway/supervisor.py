"""``gateway serve --workers N``: worker processes sharing one port, kept up by the master.

Every worker binds the port with ``SO_REUSEPORT`` (the kernel spreads connections over
them). The master only supervises:

- a worker that dies is restarted after a back-off that doubles with each quick death of
  that worker (one that served for ``STABLE_AFTER`` seconds starts over at the base delay);
- when a worker keeps dying right after start (``MAX_QUICK_DEATHS`` in a row), the service
  cannot be kept up: the master stops the others and exits non-zero;
- SIGTERM/SIGINT are passed to the workers, each drains within its grace period, and
  whatever is left after that (plus a margin) is killed;
- workers exit when the master dies, even by ``kill -9``: ``PR_SET_PDEATHSIG`` on Linux, and
  a parent-pid watch everywhere (see :func:`die_with_parent`, :func:`parent_gone`).
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import logging
import multiprocessing
import os
import signal
import socket
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import wait
from multiprocessing.process import BaseProcess
from typing import Any

log = logging.getLogger("gateway.supervisor")

BACKOFF_BASE = 0.25  # seconds before the first restart of a worker
BACKOFF_CAP = 8.0
STABLE_AFTER = 30.0  # a worker that lived this long is healthy: its back-off starts over
MAX_QUICK_DEATHS = 5  # quick deaths in a row of one worker: the service cannot be kept up
# A worker exits within ``shutdown_grace`` + EXIT_MARGIN seconds of SIGTERM (streams end at
# the grace period, what is left is cancelled DRAIN_MARGIN seconds later, then the app
# closes); the master kills a worker still alive STOP_MARGIN seconds past the grace period
# (the gap leaves room for a loaded machine).
EXIT_MARGIN = 4.0
STOP_MARGIN = 8.0
EXIT_GAVE_UP = 1
_PR_SET_PDEATHSIG = 1


def die_with_parent(sig: int = signal.SIGTERM) -> None:
    """Ask Linux to send ``sig`` to this process when its parent dies (no-op elsewhere)."""
    if not sys.platform.startswith("linux"):
        return
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0)


def parent_gone(master_pid: int) -> bool:
    """True when the master that started this worker is no longer its parent."""
    return os.getppid() != master_pid


def check_port(host: str, port: int) -> str | None:
    """Why ``host:port`` cannot be served, or None. Binds (with ``SO_REUSEADDR`` and
    ``SO_REUSEPORT``, as the workers will: connections of a previous run still in TIME_WAIT
    do not count) without listening, so no connection is ever queued on this socket."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError as err:
        return f"cannot resolve {host}: {err}"
    family, _, _, _, address = infos[0]
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        try:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            probe.bind(address)
        except OSError as err:
            if err.errno == errno.EADDRINUSE:
                return f"{host}:{port} is already in use by another program"
            return f"cannot bind {host}:{port}: {err.strerror or err}"
    return None


@dataclass
class _Slot:
    """One worker position: its current process and its recent deaths."""

    index: int
    proc: BaseProcess | None = None
    started: float = 0.0
    quick_deaths: int = 0
    restart_at: float | None = None


class Supervisor:
    """Starts ``workers`` processes running ``target(*args, master_pid)`` and keeps them up."""

    def __init__(self, workers: int, target: Callable[..., None], args: tuple[Any, ...],
                 *, grace: float, clock: Callable[[], float] = time.monotonic,
                 on_exit: Callable[[int], None] | None = None) -> None:
        self._on_exit = on_exit  # told each dead worker's pid (e.g. to drop its metric files)
        self._ctx = multiprocessing.get_context("spawn")
        self._slots = [_Slot(i) for i in range(workers)]
        self._target = target
        self._args = args
        self._grace = grace
        self._clock = clock
        self._stopping = False

    def _start(self, slot: _Slot) -> None:
        proc = self._ctx.Process(target=self._target, args=(*self._args, os.getpid()),
                                 name=f"gateway-worker-{slot.index}")
        proc.start()
        slot.proc, slot.started, slot.restart_at = proc, self._clock(), None
        log.info("worker %d started (pid %d)", slot.index, proc.pid)

    def _on_signal(self, signum: int, _frame: Any) -> None:
        # Passed on at once: the supervising loop may sleep up to a second before it looks.
        self._stopping = True
        self._signal_workers()

    def _signal_workers(self) -> list[BaseProcess]:
        """SIGTERM every live worker; the workers signalled."""
        alive = [s.proc for s in self._slots if s.proc is not None and s.proc.is_alive()]
        for proc in alive:
            if proc.pid is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(proc.pid, signal.SIGTERM)
        return alive

    def run(self) -> int:
        """Serve until SIGTERM/SIGINT (exit 0) or until the workers cannot be kept up."""
        signal.signal(signal.SIGTERM, self._on_signal)
        signal.signal(signal.SIGINT, self._on_signal)
        for slot in self._slots:
            self._start(slot)
        code = 0
        while not self._stopping:
            sentinels = [s.proc.sentinel for s in self._slots if s.proc is not None]
            pending = [s.restart_at for s in self._slots if s.restart_at is not None]
            timeout = 1.0 if not pending else max(0.0, min(min(pending) - self._clock(), 1.0))
            wait(sentinels, timeout)
            if self._stopping:
                break
            if not self._reap():
                code = EXIT_GAVE_UP
                break
            now = self._clock()
            for slot in self._slots:
                if slot.restart_at is not None and now >= slot.restart_at:
                    self._start(slot)
        self._stop_all()
        return code

    def _reap(self) -> bool:
        """Notice dead workers and schedule their restarts; False when giving up."""
        now = self._clock()
        for slot in self._slots:
            proc = slot.proc
            if proc is None or proc.is_alive():
                continue
            proc.join()
            if self._on_exit is not None and proc.pid is not None:
                self._on_exit(proc.pid)
            lived = now - slot.started
            slot.quick_deaths = slot.quick_deaths + 1 if lived < STABLE_AFTER else 1
            slot.proc = None
            if slot.quick_deaths >= MAX_QUICK_DEATHS:
                log.error("worker %d died %d times in a row within %.0f s of starting (last "
                          "exit code %s): the service cannot be kept up, stopping",
                          slot.index, slot.quick_deaths, STABLE_AFTER, proc.exitcode)
                return False
            delay = min(BACKOFF_CAP, BACKOFF_BASE * 2 ** (slot.quick_deaths - 1))
            slot.restart_at = now + delay
            log.warning("worker %d (pid %s) exited with %s after %.1f s; restarting in "
                        "%.2f s", slot.index, proc.pid, proc.exitcode, lived, delay)
        return True

    def _stop_all(self) -> None:
        """SIGTERM every worker; kill what is left after the grace period and a margin."""
        alive = self._signal_workers()
        deadline = self._clock() + self._grace + STOP_MARGIN
        for proc in alive:
            proc.join(max(0.0, deadline - self._clock()))
            if proc.is_alive():
                log.error("worker pid %s did not stop within the grace period: killed",
                          proc.pid)
                proc.kill()
                proc.join()
            if self._on_exit is not None and proc.pid is not None:
                self._on_exit(proc.pid)
