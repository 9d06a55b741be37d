"""The referee: a local OpenAI-compatible upstream that enforces strict providers' wire
rules and answers violations with the providers' real error bodies (``gateway referee``)."""

from gateway.referee.app import (
    RecordedRequest,
    Referee,
    RefereeConfig,
    create_referee_app,
    run_referee,
)
from gateway.referee.bodies import Reply
from gateway.referee.rules import Violation, check

__all__ = [
    "RecordedRequest",
    "Referee",
    "RefereeConfig",
    "Reply",
    "Violation",
    "check",
    "create_referee_app",
    "run_referee",
]
