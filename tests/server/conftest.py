"""Fixtures of the server tests: the three upstreams of :mod:`tests.server.three_upstreams`
(a module that defines its own ``referee``, ``claude`` or ``gpt`` uses that one)."""

from __future__ import annotations

from tests.server.three_upstreams import claude, gpt, referee

__all__ = ["claude", "gpt", "referee"]
