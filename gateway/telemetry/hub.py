"""The gateway's telemetry in one place: metrics, the access log and the inspector, each a
rendering of a finished :class:`~gateway.telemetry.record.RequestRecord` (the view of a
request's Flow that the edge builds when the request is over)."""

from __future__ import annotations

import logging
from dataclasses import replace

from gateway.config import GatewayConfig
from gateway.telemetry.access_log import log_access
from gateway.telemetry.capture import Capturer
from gateway.telemetry.inspector import Inspector
from gateway.telemetry.metrics import Metrics
from gateway.telemetry.prefix import PrefixTracker
from gateway.telemetry.record import RequestRecord

log = logging.getLogger("gateway.telemetry")


def config_secrets(config: GatewayConfig) -> list[str]:
    """Every secret of the config (:meth:`GatewayConfig.secrets`): redacted from captures."""
    return config.secrets()


class Telemetry:
    """Built once per process; :meth:`finish` is called once per request."""

    def __init__(self, config: GatewayConfig) -> None:
        g = config.gateway
        self.metrics = Metrics()
        self.prefix = PrefixTracker()
        self.inspector = Inspector(g.ui_history, config.sessions.data_dir) if g.ui else None
        self.capturer = (Capturer(config_secrets(config), g.capture_max_chars)
                         if g.ui and g.capture_bodies else None)

    async def start(self) -> None:
        """Open the inspector's shared file."""
        if self.inspector is not None:
            await self.inspector.start()

    async def close(self) -> None:
        """Flush the inspector."""
        if self.inspector is not None:
            await self.inspector.close()

    def finish(self, rec: RequestRecord) -> None:
        """Render one finished request: metrics, the access log line, the inspector entry.
        Never raises: telemetry must not take a request (or the loop's callbacks) down."""
        try:
            self._finish(rec)
        except Exception:
            log.exception("telemetry: could not record request %s", rec.request_id)

    def _finish(self, rec: RequestRecord) -> None:
        if rec.wire:
            self.metrics.observe_request(rec)
            if self.inspector is not None:
                if self.capturer is not None:
                    if rec.client_messages is not None:
                        rec.client_messages = self.capturer.messages(rec.client_messages)
                    if rec.upstream_messages is not None:
                        rec.upstream_messages = self.capturer.messages(rec.upstream_messages)
                else:
                    rec.client_messages = rec.upstream_messages = None
                    if rec.prefix is not None:  # message text only with capture_bodies
                        rec.prefix = replace(rec.prefix, before=None, after=None)
                self.inspector.add(rec)
        log_access(rec)
