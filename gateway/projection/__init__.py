"""Projection: pure repair of an OpenAI chat history into a wire-valid shape (SPEC §2)."""

from gateway.projection.anomalies import Anomaly, Projection
from gateway.projection.exchanges import SYNTHETIC_TOOL_RESULT_TEXT
from gateway.projection.project import project, project_strict
from gateway.projection.render import EMPTY_TOOL_OUTPUT_TEXT, TOOL_ERROR_PREFIX
from gateway.projection.strict import USER_PLACEHOLDER_TEXT

__all__ = [
    "EMPTY_TOOL_OUTPUT_TEXT",
    "SYNTHETIC_TOOL_RESULT_TEXT",
    "TOOL_ERROR_PREFIX",
    "USER_PLACEHOLDER_TEXT",
    "Anomaly",
    "Projection",
    "project",
    "project_strict",
]
