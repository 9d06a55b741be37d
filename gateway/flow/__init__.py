"""One request, one Flow: the per-request record (``flow``), the one loop that drives it over
the pure ladder (``driver``), and its rendering at the edge (``render``)."""

from gateway.flow.flow import Attempt, ChatRequest, Flow, FlowEvent, Refusal

__all__ = ["Attempt", "ChatRequest", "Flow", "FlowEvent", "Refusal"]
