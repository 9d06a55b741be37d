"""The recall suites reuse the compaction suites' fixtures (a referee and gateways)."""

from tests.compaction.conftest import gateways

__all__ = ["gateways"]
