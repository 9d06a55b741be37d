"""The native codecs the Flow calls: the wire body for projected neutral messages.

Everything the client sent passes through; the history (``messages`` / ``input``) is
rebuilt from the projection, ``model`` becomes the upstream model, and the wire's own rules
(``anthropic_rules`` / ``responses_rules``) finish the body: on every attempt what can never
be valid, after a refusal (``refusal``: the provider's words) what this provider refused.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, ClassVar

from gateway.projection import project
from gateway.projection.anomalies import Anomaly
from gateway.providers.base import Provider
from gateway.wires.anthropic_rules import (
    drop_thinking,
    finish_request,
    refuses_signatures,
    signature,
    signatures,
    strict_request,
)
from gateway.wires.anthropic_view import AnthropicView, render_messages
from gateway.wires.base import Message, NativeSenders, WireView
from gateway.wires.reading import read_responses
from gateway.wires.refused import RefusedSecrets
from gateway.wires.responses_rules import (
    answerable_input,
    drop_encrypted,
    encrypted_contents,
    refuses_encrypted,
    strict_continuation,
    strict_input,
    without_lone_reasoning,
)
from gateway.wires.responses_view import render_input
from gateway.wires.to_chat import anthropic_to_chat, responses_to_chat

if TYPE_CHECKING:
    from gateway.routing import ModelRoute

Built = tuple[dict[str, Any], tuple[Anomaly, ...]]


def anthropic_body(body: dict[str, Any], view: AnthropicView, messages: list[Message],
                   refusal: str | None = None,
                   refused: Callable[[Any], bool] | None = None) -> Built:
    """``body`` (as repaired up front) with the projected ``messages`` rendered back and
    finished by the wire's rules (strict ones after a refusal), and what they repaired;
    ``refused``: thinking blocks the provider refused on an earlier turn (left out)."""
    out = dict(body)
    out["messages"] = render_messages(view, messages)
    strict: tuple[Anomaly, ...] = ()
    if refused is not None:
        out, strict = drop_thinking(out, refused)
    if refusal is not None:
        out, more = strict_request(out, refusal)
        strict += more
    out, finished = finish_request(out)
    return out, strict + finished


def responses_body(body: dict[str, Any], view: WireView, messages: list[Message],
                   refusal: str | None = None,
                   refused: Callable[[str], bool] | None = None) -> Built:
    """``body`` (as repaired up front) with the projected ``input`` rendered back (made
    stateless by the wire's strict rules after a refusal, without computer calls nothing
    valid answers), and what those repaired; ``refused``: encrypted contents the provider
    refused on an earlier turn (left out)."""
    out = dict(body)
    items = render_input(view, messages, body.get("input"))
    anomalies: tuple[Anomaly, ...] = ()
    if refused is not None and isinstance(items, list):
        items, anomalies = drop_encrypted(items, refused)
    if refusal is not None and isinstance(items, list):
        items, more = strict_input(items, refusal)
        anomalies += more
    if isinstance(items, list):
        items, dropped = answerable_input(items)
        anomalies += dropped
        if items is not body.get("input"):
            items, dropped = without_lone_reasoning(items)
            anomalies += dropped
    if items is not None or "input" in body:  # (a stored prompt may stand for the input)
        out["input"] = items
    return out, anomalies


@dataclass(slots=True)
class AnthropicCodec:
    """An Anthropic Messages request sent natively (``body``: as repaired up front)."""

    body: dict[str, Any]
    view: AnthropicView
    upstream_model: str
    provider: Provider
    results_by_id: bool = False  # tool_result blocks belong in the very next user turn
    senders: NativeSenders | None = None  # the group's other native deployments
    history_key: ClassVar[str] = "messages"
    refused: RefusedSecrets | None = None  # what the upstream models refused lately
    # The body is plain (``anthropic_plain``): sent with its history as read, nothing in it
    # for the finishing rules.
    plain: bool = False

    def sent_to(self, route: ModelRoute) -> AnthropicCodec:
        """The request as sent to another deployment (its sender, its model)."""
        assert self.senders is not None
        return replace(self, provider=self.senders.sender(route),
                       upstream_model=route.upstream_model)

    def upstream_body(self, messages: list[Message], refusal: str | None = None) -> Built:
        """The wire body for the projected messages, with the upstream model. A refusal of
        its thinking is remembered (``refused``): the session's later turns leave those
        blocks out for this model instead of being refused again."""
        memory, model = self.refused, self.upstream_model
        if memory is not None and refusal is not None and refuses_signatures(refusal):
            # (the client's blocks: projection never makes or edits thinking)
            memory.remember(model, signatures(self.body.get("messages")))
        if self.plain and refusal is None and not memory and self.view.unchanged(messages):
            return {**self.body, "model": model}, ()
        out, anomalies = anthropic_body(
            self.body, self.view, messages, refusal,
            None if not memory else lambda block: (
                (secret := signature(block)) is not None and memory.holds(model, secret)))
        out["model"] = self.upstream_model
        return out, anomalies

    def to_chat(self) -> dict[str, Any]:
        """The request as a Chat Completions body (for a deployment that speaks only chat)."""
        return anthropic_to_chat(self.body, self.view)


def compact_body(body: dict[str, Any]) -> Built:
    """A ``/responses/compact`` body with its ``input`` repaired as ``/responses`` repairs
    it: the provider refuses the same broken histories there ("No tool output found for
    function call ...", which ends Codex's remote compaction: openai/codex#5385). The same
    body and no repairs when it needs none, or when the history is held upstream."""
    if not isinstance(body.get("input"), list) or body.get("previous_response_id") \
            is not None or body.get("conversation") is not None:
        return body, ()
    repaired, view = read_responses(body)
    projected = project(view.messages)
    found = (*view.anomalies, *projected.anomalies)
    if not found:
        return body, ()
    out, finished = responses_body(repaired, view, projected.messages)
    return out, found + finished


@dataclass(slots=True)
class ResponsesCodec:
    """A Responses API request sent natively. ``stateful`` (``previous_response_id``, or a
    ``conversation`` of the Conversations API):
    the history lives upstream, so ``input`` is sent as the client wrote it (after a
    "Duplicate item" refusal, without the stored response's items sent again)."""

    body: dict[str, Any]
    view: WireView
    upstream_model: str
    provider: Provider
    stateful: bool = False
    results_by_id: bool = True  # outputs pair with calls by call_id, wherever they come
    senders: NativeSenders | None = None  # the group's other native deployments
    history_key: ClassVar[str] = "input"
    # Encrypted reasoning the upstream models refused lately (by model: an organization's
    # key is not told apart, so a group of several organizations drops it for all).
    refused: RefusedSecrets | None = None
    # The input is plain (``responses_plain``): sent as read, nothing in it for the rules on
    # the input about to be sent.
    plain: bool = False

    def sent_to(self, route: ModelRoute) -> ResponsesCodec:
        """The request as sent to another deployment (its sender, its model)."""
        assert self.senders is not None
        return replace(self, provider=self.senders.sender(route),
                       upstream_model=route.upstream_model)

    def upstream_body(self, messages: list[Message], refusal: str | None = None) -> Built:
        """The wire body for the projected input, with the upstream model."""
        if self.stateful:
            out = {**self.body, "model": self.upstream_model}
            items = out.get("input")
            if refusal is None or not isinstance(items, list):
                return out, ()
            out["input"], anomalies = strict_continuation(items, refusal)
            return out, anomalies
        memory, model = self.refused, self.upstream_model
        if memory is not None and refusal is not None and refuses_encrypted(refusal):
            # (the client's items: projection never makes or edits reasoning)
            memory.remember(model, encrypted_contents(self.body.get("input")))
        if self.plain and refusal is None and not memory and self.view.unchanged(messages):
            return {**self.body, "model": model}, ()
        out, anomalies = responses_body(
            self.body, self.view, messages, refusal,
            None if not memory else lambda secret: memory.holds(model, secret))
        out["model"] = self.upstream_model
        return out, anomalies

    def to_chat(self) -> dict[str, Any]:
        """The request as a Chat Completions body (for a deployment that speaks only chat)."""
        return responses_to_chat(self.body, self.view)
