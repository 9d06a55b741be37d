"""The native codecs the Flow calls: the wire body for projected neutral messages.

Everything the client sent passes through; only the history (``messages`` / ``input``) is
rebuilt from the projection, and ``model`` becomes the upstream model.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gateway.providers.base import Provider
from gateway.wires.anthropic_view import AnthropicView, render_messages
from gateway.wires.base import Message, WireView
from gateway.wires.responses_view import render_input


@dataclass(slots=True)
class AnthropicCodec:
    """An Anthropic Messages request sent natively."""

    body: dict[str, Any]
    view: AnthropicView
    upstream_model: str
    provider: Provider

    def upstream_body(self, messages: list[Message]) -> dict[str, Any]:
        """The client's body with the repaired ``messages`` and the upstream model."""
        body = dict(self.body)
        body["model"] = self.upstream_model
        body["messages"] = render_messages(self.view, messages)
        return body


@dataclass(slots=True)
class ResponsesCodec:
    """A Responses API request sent natively. ``stateful`` (``previous_response_id``):
    the history lives upstream, so ``input`` is sent as the client wrote it."""

    body: dict[str, Any]
    view: WireView
    upstream_model: str
    provider: Provider
    stateful: bool = False

    def upstream_body(self, messages: list[Message]) -> dict[str, Any]:
        """The client's body with the repaired ``input`` and the upstream model."""
        body = dict(self.body)
        body["model"] = self.upstream_model
        if not self.stateful:
            body["input"] = render_input(self.view, messages, self.body.get("input"))
        return body
