"""``context_recall`` on the Interactions API: a ``dialects.recall_wire.Wire``.

- The tool is one more function tool, ``{"type": "function", "name": "context_recall",
  "description": ..., "parameters": ...}``, after the client's ``tools``. Not offered
  when the client declared no function tool, a ``generation_config.tool_choice`` of
  ``none`` or one naming ``allowed_tools``, an ``agent`` (not a model), ``background``
  (the reply is not the answer), ``cached_content`` (its tools are fixed in the cache),
  or a stream the server stores (``store`` not false): a streamed reply goes out under
  the first reply's id, and chaining from that stored interaction would meet an
  unanswered call (the Responses wire's rule).
- A reply's calls are its ``function_call`` steps (a recall call: ``id``, ``name``,
  ``arguments``). The follow-up is the request as sent, then:
  - chained, when the server stores the interaction (``store`` not false) and the reply
    holds no call of the client's: ``previous_interaction_id`` is the interaction the
    recall round created, and ``input`` its ``function_result`` steps, one per recall
    call (``result``: the text). The final interaction the client gets continues that
    chain, so its id is the one the client's next ``previous_interaction_id`` names;
  - else whole: the client's ``input`` (as steps), then each round's steps (the client's
    own calls left out: they are asked again) and its results; ``previous_interaction_id``
    stays the client's.
- The final interaction the client gets names the client's ``previous_interaction_id``
  and tools (``shown``), never the round's.
- Stream: held from the ``step.start`` of a ``function_call`` step named
  ``context_recall`` (``recall_stream``); the client sees one interaction.
"""

from __future__ import annotations

import json
from typing import Any

from context_engine.proxy.dialects.interactions.recall_stream import Continuity, Reader, turn_of
from context_engine.proxy.dialects.interactions.steps import is_steps
from context_engine.proxy.dialects.recall_wire import (
    DESCRIPTION,
    PARAMETERS,
    Round,
    Turn,
    WireBase,
    finish_body,
    has_tools,
    repeated,
    without_tool,
)
from context_engine.proxy.engine.recall_resolve import TOOL_NAME

TOOL: dict[str, Any] = {"type": "function", "name": TOOL_NAME, "description": DESCRIPTION,
                        "parameters": PARAMETERS}
STATE = "previous_interaction_id"


def _rules_out(choice: Any) -> bool:
    """A ``tool_choice`` under which the model may not call ours."""
    if isinstance(choice, str):
        return choice == "none"
    return isinstance(choice, dict) and "allowed_tools" in choice


def client_steps(given: Any) -> list[Any]:
    """The client's ``input`` as a list of steps."""
    if isinstance(given, str):
        return [{"type": "user_input", "content": [{"type": "text", "text": given}]}]
    if isinstance(given, dict):
        return [{"type": "user_input", "content": [given]}]
    if isinstance(given, list):
        return list(given) if is_steps(given) else [{"type": "user_input", "content": list(given)}] \
            if given else []
    return []


def _results(turn: Turn, results: list[str]) -> list[dict[str, Any]]:
    return [{"type": "function_result", "call_id": c.id, "name": TOOL_NAME, "result": r}
            for c, r in zip(turn.calls, results)]


class InteractionsWire(WireBase):

    def __init__(self) -> None:
        super().__init__("interactions", TOOL, Reader, Continuity)

    def can_offer(self, data: dict[str, Any]) -> bool:
        tools = [t for t in data.get("tools") or () if isinstance(t, dict) and t.get("type") == "function"] \
            if isinstance(data.get("tools"), list) else []
        if not tools or not has_tools(data):
            return False
        if data.get("agent") or data.get("background") or data.get("cached_content"):
            return False
        config = data.get("generation_config")
        if isinstance(config, dict) and _rules_out(config.get("tool_choice")):
            return False
        return not (data.get("stream") is True and data.get("store") is not False)

    def turn(self, data: dict[str, Any]) -> Turn:
        return turn_of(data)

    def shown(self, final: dict[str, Any], sent: bytes) -> dict[str, Any]:
        """The final interaction as the client's own: its ``previous_interaction_id`` the
        client's (null when it sent none), its ``tools`` without ours."""
        out: dict[str, Any] = {}
        if STATE in final:
            out[STATE] = json.loads(sent).get(STATE)
        if isinstance(final.get("tools"), list):
            out["tools"] = without_tool(final["tools"])
        return out

    def follow_up(self, sent: dict[str, Any], rounds: list[Round], last: bool) -> bytes:
        body = dict(sent)
        turn, results = rounds[-1]
        reply_id = turn.reply.get("id") if isinstance(turn.reply, dict) else None
        if sent.get("store") is not False and isinstance(reply_id, str) and reply_id and not turn.others:
            body[STATE] = reply_id
            body["input"] = _results(turn, results)
            return finish_body(body, last)
        items = client_steps(sent.get("input"))
        for turn, results in rounds:
            steps = turn.reply.get("steps") if isinstance(turn.reply, dict) else None
            items += repeated(steps if isinstance(steps, list) else [], ("function_call",))
            items += _results(turn, results)
        body["input"] = items
        return finish_body(body, last)


INTERACTIONS = InteractionsWire()
